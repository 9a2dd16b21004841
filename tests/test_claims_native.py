"""The native kernel of claims.py (polecat/cluster/_claims.c) against its specification (polecat/native.py
rule 1): the same slice for every band key, so both place a near base's rows and ask its owners alike
(claims rules 9 and 13); the same near book scan, so both answer a near claim alike (rules 10 and 14)."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from polecat import native
from polecat.cluster import claims
from polecat.cluster.claims import (
    ClaimBook,
    ClaimQueue,
    NearAnswer,
    NearBook,
    NearClaim,
    NearQueue,
    Original,
    _Base,
    band_slice,
    exact_copy,
    near_copy,
)
from polecat.dedup.minhash import VERIFY_BYTES, VERIFY_MAX_DISTANCE, fingerprint
from polecat.dedup.nearindex import BANDS, band_keys
from polecat.frontier.slices import SLICES
from polecat.store.base import OWN_HASH_HEADER, REFERS_DATE_HEADER, FetchRecord
from tests.native_helpers import kernel


def _spec(index: int) -> tuple[int, ...]:
    return tuple(band_slice(k) for k in band_keys(index))


def test_every_band_key_has_the_slice_of_the_specification() -> None:
    """All 2**18 band keys: index ``v << 16b`` puts value ``v`` in band ``b`` (nearindex.py's layout)."""
    k = kernel("polecat.cluster._claims")
    for band in range(BANDS):
        for value in range(1 << 16):
            key = bytes((band, value >> 8, value & 0xFF))
            want = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % SLICES
            assert k.band_slices(value << (16 * band), SLICES)[band] == want, key


@given(st.one_of(st.integers(0, (1 << 64) - 1), st.integers()), st.integers(1, (1 << 32) - 1))
def test_any_index_and_slice_count_as_the_specification(index: int, slices: int) -> None:
    """Beyond 64 bits, or negative, an index's keys are its low 64 bits (two's complement), as
    band_keys' shifts read them."""
    k = kernel("polecat.cluster._claims")
    keys = band_keys(index)
    want = tuple(int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % slices for key in keys)
    assert k.band_slices(index, slices) == want
    if slices == SLICES:
        assert k.band_slices(index, slices) == _spec(index)


def test_no_band_slice_table_beside_the_kernel() -> None:
    """The kernel computes every page's slices: the Python path's 512 KiB table is not filled."""
    kernel("polecat.cluster._claims")
    if claims._native_band_slices is None:
        pytest.skip("POLECAT_PURE_PYTHON=1: claims.py runs its specification")
    assert len(claims._BAND_SLICES) == 0
    assert band_slice(b"\x01\x02\x03") == claims._native_band_slices(0x0203 << 16, SLICES)[1]


@pytest.mark.parametrize("args", [(1.0, SLICES), ("1", SLICES), (1, 0), (1, -1), (1, 1 << 32), (1, 2.0), (1,),
                                  (1, SLICES, 3)])
def test_bad_arguments_raise(args: tuple[object, ...]) -> None:
    k = kernel("polecat.cluster._claims")
    with pytest.raises((TypeError, ValueError)):
        k.band_slices(*args)


def test_a_page_owners_cost_no_blake2b_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel built, a fingerprint met for the first time (the usual case in a crawl: the
    Python table only spares keys met before in the same process) makes no hashlib call."""
    kernel("polecat.cluster._claims")
    if claims._native_band_slices is None:
        pytest.skip("POLECAT_PURE_PYTHON=1: claims.py runs its specification")
    made: list[bytes] = []
    blake2b = hashlib.blake2b

    def counted(data: bytes, **kw: int) -> object:
        made.append(data)
        return blake2b(data, **kw)

    monkeypatch.setattr(claims.hashlib, "blake2b", counted)
    monkeypatch.setattr(claims, "_BAND_SLICES", claims.array("H", [claims._UNKNOWN]) * (BANDS << 16))
    claims._slices.cache_clear()
    index = 0x0123_4567_89AB_CDEF
    owners = claims.band_owners(index, lambda s: f"m{s % 3}")
    assert made == []
    assert owners == tuple(dict.fromkeys(f"m{s % 3}" for s in _spec(index)))
    assert len(made) == BANDS  # the specification, for the comparison, hashed each key


_URLS = ("http://a/1", "http://a/2", "http://b/1")
_TIMES = (1.0, 2.0, 3.0)
_MASKS = (0, 1, 0b11, 0b1011, 1 << 40, 0xFF, 0xFFFF_0000_0000, (1 << 64) - 1, 1 | 1 << 16 | 1 << 32 | 1 << 48)
"""Index bits a claim differs by from the root: none, a few, a whole band, and one in each band (4 bits
and no band shared: found by no index lookup)."""


@st.composite
def _claims(draw: st.DrawFn, root: int, sketch: bytes, seq: int) -> NearClaim:
    """A claim near ``root`` (or not): few index bits apart, a sketch with some bytes changed, one of a
    few URLs and fetch times, so that ties, equal orders and both sides of each test come up."""
    verify = bytearray(sketch)
    for at in draw(st.lists(st.integers(0, VERIFY_BYTES - 1), max_size=VERIFY_BYTES)):
        verify[at] ^= draw(st.integers(1, 255))
    return NearClaim(seq, bytes([draw(st.integers(0, 3))]) * 32, draw(st.sampled_from(_URLS)),
                     draw(st.sampled_from(_TIMES)), root ^ draw(st.sampled_from(_MASKS)), bytes(verify))


@given(st.data(), st.integers(0, (1 << 64) - 1), st.binary(min_size=VERIFY_BYTES, max_size=VERIFY_BYTES),
       st.integers(0, 6))
def test_a_near_books_scan_as_the_specification(data: st.DataObject, root: int, sketch: bytes,
                                                 max_distance: int) -> None:
    k = kernel("polecat.cluster._claims")
    book = NearBook(1000, 60.0, max_distance)
    bases = []
    for seq in range(data.draw(st.integers(0, 12))):
        base = _Base(data.draw(_claims(root, sketch, seq)), data.draw(st.sampled_from(("a", "b"))))
        book._add(base, [])
        bases.append(base)
    settling = {(b.claimer, b.claim.digest): (b.claim, 0.0) for b in bases if data.draw(st.booleans())}
    c = data.draw(_claims(root, sketch, 99))
    keys = claims._keys(c.index)
    want = claims._scan(book._bands, keys, c, settling, max_distance)
    event(f"earlier match {want[0] is not None}, later match {want[1] is not None}")
    assert k.closest(book._bands, keys, c, settling, max_distance, VERIFY_MAX_DISTANCE, VERIFY_BYTES) == want


_SKETCHES = st.binary(max_size=VERIFY_BYTES + 8)


@given(st.integers(), st.integers(), _SKETCHES, _SKETCHES)
def test_wide_indexes_and_odd_sketches_as_the_specification(a: int, b: int, va: bytes, vb: bytes) -> None:
    """An index beyond 64 bits (or negative) and a sketch of another length: only a corrupt kept row
    (claims rule 13) has one; the kernel still answers as the specification."""
    k = kernel("polecat.cluster._claims")
    base = _Base(NearClaim(1, bytes(32), "http://a/1", 1.0, a, va), "a")
    c = NearClaim(2, bytes(32), "http://a/2", 2.0, b, vb)
    bands = {key: [base] for key in (b"k0", b"k1")}
    for max_distance in (0, 64, 1000):
        want = claims._scan(bands, (b"k0", b"k1", b"k2"), c, {}, max_distance)
        assert k.closest(bands, (b"k0", b"k1", b"k2"), c, {}, max_distance, VERIFY_MAX_DISTANCE,
                         VERIFY_BYTES) == want


def test_a_sketch_that_is_not_bytes_is_refused() -> None:
    k = kernel("polecat.cluster._claims")
    base = _Base(NearClaim(1, bytes(32), "http://a/1", 1.0, 5, bytes(VERIFY_BYTES)), "a")
    c = NearClaim(2, bytes(32), "http://a/2", 2.0, 5, "not bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        k.closest({b"k": [base]}, (b"k",), c, {}, 3, VERIFY_MAX_DISTANCE, VERIFY_BYTES)


def test_a_near_claim_is_decided_by_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel built, a near book's decisions make no Python scan (claims rule 10's test runs
    in C)."""
    kernel("polecat.cluster._claims")
    if claims._native_closest is None:
        pytest.skip("POLECAT_PURE_PYTHON=1: claims.py runs its specification")
    scans: list[NearClaim] = []
    scan = claims._scan

    def counted(*args: Any) -> Any:
        scans.append(args[2])
        return scan(*args)

    monkeypatch.setattr(claims, "_scan", counted)
    book = NearBook(1000, 60.0, 3)
    first = NearClaim(1, bytes(32), "http://a/1", 1.0, 0x1234, bytes(VERIFY_BYTES))
    copy = NearClaim(2, b"\x01" * 32, "http://b/1", 2.0, 0x1235, bytes(VERIFY_BYTES))
    assert book.decide("a", [first], 0.0) == [("a", NearAnswer(1, None))]
    [(who, answer)] = book.decide("b", [copy], 0.0)
    assert (who, answer.original is not None and answer.original.url) == ("b", "http://a/1")
    assert scans == []


@given(st.data(), st.integers(0, (1 << 64) - 1), st.binary(min_size=VERIFY_BYTES, max_size=VERIFY_BYTES),
       st.integers(0, 6))
def test_a_pass_over_the_settling_bases_as_the_specification(data: st.DataObject, root: int, sketch: bytes,
                                                             max_distance: int) -> None:
    k = kernel("polecat.cluster._claims")
    book = NearBook(1000, 60.0, max_distance)
    settling = {}
    for seq in range(data.draw(st.integers(0, 12))):
        base = _Base(data.draw(_claims(root, sketch, seq)), data.draw(st.sampled_from(("a", "b"))))
        book._add(base, [])
        if data.draw(st.booleans()):
            settling[(base.claimer, base.claim.digest)] = (base.claim, float(seq))
    c = data.draw(_claims(root, sketch, 99))
    keys = claims._keys(c.index)
    want = claims._unsettled(book._bands, keys, settling, c, max_distance)
    event(f"settling bases unsettled: {min(len(want), 2)}+")
    assert k.unsettled_in_bands(book._bands, keys, settling, c, max_distance, VERIFY_MAX_DISTANCE,
                                VERIFY_BYTES) == want


def test_the_settling_pass_reads_only_the_claim_s_band_mates() -> None:
    """Claims rules 9 and 10: a settling base that shares no band with the claim is no candidate, even
    within the index distance (4 bits, one in each band: no index lookup of one process finds it), and
    the pass does not read it; one that shares a band and passes the tests is found, by the
    specification and the kernel alike."""
    root = 0x0123_4567_89AB_CDEF
    far = NearClaim(1, b"\x01" * 32, "http://a/far", 2.0, root ^ (1 | 1 << 16 | 1 << 32 | 1 << 48),
                    bytes(VERIFY_BYTES))
    mate = NearClaim(2, b"\x02" * 32, "http://a/mate", 2.0, root ^ 0b111, bytes(VERIFY_BYTES))
    c = NearClaim(3, b"\x03" * 32, "http://b/c", 1.0, root, bytes(VERIFY_BYTES))
    book = NearBook(1000, 60.0, 4)
    for claim in (far, mate):
        book._add(_Base(claim, "a"), [])

    class Unread(dict[tuple[str, bytes], tuple[NearClaim, float]]):
        """Settling entries that fail when read: only membership is asked."""

        def __getitem__(self, key: tuple[str, bytes]) -> tuple[NearClaim, float]:
            raise AssertionError("a settling entry was read")

        def items(self) -> Any:
            raise AssertionError("every settling entry was read")

        def __iter__(self) -> Any:
            raise AssertionError("every settling entry was read")

    settling = Unread({("a", far.digest): (far, 0.0), ("a", mate.digest): (mate, 0.0)})
    keys = claims._keys(c.index)
    want = [(("a", mate.digest), mate)]
    assert claims._unsettled(book._bands, keys, settling, c, 4) == want
    k = kernel("polecat.cluster._claims")
    assert k.unsettled_in_bands(book._bands, keys, settling, c, 4, VERIFY_MAX_DISTANCE, VERIFY_BYTES) == want


def test_a_pass_over_odd_settling_entries_is_refused() -> None:
    k = kernel("polecat.cluster._claims")
    c = NearClaim(2, bytes(32), "http://a/2", 1.0, 5, bytes(VERIFY_BYTES))
    s = NearClaim(1, bytes(32), "http://a/1", 2.0, 5, "not bytes")  # type: ignore[arg-type]
    bands = {key: [_Base(s, "a")] for key in claims._keys(5)}
    keys = claims._keys(5)
    for args in ((bands, keys, {("a", bytes(32)): (s, 0.0)}), ([], keys, {}), (bands, list(keys), {}),
                 (bands, keys, [(s, 0.0)]), ({keys[0]: (_Base(s, "a"),)}, keys, {})):
        with pytest.raises(TypeError):
            k.unsettled_in_bands(*args, c, 3, VERIFY_MAX_DISTANCE, VERIFY_BYTES)


# Steps of a near book: (claimer, claims decided in one frame) or one of its other inputs, by name.
_Step = tuple[str, Any]


@st.composite
def _steps(draw: st.DrawFn) -> list[_Step]:
    root = draw(st.integers(0, (1 << 64) - 1))
    sketch = draw(st.binary(min_size=VERIFY_BYTES, max_size=VERIFY_BYTES))
    steps: list[_Step] = []
    for seq in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(("decide", "decide", "decide", "own", "settled", "durable", "withdrawn",
                                     "expired")))
        who = draw(st.sampled_from(("a", "b", "c")))
        if kind in ("decide", "own"):
            steps.append((kind, (who, draw(_claims(root, sketch, seq)))))
        elif kind in ("durable", "withdrawn"):
            steps.append((kind, (who, bytes([draw(st.integers(0, 3))]) * 32)))
        else:
            steps.append((kind, None))
    return steps


def _run_book(steps: list[_Step], max_distance: int) -> list[Any]:
    """Every answer and write of a book (settle 0.05 s, hold 0.2 s) taking ``steps`` 10 ms apart."""
    book = NearBook(8, 0.2, max_distance, settle=0.05, keep=lambda band: band % 2 == 0)
    out: list[Any] = []
    for i, (kind, arg) in enumerate(steps):
        now = i / 100
        if kind == "decide":
            out.append(book.decide(arg[0], [arg[1]], now))
        elif kind == "own":
            out.append(book.own(arg[0], arg[1], now))
        elif kind == "settled":
            out.append(book.settled(now))
        elif kind == "durable":
            out.append(book.durable(arg[0], [arg[1]]))
        elif kind == "withdrawn":
            out.append(book.withdrawn(arg[0], [arg[1]], now))
        else:
            out.append(book.expired(now))
        out.append(book.take_writes())
    out.append((book.settled(len(steps)), book.waiting(), len(book), book.copies))
    return out


@given(_steps(), st.integers(0, 6))
def test_a_near_book_decides_alike_with_and_without_the_kernel(steps: list[_Step], max_distance: int) -> None:
    """The whole book (rules 10 and 14-16: its scans, settles, copies waiting, withdrawals, bounds) through
    the Python specification and through the kernel: the same answers and writes, in the same order."""
    kernel("polecat.cluster._claims")
    if claims._native_unsettled is None or claims._native_closest is None:
        pytest.skip("POLECAT_PURE_PYTHON=1: claims.py runs its specification")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(claims, "_native_unsettled", None)
        mp.setattr(claims, "_native_closest", None)
        want = _run_book(steps, max_distance)
    event(f"near copies: {min(want[-1][3], 3)}+")
    assert _run_book(steps, max_distance) == want


def test_a_near_claim_unsettles_bases_in_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel built, a near claim's pass over the bases still settling (claims rule 10) makes no
    Python turn a base."""
    kernel("polecat.cluster._claims")
    if claims._native_unsettled is None:
        pytest.skip("POLECAT_PURE_PYTHON=1: claims.py runs its specification")
    passes: list[NearClaim] = []
    spec = claims._unsettled

    def counted(*args: Any) -> Any:
        passes.append(args[3])
        return spec(*args)

    monkeypatch.setattr(claims, "_unsettled", counted)
    book = NearBook(1000, 60.0, 3, settle=0.05)
    later = NearClaim(1, bytes(32), "http://a/1", 2.0, 0x1234, bytes(VERIFY_BYTES))
    earlier = NearClaim(2, b"\x01" * 32, "http://b/1", 1.0, 0x1235, bytes(VERIFY_BYTES))
    assert book.decide("a", [later], 0.0) == []  # settling
    # The earlier fetch arrives while the later settles: the later is its copy now (rule 10), the earlier
    # a base settling in its place.
    [(who, answer)] = book.decide("b", [earlier], 0.01)
    assert (who, answer.seq, answer.original and answer.original.url) == ("a", 1, "http://b/1")
    assert book.settled(0.07) == [("b", NearAnswer(2, None))]
    assert passes == []


@given(st.one_of(st.integers(0, (1 << 64) - 1), st.integers()))
def test_band_keys_as_the_specification(index: int) -> None:
    """Beyond 64 bits, or negative, an index's keys are its low 64 bits, as band_keys' shifts read them."""
    k = kernel("polecat.cluster._claims")
    assert k.band_keys(index) == tuple(band_keys(index))


@pytest.mark.parametrize("args", [(1.0,), ("1",), (), (1, 2)])
def test_band_keys_of_bad_arguments_raise(args: tuple[object, ...]) -> None:
    k = kernel("polecat.cluster._claims")
    with pytest.raises(TypeError):
        k.band_keys(*args)


def test_a_claim_and_its_base_make_their_band_keys_in_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel built, an owner deciding a fingerprint it meets for the first time (the usual
    case: the cache of :func:`claims._keys` holds the pages in flight) makes no Python band keys."""
    kernel("polecat.cluster._claims")
    if claims._native_band_keys is None:
        pytest.skip("POLECAT_PURE_PYTHON=1: claims.py runs its specification")
    made: list[int] = []

    def counted(index: int) -> list[bytes]:
        made.append(index)
        return band_keys(index)

    monkeypatch.setattr(claims, "band_keys", counted)
    claims._keys.cache_clear()
    book = NearBook(1000, 60.0, 3)
    first = NearClaim(1, bytes(32), "http://a/1", 1.0, 0x5678_1234, bytes(VERIFY_BYTES))
    copy = NearClaim(2, b"\x01" * 32, "http://b/1", 2.0, 0x5678_1235, bytes(VERIFY_BYTES))
    assert book.decide("a", [first], 0.0) == [("a", NearAnswer(1, None))]
    assert [who for who, _ in book.decide("b", [copy], 0.0)] == ["b"]
    assert made == []
    assert claims._keys(first.index) == tuple(band_keys(first.index))


def _frozen_inits(run: Callable[[], object]) -> list[str]:
    """The frozen dataclasses whose ``__init__`` ``run`` calls (each sets its fields through
    ``object.__setattr__``), in call order."""
    made: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_name == "__init__":
            params = getattr(type(frame.f_locals.get("self")), "__dataclass_params__", None)
            if params is not None and params.frozen:
                made.append(type(frame.f_locals["self"]).__name__)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return made


def test_a_page_s_claims_make_no_record_field_by_field() -> None:
    """The books' and queues' records of a page's claims, near and exact, at its claimer and at an
    owner (claims, answers, originals, outcomes, bases), are made with no frozen dataclass ``__init__``
    (_claimwire.c rule 4; the internal ones are plain records): a NearClaim's was ~1.4 us in a crawl."""
    kernel("polecat.cluster._claimwire")
    if native.load("polecat.cluster._claimwire") is None:
        pytest.skip("POLECAT_PURE_PYTHON=1: the records are made by their __init__")
    T0 = 1_000_000.0
    fp_a = fingerprint("one two three four five six " * 20)
    fp_b = fingerprint("one two three four five " * 20)
    mine = NearQueue("a", lambda s: "a", NearBook(100, 1.0, 4), wait=5.0)
    theirs = NearBook(100, 1.0, 4)
    exact = ClaimQueue("a", lambda s: "b", ClaimBook(100, 1.0), capacity=10, wait=5.0)
    owner = ClaimBook(100, 1.0)

    record = FetchRecord("http://a/4", T0, 200, (("Content-Type", "text/html"),), b"\x05" * 32, 10)
    original = Original(b"\x06" * 32, "http://b/4", T0 - 1, "b", (0, 1))
    same = dataclasses.replace(original, digest=record.content_hash)  # an exact copy's original

    def page() -> None:
        mine.add(bytes(32), "http://a/1", T0, fp_a, T0)  # decided at once by its own book
        mine.add(b"\x01" * 32, "http://a/2", T0 + 1, fp_a, T0)  # a near copy of the first
        theirs.decide("b", [NearClaim(1, b"\x02" * 32, "http://b/1", T0, fp_b.index, fp_b.verify)], T0)
        theirs.decide("c", [NearClaim(1, b"\x03" * 32, "http://c/1", T0 + 1, fp_b.index, fp_b.verify)], T0)
        exact.add(b"\x04" * 32, "http://a/3", T0, T0)
        answers = owner.decide("a", exact.batches(T0)["b"], T0)
        exact.answered([a for _, a in answers])
        near_copy(record, original)
        near_copy(record, same)

    assert _frozen_inits(page) == ["NearClaim", "NearClaim"]  # the test's own two


@given(st.builds(FetchRecord, st.text(max_size=20), st.floats(allow_nan=False), st.integers(),
                 st.lists(st.tuples(st.text(max_size=9), st.text(max_size=9)), max_size=3).map(tuple),
                 st.binary(min_size=32, max_size=32), st.integers(), st.booleans(), st.none() | st.text(),
                 st.sampled_from(["response", "revisit"])),
       st.builds(Original, st.binary(min_size=32, max_size=32), st.text(max_size=20),
                 st.floats(allow_nan=False), st.text(max_size=9),
                 st.tuples(st.integers(0, 9), st.integers(0, 9))),
       st.booleans())
def test_a_copy_s_revisit_is_the_record_replace_makes(record: FetchRecord, original: Original,
                                                       exact: bool) -> None:
    """claims.exact_copy and near_copy (rule 11) give what ``dataclasses.replace`` gave, of the exact type."""
    if exact:
        original = dataclasses.replace(original, digest=record.content_hash)
    headers = (*record.headers, (REFERS_DATE_HEADER, repr(original.fetched_at)))
    want = dataclasses.replace(record, duplicate_of=original.url, kind="revisit", headers=headers)
    if original.digest != record.content_hash:
        want = dataclasses.replace(want, headers=(*headers, (OWN_HASH_HEADER, record.content_hash.hex())),
                                   content_hash=original.digest)
    got = near_copy(record, original)
    assert type(got) is FetchRecord
    assert got == want
    assert exact_copy(record, original.url, original.fetched_at) == dataclasses.replace(
        record, duplicate_of=original.url, kind="revisit", headers=headers)
