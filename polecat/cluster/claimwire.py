"""Content claims and their answers as bytes on the wire (polecat/cluster/claims.py decides them).

A claim frame is a hand-off frame (polecat/cluster/batch.py: header, checksum, signature slot) under its
own magic ``PCCL``, version 1, so one socket carries both (:func:`is_claim_frame`). Its payload is
msgpack ``[kind, sender, items]``: kind 1, claims, items ``[[seq, digest, url, fetched_at], ...]``; kind 2,
answers, items ``[[seq, url, fetched_at], ...]`` with ``url`` and ``fetched_at`` nil for "first"; kind 3,
durable first pages (claims rule 7), items ``[digest, ...]``. Near-duplicate claims (claims rules 9-12)
travel in kind 4 of the same version, which 0.3.0 members refuse as a frame of unknown kind ("bad"; their
claimer counts them "none" and goes on to the exact claim, claims rule 11): one frame per peer and
tick carries every section for that peer, items ``[claims, answers, withdrawn, deposits, deposited,
exact claims, exact answers, durable]`` (the last three as the items of kinds 1-3; a frame of the first
five alone is read with them empty):
near claims ``[[seq, digest, url, fetched_at, index, verify], ...]``; their answers ``[[seq, nil], ...]``
or ``[[seq, [digest, url, fetched_at, holder, bins, bits]], ...]``; withdrawn bases ``[digest, ...]``;
deposits ``[[seq, url, fetched_at, status, [[name, value], ...], content_hash, size, truncated,
duplicate_of, body], ...]`` (a near copy's revisit record and its own body, nil for an exact copy);
deposits answered ``[[seq,
stored], ...]``. So a member sends each peer one frame a tick, whatever it owes it (claimlink.py); to a
peer that refused a kind 4 frame "bad" (0.3.0, or near claims off there) or that sent kinds 1-3 itself,
the exact sections go as kinds 1-3.
Anything that does not decode raises :class:`~polecat.cluster.batch.HandoffError` (:class:`ClaimError`
for the payload) and changes nothing; a release without claims refuses such a frame as a hand-off batch
with a bad magic ("bad"), and its sender stores the pages in full (claims rule 5).

Rules:

1. The payload is read and written by the native kernel (polecat/cluster/_claimwire.c, polecat/native.py)
   when it is built: the same bytes, the same records (built without their dataclass ``__init__``), and
   this module's Python path the specification. The kernel takes only the layout above with the types it
   names (a payload to read) or records of the exact types (a frame to write); anything else, a frame to
   refuse among it, it hands to the Python path, which decodes, packs or refuses it: so a peer's frame is
   refused with the same error either way, and the kernel refuses none itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from polecat import native
from polecat.cluster.batch import HandoffError, Signer, Verifier, frame, unframe
from polecat.cluster.claims import Answer, Claim, NearAnswer, NearClaim, Original
from polecat.dedup.minhash import VERIFY_BYTES
from polecat.store.base import FetchRecord

MAGIC = b"PCCL"
VERSION = 1
CLAIMS, ANSWERS, DURABLE, NEAR = 1, 2, 3, 4


class ClaimError(HandoffError):
    """A claim frame's payload does not decode."""


@dataclass(frozen=True, slots=True)
class ClaimFrame:
    """A decoded claim frame, or the sections of one to send (:func:`encode_near`)."""

    sender: str
    claims: tuple[Claim, ...] = ()
    answers: tuple[Answer, ...] = ()
    durable: tuple[bytes, ...] = ()
    near: tuple[NearClaim, ...] = ()
    near_answers: tuple[NearAnswer, ...] = ()
    withdrawn: tuple[bytes, ...] = ()
    deposits: tuple[tuple[int, FetchRecord, bytes | None], ...] = ()
    deposited: tuple[tuple[int, bool], ...] = ()
    separate: bool = False
    """Decoded from a frame of kind 1-3: its sender sends the exact sections apart (claimlink.py)."""


def is_claim_frame(data: bytes) -> bool:
    return data[:4] == MAGIC


def encode_claims(sender: str, claims: Sequence[Claim], sign: Signer | None = None) -> bytes:
    return _encode(CLAIMS, sender, claims, sign)


def _claim_items(claims: Sequence[Claim]) -> list[list[object]]:
    return [[c.seq, c.digest, c.url, c.fetched_at] for c in claims]


def encode_answers(sender: str, answers: Sequence[Answer], sign: Signer | None = None) -> bytes:
    return _encode(ANSWERS, sender, answers, sign)


def _answer_items(answers: Sequence[Answer]) -> list[list[object]]:
    return [[a.seq, None, None] if a.original is None else [a.seq, a.original[0], a.original[1]]
            for a in answers]


def encode_durable(sender: str, digests: Sequence[bytes], sign: Signer | None = None) -> bytes:
    return _encode(DURABLE, sender, digests, sign)


def encode_near(f: ClaimFrame, sign: Signer | None = None) -> bytes:
    """Every section of ``f`` as one kind 4 frame (the exact ones left off when all three are empty)."""
    return _encode(NEAR, f.sender, f, sign)


def _near_items(f: ClaimFrame) -> list[Any]:
    claims = [[c.seq, c.digest, c.url, c.fetched_at, c.index, c.verify] for c in f.near]
    answers = [[a.seq, None if (o := a.original) is None else
                [o.digest, o.url, o.fetched_at, o.holder, *o.rank]] for a in f.near_answers]
    deposits = [[seq, r.url, r.fetched_at, r.status, [list(h) for h in r.headers], r.content_hash, r.size,
                 r.truncated, r.duplicate_of, body] for seq, r, body in f.deposits]
    deposited = [list(a) for a in f.deposited]
    exact = [_claim_items(f.claims), _answer_items(f.answers), list(f.durable)] \
        if f.claims or f.answers or f.durable else []
    return [claims, answers, list(f.withdrawn), deposits, deposited, *exact]


_ITEMS: dict[int, Callable[[Any], list[Any]]] = {CLAIMS: _claim_items, ANSWERS: _answer_items, DURABLE: list,
                                                 NEAR: _near_items}
"""The Python path's items of each kind (rule 1), from what :func:`_encode` is given."""


def _encode(kind: int, sender: str, items: Any, sign: Signer | None) -> bytes:
    payload = None if _native_payload is None else _native_payload(kind, sender, items)  # rule 1
    if payload is None:
        payload = msgpack.packb([kind, sender, _ITEMS[kind](items)], use_bin_type=True)
    return frame(MAGIC, VERSION, payload, sign)


def decode(data: bytes, verify: Verifier | None = None) -> ClaimFrame:
    """Parse and check a claim frame; raises :class:`~polecat.cluster.batch.HandoffError` on anything
    else."""
    payload = unframe(data, MAGIC, VERSION, "claim frame", verify)
    if _native_frame is not None and (f := _native_frame(payload)) is not None:  # rule 1
        return f
    try:
        kind, sender, items = msgpack.unpackb(payload, use_list=True)
        if not isinstance(sender, str) or not isinstance(items, list):
            raise TypeError("sender or items of the wrong type")
        if kind == CLAIMS:
            return ClaimFrame(sender, claims=tuple(_claim(i) for i in items), separate=True)
        if kind == ANSWERS:
            return ClaimFrame(sender, answers=tuple(_answer(i) for i in items), separate=True)
        if kind == DURABLE:
            return ClaimFrame(sender, durable=_digests(items), separate=True)
        if kind == NEAR:
            claims, answers, withdrawn, deposits, deposited, *exact = items
            exact_claims, exact_answers, durable = exact or ([], [], [])
            return ClaimFrame(sender, near=tuple(map(_near, claims)),
                              near_answers=tuple(map(_near_answer, answers)), withdrawn=_digests(withdrawn),
                              deposits=tuple(map(_deposit, deposits)),
                              deposited=tuple(map(_deposited, deposited)),
                              claims=tuple(map(_claim, exact_claims)),
                              answers=tuple(map(_answer, exact_answers)), durable=_digests(durable))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ClaimError(f"claim payload does not decode: {exc}") from exc
    raise ClaimError(f"claim frame of unknown kind {kind}")


def _digests(items: list[object]) -> tuple[bytes, ...]:
    if not all(isinstance(d, bytes) and len(d) == 32 for d in items):
        raise TypeError("durable and withdrawn items are 32-byte digests")
    return tuple(items)  # type: ignore[arg-type]


def _claim(item: list[object]) -> Claim:
    seq, digest, url, fetched_at = item
    if not (isinstance(seq, int) and isinstance(digest, bytes) and len(digest) == 32 and isinstance(url, str)
            and isinstance(fetched_at, (int, float))):
        raise TypeError("a claim is [seq, 32-byte digest, url, time]")
    return Claim(seq, digest, url, float(fetched_at))


def _answer(item: list[object]) -> Answer:
    seq, url, fetched_at = item
    if not isinstance(seq, int):
        raise TypeError("an answer's seq is an integer")
    if url is None and fetched_at is None:
        return Answer(seq, None)
    if not (isinstance(url, str) and isinstance(fetched_at, (int, float))):
        raise TypeError("an answer is [seq, url, time] or [seq, nil, nil]")
    return Answer(seq, (url, float(fetched_at)))


def _near(item: list[object]) -> NearClaim:
    seq, digest, url, fetched_at, index, verify = item
    if not (isinstance(seq, int) and isinstance(digest, bytes) and len(digest) == 32 and isinstance(url, str)
            and isinstance(fetched_at, (int, float)) and isinstance(index, int) and 0 <= index < 1 << 64
            and isinstance(verify, bytes) and len(verify) == VERIFY_BYTES):
        raise TypeError("a near claim is [seq, 32-byte digest, url, time, 64-bit index, sketch]")
    return NearClaim(seq, digest, url, float(fetched_at), index, verify)


def _near_answer(item: list[object]) -> NearAnswer:
    seq, original = item
    if not isinstance(seq, int):
        raise TypeError("a near answer's seq is an integer")
    if original is None:
        return NearAnswer(seq, None)
    if not isinstance(original, list):
        raise TypeError("a near answer's original is a list")
    digest, url, fetched_at, holder, bins, bits = original
    if not (isinstance(digest, bytes) and len(digest) == 32 and isinstance(url, str)
            and isinstance(fetched_at, (int, float)) and isinstance(holder, str) and isinstance(bins, int)
            and isinstance(bits, int)):
        raise TypeError("a near answer's original is [digest, url, time, holder, bins, bits]")
    return NearAnswer(seq, Original(digest, url, float(fetched_at), holder, (bins, bits)))


def _deposit(item: list[object]) -> tuple[int, FetchRecord, bytes | None]:
    seq, url, fetched_at, status, headers, digest, size, truncated, duplicate_of, body = item
    if not (isinstance(seq, int) and isinstance(url, str) and isinstance(fetched_at, (int, float))
            and isinstance(status, int) and isinstance(headers, list)
            and all(isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h)
                    for h in headers)
            and isinstance(digest, bytes) and len(digest) == 32 and isinstance(size, int)
            and isinstance(truncated, bool) and isinstance(duplicate_of, str)
            and (body is None or isinstance(body, bytes))):
        raise TypeError("a deposit is [seq, url, time, status, headers, digest, size, truncated, original, "
                        "body]")
    record = FetchRecord(url, float(fetched_at), status, tuple((k, v) for k, v in headers), digest, size,
                         truncated, duplicate_of, "revisit")
    return seq, record, body


def _deposited(item: list[object]) -> tuple[int, bool]:
    seq, stored = item
    if not (isinstance(seq, int) and isinstance(stored, bool)):
        raise TypeError("a deposit's answer is [seq, stored]")
    return seq, stored


# Last: the kernel is bound to the records it builds and reads (rule 1), all defined by now.
_kernel = native.load("polecat.cluster._claimwire")
if _kernel is not None:
    _kernel.bind(ClaimFrame, Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord, VERIFY_BYTES)
_native_frame: Callable[[bytes], ClaimFrame | None] | None = None if _kernel is None else _kernel.frame
_native_payload: Callable[[int, str, Any], bytes | None] | None = None if _kernel is None else _kernel.payload
