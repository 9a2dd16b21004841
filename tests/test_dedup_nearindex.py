"""NearDupIndex over a real dupsort LMDB database."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.dedup.nearindex import MAX_PAYLOAD, NearDupIndex, NearStats


@pytest.fixture
def db_env(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 27, max_dbs=2)
    yield env, env.open_db(b"near", dupsort=True)
    env.close()


def _flip(h: int, bits: list[int]) -> int:
    for bit in bits:
        h ^= 1 << bit
    return h


def test_finds_within_three_bits_in_any_bands(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    rnd = random.Random(1)
    stored = [rnd.getrandbits(64) for _ in range(300)]
    with env.begin(write=True) as txn:
        for i, h in enumerate(stored):
            index.add(txn, h, b"page%d" % i)
        for i, h in enumerate(stored):
            assert index.find(txn, h) == (h, b"page%d" % i)
            near = _flip(h, [0, 17, 34])  # three different bands: only band 3 matches
            assert index.find(txn, near) == (h, b"page%d" % i)
            assert index.find(txn, _flip(h, [60, 61, 62])) == (h, b"page%d" % i)
            assert index.find(txn, near, max_distance=2) is None
            assert index.find(txn, _flip(h, [0, 17, 34, 51])) is None  # every band differs
    assert index.stats() == NearStats(lookups=1_500, matches=900)


def test_returns_the_closest_candidate(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    h = 0x0123_4567_89AB_CDEF
    with env.begin(write=True) as txn:
        index.add(txn, _flip(h, [1, 2, 3]), b"three")
        index.add(txn, _flip(h, [5]), b"one")
        index.add(txn, _flip(h, [20, 21]), b"two")
        assert index.find(txn, h) == (_flip(h, [5]), b"one")
        assert index.find(txn, _flip(h, [20, 21])) == (_flip(h, [20, 21]), b"two")


def test_persists_across_transactions(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    with env.begin(write=True) as txn:
        NearDupIndex(db).add(txn, 42, b"x" * MAX_PAYLOAD)
    with env.begin() as txn:
        assert NearDupIndex(db).find(txn, 43) == (42, b"x" * MAX_PAYLOAD)


def test_rejects_bad_arguments(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    with env.begin(write=True) as txn:
        with pytest.raises(ValueError, match="payload"):
            index.add(txn, 1, b"x" * (MAX_PAYLOAD + 1))
        with pytest.raises(ValueError, match="max_distance"):
            index.find(txn, 1, max_distance=4)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, (1 << 64) - 1), st.lists(st.integers(0, 63), max_size=3, unique=True))
def test_property_three_bit_flips_are_always_found(h: int, bits: list[int]) -> None:
    env_dir = Path(tempfile.mkdtemp())
    env = lmdb.open(str(env_dir), map_size=1 << 22, max_dbs=2)
    try:
        index = NearDupIndex(env.open_db(b"near", dupsort=True))
        with env.begin(write=True) as txn:
            index.add(txn, h, b"p")
            index.add(txn, h ^ (1 << 63) ^ (1 << 47) ^ (1 << 31) ^ (1 << 15), b"decoy")
            query = _flip(h, bits)
            found = index.find(txn, query)
        assert found is not None
        assert (found[0] ^ query).bit_count() <= len(bits)  # the stored page, or a decoy at least as close
    finally:
        env.close()
        shutil.rmtree(env_dir)
