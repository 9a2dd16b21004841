"""The claim frame codec in C (polecat/cluster/_claimwire.c; claimwire.py rule 1)."""

from typing import Any, TypeVar

_R = TypeVar("_R")

def bind(frame: type, claim: type, answer: type, near: type, near_answer: type, original: type, record: type,
         verify_bytes: int, /) -> None:
    """The record types :func:`frame` builds and :func:`payload` reads (claimwire.ClaimFrame, claims.Claim,
    Answer, NearClaim, NearAnswer, Original, store.base.FetchRecord) and ``minhash.VERIFY_BYTES``; raises
    TypeError when a type's slots are not the fields the kernel fills."""

def bind_records(claim: type, answer: type, near: type, near_answer: type, original: type, record: type,
                 /) -> None:
    """The record types :func:`make` builds (claims.Claim, Answer, NearClaim, NearAnswer, Original,
    store.base.FetchRecord), as :func:`bind` binds them; raises TypeError when a type's slots are not the
    fields the kernel fills."""

def make(cls: type[_R], /, *values: Any) -> _R:
    """A record of a type bound by :func:`bind_records`, its fields set to ``values`` in field order as its
    ``__init__`` would set them; TypeError for another type or another count of values."""

def frame(payload: bytes, /) -> Any:
    """The ``ClaimFrame`` of a claim frame's payload, or None where claimwire.py's Python path must decode
    or refuse it."""

def payload(kind: int, sender: str, items: Any, /) -> bytes | None:
    """The msgpack payload ``[kind, sender, items]`` as claimwire.py packs it (``items``: a list or tuple of
    Claim, Answer or digests, or a ClaimFrame for kind 4), or None where its Python path must pack it."""
