"""Content claims and their answers as bytes on the wire (polecat/cluster/claims.py decides them).

A claim frame is a hand-off frame (polecat/cluster/batch.py: header, checksum, signature slot) under its
own magic ``PCCL``, version 1, so one socket carries both (:func:`is_claim_frame`). Its payload is
msgpack ``[kind, sender, items]``: kind 1, claims, items ``[[seq, digest, url, fetched_at], ...]``; kind 2,
answers, items ``[[seq, url, fetched_at], ...]`` with ``url`` and ``fetched_at`` nil for "first"; kind 3,
durable first pages (claims rule 7), items ``[digest, ...]``.
Anything that does not decode raises :class:`~polecat.cluster.batch.HandoffError` (:class:`ClaimError`
for the payload) and changes nothing; a release without claims refuses such a frame as a hand-off batch
with a bad magic ("bad"), and its sender stores the pages in full (claims rule 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from polecat.cluster.batch import HandoffError, Signer, Verifier, frame, unframe
from polecat.cluster.claims import Answer, Claim

MAGIC = b"PCCL"
VERSION = 1
CLAIMS, ANSWERS, DURABLE = 1, 2, 3


class ClaimError(HandoffError):
    """A claim frame's payload does not decode."""


@dataclass(frozen=True, slots=True)
class ClaimFrame:
    sender: str
    claims: tuple[Claim, ...] = ()
    answers: tuple[Answer, ...] = ()
    durable: tuple[bytes, ...] = ()


def is_claim_frame(data: bytes) -> bool:
    return data[:4] == MAGIC


def encode_claims(sender: str, claims: list[Claim], sign: Signer | None = None) -> bytes:
    items = [[c.seq, c.digest, c.url, c.fetched_at] for c in claims]
    return frame(MAGIC, VERSION, msgpack.packb([CLAIMS, sender, items], use_bin_type=True), sign)


def encode_answers(sender: str, answers: list[Answer], sign: Signer | None = None) -> bytes:
    items = [[a.seq, None, None] if a.original is None else [a.seq, a.original[0], a.original[1]]
             for a in answers]
    return frame(MAGIC, VERSION, msgpack.packb([ANSWERS, sender, items], use_bin_type=True), sign)


def encode_durable(sender: str, digests: list[bytes], sign: Signer | None = None) -> bytes:
    return frame(MAGIC, VERSION, msgpack.packb([DURABLE, sender, digests], use_bin_type=True), sign)


def decode(data: bytes, verify: Verifier | None = None) -> ClaimFrame:
    """Parse and check a claim frame; raises :class:`~polecat.cluster.batch.HandoffError` on anything
    else."""
    payload = unframe(data, MAGIC, VERSION, "claim frame", verify)
    try:
        kind, sender, items = msgpack.unpackb(payload, use_list=True)
        if not isinstance(sender, str) or not isinstance(items, list):
            raise TypeError("sender or items of the wrong type")
        if kind == CLAIMS:
            return ClaimFrame(sender, claims=tuple(_claim(i) for i in items))
        if kind == ANSWERS:
            return ClaimFrame(sender, answers=tuple(_answer(i) for i in items))
        if kind == DURABLE:
            if not all(isinstance(d, bytes) and len(d) == 32 for d in items):
                raise TypeError("durable items are 32-byte digests")
            return ClaimFrame(sender, durable=tuple(items))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ClaimError(f"claim payload does not decode: {exc}") from exc
    raise ClaimError(f"claim frame of unknown kind {kind}")


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
