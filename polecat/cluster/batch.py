"""The hand-off batch: URLs one member sends to the owner of their slices, as bytes on the wire.

Format (version 1), all integers big-endian::

    magic "PCHB" | version u8 | sig_len u8 | payload_len u32 | xxh3_64(payload) u64 | signature | payload

``payload`` is msgpack: ``[sender, seq, [[url, depth, importance, hops], ...]]``; a seed (one an
operator added on a member that does not own it, forwarded to its owner) carries a fifth item, ``1``,
and a page requisite (polecat/frontier/requisites.py) a fifth item ``2``. A release before requisites
reads an item ``2`` as no mark: its owner judges that URL as a discovered link.
The checksum catches a torn or corrupted frame; the signature slot is empty here (one machine, trusted
processes) and carries the HMAC of header-without-signature + payload in the multi-machine cluster,
through the ``sign``/``verify`` callables (:mod:`polecat.cluster.auth`). Anything that does not decode
raises :class:`HandoffError` (:class:`SignatureError` when the signature is missing or wrong) and
changes nothing.

In the etcd cluster a batch also travels with its sender's fencing token (ownership rule 9 of
:mod:`polecat.cluster.ownership`), outside the frame so that the frame's format is unchanged: the
request's :data:`FENCE_HEADER` is ``<node> <lease, hex> <revision> <hex HMAC>``, the HMAC (same secret)
of those three fields and the frame's fixed header (which holds the payload's checksum), so a token
cannot be moved to another batch. A batch without it (a node of 0.2.0) is read as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import msgpack
import xxhash

from polecat.errors import PolecatError
from polecat.frontier.bundle import Fence

MAGIC = b"PCHB"
VERSION = 1
_HEADER = struct.Struct(">4sBBIQ")
HEADER_BYTES = _HEADER.size
"""A frame's fixed header: magic, version, lengths and its payload's checksum."""
MAX_BATCH_BYTES = 16 * 1024 * 1024
"""Frames above this are refused before decoding (a hostile or broken peer cannot make us allocate)."""

_SEED = 1
_REQUISITE = 2
"""The fifth item of a URL entry: what marks it."""

Signer = Callable[[bytes], bytes]
Verifier = Callable[[bytes, bytes], bool]


class HandoffError(PolecatError):
    """A hand-off batch is malformed, of an unknown version, fails its checksum or its signature."""


class SignatureError(HandoffError):
    """A receiver that verifies signatures got a frame whose signature is missing or wrong."""


@dataclass(frozen=True, slots=True)
class HandoffUrl:
    """A discovered URL on its way to its owner, with what the owner needs to queue it."""

    url: str
    depth: int
    importance: float
    hops: int = 0
    seed: bool = False
    """A seed forwarded to its owner: it joins the owner's scope and is queued as a seed."""
    requisite: bool = False
    """A page requisite: its owner judges it as one (polecat/frontier/requisites.py rule 3)."""


@dataclass(frozen=True, slots=True)
class Batch:
    sender: str
    seq: int
    """The sender's sequence number for this batch (per receiver); acks name it."""
    urls: tuple[HandoffUrl, ...]


FENCE_HEADER = "X-Polecat-Fence"
"""The request header that carries a batch's fencing token (see the module docstring)."""


def fence_header(sign: Signer, fence: Fence, frame: bytes) -> str:
    """The :data:`FENCE_HEADER` value for sending ``frame`` under ``fence``."""
    fields = f"{fence.node} {fence.lease:x} {fence.revision}"
    return f"{fields} {sign(_fence_material(fields, frame)).hex()}"


def read_fence_header(value: str, frame: bytes, verify: Verifier) -> Fence:
    """The token of a :data:`FENCE_HEADER` sent with ``frame``: :class:`HandoffError` when it is
    malformed, :class:`SignatureError` when its HMAC is not that of these fields and this frame."""
    parts = value.strip().split(" ")
    if len(parts) != 4 or len(value) > 256:
        raise HandoffError(f"{FENCE_HEADER} is not '<node> <lease> <revision> <hmac>'")
    node, lease, revision, sig = parts
    try:
        token = Fence(node, int(lease, 16), int(revision))
        raw = bytes.fromhex(sig)
    except ValueError as exc:
        raise HandoffError(f"{FENCE_HEADER} is malformed: {exc}") from exc
    if not verify(_fence_material(" ".join(parts[:3]), frame), raw):
        raise SignatureError(f"{FENCE_HEADER} does not verify for this batch")
    return token


def _fence_material(fields: str, frame: bytes) -> bytes:
    return b"fence " + fields.encode() + b" " + frame[: _HEADER.size]


def encode_urls(urls: tuple[HandoffUrl, ...] | list[HandoffUrl]) -> bytes:
    """msgpack of the URL list alone (what the outbox stores per batch)."""
    packed: bytes = msgpack.packb([_item(u) for u in urls], use_bin_type=True)
    return packed


def _item(u: HandoffUrl) -> list[object]:
    item: list[object] = [u.url, u.depth, u.importance, u.hops]
    if u.seed or u.requisite:
        item.append(_SEED if u.seed else _REQUISITE)
    return item


def _url(item: list[object]) -> HandoffUrl:
    url, depth, importance, hops, *mark = item
    if len(mark) > 1 or not isinstance(importance, (int, float)):
        raise ValueError("a URL entry has 4 or 5 items, the third a number")
    return HandoffUrl(url, depth, float(importance), hops, mark == [_SEED],  # type: ignore[arg-type]
                      mark == [_REQUISITE])


def decode_urls(raw: bytes) -> tuple[HandoffUrl, ...]:
    """The URL list of :func:`encode_urls` (an outbox's own bytes, already checked when written)."""
    return tuple(_url(item) for item in msgpack.unpackb(raw, use_list=True))


def encode_batch(sender: str, seq: int, urls_msgpack: bytes, sign: Signer | None = None) -> bytes:
    """Frame a batch from the outbox's stored URL list (:func:`encode_urls`), without re-encoding it."""
    # A 3-element msgpack array (fixarray 0x93): sender, seq (a 2-array's items), then the URL list.
    head: bytes = msgpack.packb([sender, seq])
    return frame(MAGIC, VERSION, b"\x93" + head[1:] + urls_msgpack, sign)


def frame(magic: bytes, version: int, payload: bytes, sign: Signer | None = None) -> bytes:
    """``payload`` in a frame of this module's format under ``magic`` (a hand-off batch, or a claim frame
    of polecat/cluster/claimwire.py, which shares the socket)."""
    checksum = xxhash.xxh3_64_intdigest(payload)
    sig = sign(_HEADER.pack(magic, version, 0, len(payload), checksum) + payload) if sign else b""
    if len(sig) > 255:
        raise HandoffError("signature longer than 255 bytes")
    return _HEADER.pack(magic, version, len(sig), len(payload), checksum) + sig + payload


def unframe(data: bytes, magic: bytes, version: int, what: str, verify: Verifier | None) -> bytes:
    """The checked payload of a :func:`frame` named ``what`` in messages; raises :class:`HandoffError`
    (:class:`SignatureError` for the signature) on anything else."""
    if len(data) < _HEADER.size:
        raise HandoffError(f"{what} of {len(data)} bytes is shorter than its header")
    if len(data) > MAX_BATCH_BYTES:
        raise HandoffError(f"{what} of {len(data)} bytes exceeds {MAX_BATCH_BYTES}")
    got_magic, got_version, sig_len, length, checksum = _HEADER.unpack_from(data)
    if got_magic != magic:
        raise HandoffError(f"not a {what} (bad magic)")
    if got_version != version:
        raise HandoffError(f"{what} version {got_version}, this polecat reads {version}")
    sig = data[_HEADER.size : _HEADER.size + sig_len]
    payload = data[_HEADER.size + sig_len :]
    if len(payload) != length:
        raise HandoffError(f"{what} payload is {len(payload)} bytes, header says {length}")
    # The signature before the checksum: a frame from someone without the secret is refused as such
    # (SignatureError), whatever else is wrong with it.
    if verify is not None and not (sig and verify(_HEADER.pack(magic, version, 0, length, checksum) + payload,
                                                  sig)):
        raise SignatureError(f"{what} signature " + ("does not verify" if sig else "is missing"))
    if xxhash.xxh3_64_intdigest(payload) != checksum:
        raise HandoffError(f"{what} checksum mismatch")
    return payload


def decode_batch(data: bytes, verify: Verifier | None = None) -> Batch:
    """Parse and check a frame; raises :class:`HandoffError` on anything but a valid batch."""
    payload = unframe(data, MAGIC, VERSION, "hand-off batch", verify)
    try:
        sender, seq, items = msgpack.unpackb(payload, use_list=True)
        urls = tuple(_url(item) for item in items)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise HandoffError(f"batch payload does not decode: {exc}") from exc
    if not isinstance(sender, str) or not isinstance(seq, int) or not all(
        isinstance(u.url, str) and isinstance(u.depth, int) and isinstance(u.hops, int) for u in urls
    ):
        raise HandoffError("batch payload has fields of the wrong type")
    return Batch(sender, seq, urls)
