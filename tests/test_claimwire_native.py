"""The native claim codec (polecat/cluster/_claimwire.c) against claimwire.py's Python path (claimwire rule 1,
polecat/native.py rule 1): the same bytes for every frame it packs, the same records for every frame it
reads, and every other frame (hostile ones: wrong types, lengths, truncations, huge ints, nested junk)
left to the Python path, so refused with the same error, never a crash."""

from __future__ import annotations

import dataclasses
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from polecat.cluster import claimwire
from polecat.cluster.batch import frame, unframe
from polecat.cluster.claims import Answer, Claim, NearAnswer, NearClaim, Original
from polecat.cluster.claimwire import MAGIC, VERSION, ClaimError, ClaimFrame, decode
from polecat.dedup.minhash import VERIFY_BYTES
from polecat.store.base import FetchRecord
from tests.native_helpers import kernel

INT64 = st.integers(-(1 << 63), (1 << 64) - 1)
TEXT = st.one_of(st.text(max_size=40), st.integers(0, 70_000).map(lambda n: "é" * (n // 2)))
TIMES = st.floats(allow_nan=False)
DIGESTS = st.binary(min_size=32, max_size=32)
BODIES = st.one_of(st.none(), st.binary(max_size=300), st.integers(0, 70_000).map(bytes))

CLAIMS = st.builds(Claim, INT64, DIGESTS, TEXT, TIMES)
ANSWERS = st.builds(Answer, INT64, st.none() | st.tuples(TEXT, TIMES))
NEAR = st.builds(NearClaim, INT64, DIGESTS, TEXT, TIMES, st.integers(0, (1 << 64) - 1),
                 st.binary(min_size=VERIFY_BYTES, max_size=VERIFY_BYTES))
NEAR_ANSWERS = st.builds(NearAnswer, INT64, st.none() | st.builds(Original, DIGESTS, TEXT, TIMES, TEXT,
                                                                 st.tuples(INT64, INT64)))
RECORDS = st.builds(FetchRecord, TEXT, TIMES, INT64, st.lists(st.tuples(TEXT, TEXT), max_size=3).map(tuple),
                    DIGESTS, INT64, st.booleans(), TEXT, st.just("revisit"))
DEPOSITS = st.tuples(INT64, RECORDS, BODIES)
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
"""Frames of 70 kB strings are slow to make (and, built with sanitizers, to read)."""


def _few(s: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(s, max_size=3).map(tuple)


FRAMES = st.builds(ClaimFrame, TEXT, claims=_few(CLAIMS), answers=_few(ANSWERS), durable=_few(DIGESTS),
                   near=_few(NEAR), near_answers=_few(NEAR_ANSWERS), withdrawn=_few(DIGESTS),
                   deposits=_few(DEPOSITS), deposited=_few(st.tuples(INT64, st.booleans())))


@contextmanager
def _codec(native: bool) -> Iterator[None]:
    """claimwire.py with its kernel (bound to its records) or with its Python path alone."""
    k = kernel("polecat.cluster._claimwire")
    k.bind(ClaimFrame, Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord, VERIFY_BYTES)
    saved = claimwire._native_frame, claimwire._native_payload
    claimwire._native_frame, claimwire._native_payload = (k.frame, k.payload) if native else (None, None)
    try:
        yield
    finally:
        claimwire._native_frame, claimwire._native_payload = saved


Outcome = tuple[str, Any]


def _outcome(call: Callable[[], Any], native: bool) -> Outcome:
    """``call``'s result with the kernel or without, or the exception's type and message."""
    with _codec(native):
        try:
            return "ok", call()
        except (ClaimError, OverflowError, ValueError, TypeError) as exc:
            return type(exc).__name__, str(exc)


def _same(call: Callable[[], Any]) -> Outcome:
    """``call``'s outcome, the same with the kernel and without: the result's repr alike (floats' signs
    included, the record types named), or the same exception and message."""
    native, python = _outcome(call, True), _outcome(call, False)
    assert (native[0], repr(native[1])) == (python[0], repr(python[1]))
    return native


def _payload(data: bytes) -> bytes:
    return unframe(data, MAGIC, VERSION, "claim frame", None)


def _encodings(f: ClaimFrame) -> list[Callable[[], bytes]]:
    return [lambda: claimwire.encode_near(f), lambda: claimwire.encode_claims(f.sender, f.claims),
            lambda: claimwire.encode_answers(f.sender, f.answers),
            lambda: claimwire.encode_durable(f.sender, f.durable)]


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(FRAMES)
def test_the_same_bytes_and_records_as_the_python_codec(f: ClaimFrame) -> None:
    """Every kind, packed alike and read back alike; the kernel packs and reads each (none left to
    Python); a kind 4 frame reads back as the frame sent."""
    k = kernel("polecat.cluster._claimwire")
    for encode in _encodings(f):
        status, data = _same(encode)
        assert status == "ok"
        with _codec(True):
            assert k.frame(_payload(data)) is not None
        assert _same(partial(decode, data))[0] == "ok"
    with _codec(True):
        assert k.payload(claimwire.NEAR, f.sender, f) is not None
        assert decode(claimwire.encode_near(f)) == f


JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), INT64, st.floats(), st.text(max_size=5), st.binary(max_size=34),
              st.sampled_from([b"d" * 32, b"v" * VERIFY_BYTES, 0, 1, 4, -1, 1.0, "x"]),
              st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=4))),
    lambda inner: st.lists(inner, max_size=10) | st.dictionaries(st.text(max_size=2) | st.binary(max_size=32),
                                                                 inner, max_size=3),
    max_leaves=30)


def _items(f: ClaimFrame) -> list[Any]:
    """The Python path's payload of ``f`` as kind 4, as lists (to put junk in)."""
    return [claimwire.NEAR, f.sender, claimwire._near_items(f)]


def _paths(value: Any, path: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    yield path
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*path, i))


def _put(value: Any, path: tuple[int, ...], junk: Any) -> Any:
    if not path:
        return junk
    return [_put(item, path[1:], junk) if i == path[0] else item for i, item in enumerate(value)]


def _refused_alike(payload: bytes) -> Outcome:
    return _same(lambda: decode(frame(MAGIC, VERSION, payload)))


@settings(max_examples=400, deadline=None, suppress_health_check=SLOW)
@given(FRAMES, st.data())
def test_junk_anywhere_in_a_frame_is_refused_as_python_refuses_it(f: ClaimFrame, data: st.DataObject) -> None:
    """Any item, section or field of a frame (kinds 1-4) replaced by nested junk: wrong types, lengths,
    maps, ext types, bools for ints, 64-bit extremes."""
    kind = data.draw(st.sampled_from([1, 2, 3, 4]))
    items = _items(f) if kind == 4 else [kind, f.sender, claimwire._ITEMS[kind](
        (f.claims, f.answers, f.durable)[kind - 1])]
    path = data.draw(st.sampled_from(list(_paths(items))))
    status, _ = _refused_alike(msgpack.packb(_put(items, path, data.draw(JUNK)), use_bin_type=True))
    event(status)


@settings(deadline=None)
@given(st.binary(max_size=200), st.lists(JUNK, max_size=4))
def test_random_bytes_and_junk_payloads_are_refused_alike(raw: bytes, junk: list[Any]) -> None:
    _refused_alike(raw)
    _refused_alike(msgpack.packb(junk, use_bin_type=True))


def _mixed() -> ClaimFrame:
    digest = bytes(range(32))
    record = FetchRecord("http://10.0.0.1/b", 2.5, 200, (("a", "b"),), digest, 9, False, "http://10.0.0.1/a",
                         "revisit")
    return ClaimFrame("m0/w1", claims=(Claim(1, digest, "http://10.0.0.1/a", 1.5),),
                      answers=(Answer(2, None), Answer(3, ("u", 1.0))), durable=(digest,),
                      near=(NearClaim(4, digest, "u", 1.0, (1 << 64) - 1, bytes(VERIFY_BYTES)),),
                      near_answers=(NearAnswer(5, None),
                                    NearAnswer(6, Original(digest, "u", 1.0, "m1", (3, 4)))),
                      withdrawn=(digest,), deposits=((7, record, b"body"), (8, record, None)),
                      deposited=((9, True),))


def test_every_truncation_and_every_byte_changed_is_refused_alike() -> None:
    """Each prefix of a frame of every section, and each of its bytes replaced by a few markers (nil,
    bools, an int, a float, a long array, a map, an ext) read alike."""
    payload = _payload(claimwire.encode_near(_mixed()))
    for n in range(len(payload)):
        assert _refused_alike(payload[:n])[0] == "ClaimError"
    seen = set()
    for i in range(len(payload)):
        for b in (0xC0, 0xC2, 0xC3, 0x05, 0xCB, 0xDD, 0x81, 0xD4, 0xFF, 0x7F):
            seen.add(_refused_alike(payload[:i] + bytes([b]) + payload[i + 1:])[0])
    assert seen == {"ok", "ClaimError"}


@pytest.mark.parametrize("items", [
    b"\x91" * 100_000 + b"\xc0",  # 100,000 arrays deep
    b"\x95" + b"\x91" * 100_000 + b"\xc0",  # as deep, in the near claims' section
    b"\x95\x91" + b"\x96" * 50_000,  # near claims in near claims, cut short
    b"\xdd\xff\xff\xff\xff",  # an array of 2**32 - 1 items in 5 bytes
    b"\x98" + b"\x90" * 5 + b"\x91\x94\xcf" + b"\xff" * 8,  # an exact claim cut at its 2**64 - 1 seq
])
def test_deep_and_oversized_frames_are_refused_alike(items: bytes) -> None:
    assert _refused_alike(b"\x93\x04\xa1s" + items)[0] == "ClaimError"


@pytest.mark.parametrize("change", [
    lambda: {"sender": "\ud800"},  # not UTF-8: msgpack's error
    lambda: {"claims": (Claim(1 << 64, b"d" * 32, "u", 1.0),)},  # msgpack's OverflowError
    lambda: {"claims": (Claim(-(1 << 63) - 1, b"d" * 32, "u", 1.0),)},
    lambda: {"claims": (Claim(True, b"d" * 32, "u", 1),)},  # a bool and an int: packed as Python packs them
    lambda: {"near": (NearClaim(1, b"d" * 32, "u", 1.0, 2, bytearray(b"v" * VERIFY_BYTES)),)},  # not bytes
    lambda: {"claims": [Claim(1, b"d" * 32, "u", 1.0)]},  # a list section: the kernel's too
    lambda: {"durable": iter([b"d" * 32])},  # neither list nor tuple: Python's to pack
])
def test_what_the_kernel_does_not_pack_is_packed_or_refused_by_python(
        change: Callable[[], dict[str, Any]]) -> None:
    def encode() -> bytes:
        return claimwire.encode_near(dataclasses.replace(_mixed(), **change()))

    assert _outcome(encode, True) == _outcome(encode, False)


def test_subclassed_records_are_packed_by_python() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Loud(Claim):
        pass

    f = dataclasses.replace(_mixed(), claims=(Loud(1, b"d" * 32, "u", 1.0),))
    k = kernel("polecat.cluster._claimwire")
    with _codec(True):
        assert k.payload(claimwire.NEAR, f.sender, f) is None
    assert _same(lambda: claimwire.encode_near(f))[0] == "ok"


def test_bind_refuses_records_whose_slots_are_not_the_fields_it_fills() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Wider:
        seq: int
        digest: bytes
        url: str
        fetched_at: float
        more: int = 0

    k = kernel("polecat.cluster._claimwire")
    try:
        with pytest.raises(TypeError, match="slots"):
            k.bind(ClaimFrame, Wider, Answer, NearClaim, NearAnswer, Original, FetchRecord, VERIFY_BYTES)
        assert k.frame(_payload(claimwire.encode_near(_mixed()))) is None  # unbound: Python reads all
    finally:
        k.bind(ClaimFrame, Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord, VERIFY_BYTES)


def test_records_are_built_without_their_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """The frozen dataclasses' __init__ (object.__setattr__ a field) was most of a decode: the kernel
    fills the slots; the Python path calls it once a record."""
    calls = []
    for cls in (ClaimFrame, Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord):
        init = cls.__init__

        def counted(self: Any, *args: Any, __init: Any = init, **kw: Any) -> None:
            calls.append(type(self).__name__)
            __init(self, *args, **kw)

        monkeypatch.setattr(cls, "__init__", counted)
    data = claimwire.encode_near(_mixed())
    with _codec(True):
        assert decode(data) == _mixed()
    calls.clear()
    with _codec(True):
        decode(data)
    assert calls == []
    with _codec(False):
        decode(data)
    assert len(calls) == 10


def test_fifty_thousand_calls_hold_no_memory() -> None:
    """References released on every path: frames read and packed, and frames the kernel leaves to
    Python half read (each truncation of a frame); none taken on the shared singletons."""
    data = claimwire.encode_near(_mixed())
    payload = _payload(data)
    k = kernel("polecat.cluster._claimwire")
    f = _mixed()
    cuts = [payload[:n] for n in range(len(payload))]
    with _codec(True):
        def rounds(n: int) -> None:
            for i in range(n):
                assert k.frame(payload) is not None
                k.frame(cuts[i % len(cuts)])
                assert k.payload(claimwire.NEAR, f.sender, f) is not None

        rounds(2000)
        shared = (None, True, False, "revisit")  # references a leak of a shared object would pile up on
        refs = [sys.getrefcount(o) for o in shared]
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            rounds(50_000)
            assert tracemalloc.get_traced_memory()[0] - before < 10_000
        finally:
            tracemalloc.stop()
        assert all(abs(sys.getrefcount(o) - n) < 100 for o, n in zip(shared, refs, strict=True))


ORIGINALS = st.builds(Original, DIGESTS, TEXT, TIMES, TEXT, st.tuples(INT64, INT64))


@given(st.one_of(CLAIMS, ANSWERS, NEAR, NEAR_ANSWERS, ORIGINALS, RECORDS))
def test_make_builds_a_record_as_its_init(record: Any) -> None:
    """Rule 4: the books' records and a copy's revisit (claims.py) made by the kernel are their
    __init__'s, equal and hashed alike (still frozen dataclasses), of the exact type."""
    k = kernel("polecat.cluster._claimwire")
    cls = type(record)
    made = k.make(cls, *(getattr(record, f.name) for f in dataclasses.fields(cls)))
    assert type(made) is cls
    assert made == record
    assert hash(made) == hash(record)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, dataclasses.fields(cls)[0].name, None)


@pytest.mark.parametrize("args", [(), (Claim,), (Claim, 1, b"d", "u"), (Claim, 1, b"d", "u", 1.0, 2),
                                  (int, 1), (ClaimFrame, "a"), (FetchRecord,), ("Claim", 1, b"d", "u", 1.0)])
def test_make_refuses_what_it_does_not_build(args: tuple[object, ...]) -> None:
    """Rule 4: only the six bound record types, with every field's value (no defaults, no keywords)."""
    k = kernel("polecat.cluster._claimwire")
    with pytest.raises(TypeError):
        k.make(*args)


def test_bind_records_refuses_what_bind_refuses() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Wider:
        seq: int
        original: tuple[str, float] | None
        more: int = 0

    k = kernel("polecat.cluster._claimwire")
    try:
        with pytest.raises(TypeError, match="slots"):
            k.bind_records(Claim, Wider, NearClaim, NearAnswer, Original, FetchRecord)
        with pytest.raises(TypeError):
            k.bind_records(Claim, Answer, NearClaim, NearAnswer, Original)
    finally:
        k.bind_records(Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord)
