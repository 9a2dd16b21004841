"""Order-preserving unsigned varints: the numbers of a ``queue`` key (polecat/frontier/keys.py rule 1).

Rules:
1. A number ``n`` below ``2**56`` is written in the fewest bytes ``L`` (1 to 8) whose ``7 * L`` low bits hold
   it, big-endian, the first byte's top ``L - 1`` bits set and the next one clear; from ``2**56`` on it is
   ``0xFF`` and 8 bytes big-endian. So the first byte gives the length (:data:`LENGTH`), a shorter encoding
   sorts before every longer one and two of one length sort as their numbers: bytewise order is number
   order, and no encoding is the prefix of another (a key range by a number's encoding holds that number's
   keys only). Issue 39: a host's number below ``2**21`` in 3 bytes, a FIFO seq below ``2**28`` in 4, where
   fixed fields took 4 and 6.
"""

from __future__ import annotations

LONGEST = 9
"""The bytes of the biggest number (``2**64 - 1``)."""

LENGTH = bytes(min(LONGEST, 1 + next(i for i in range(9) if not (b << i) & 0x80)) for b in range(256))
"""The length of an encoding, by its first byte (rule 1)."""

_FORMS = tuple((1 << 7 * n, (0xFF00 >> (n - 1) & 0xFF) << 8 * (n - 1), n) for n in range(1, 9))
"""``(limit, marker, length)`` of each length up to 8 bytes (rule 1)."""


def encode(n: int) -> bytes:
    """The encoding of ``n`` (``0 <= n < 2**64``, rule 1)."""
    for limit, marker, length in _FORMS:
        if n < limit:
            return (marker | n).to_bytes(length, "big")
    return b"\xff" + n.to_bytes(8, "big")


def decode_at(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The number encoded at ``pos`` of ``data`` and the position after it (rule 1)."""
    length = LENGTH[data[pos]]
    end = pos + length
    if length == LONGEST:
        return int.from_bytes(data[pos + 1 : end], "big"), end
    return int.from_bytes(data[pos:end], "big") & ((1 << 7 * length) - 1), end

