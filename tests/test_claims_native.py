"""The band slices' native kernel (polecat/cluster/_claims.c) against claims.py's specification
(polecat/native.py rule 1): the same slice for every band key, so both place a near base's rows and
ask its owners alike (claims rules 9 and 13)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.cluster import claims
from polecat.cluster.claims import band_slice
from polecat.dedup.nearindex import BANDS, band_keys
from polecat.frontier.slices import SLICES
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
