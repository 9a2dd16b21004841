"""NearDupIndex over a real dupsort LMDB database: banded candidates, verification, layout limits."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench_dedup_corpus import Corpus
from polecat.dedup.minhash import VERIFY_BYTES, VERIFY_MAX_DISTANCE, Fingerprint, fingerprint, verify_distance
from polecat.dedup.nearindex import MAX_CANDIDATE_DISTANCE, MAX_PAYLOAD, NearDupIndex, NearStats
from polecat.writes import Put


@pytest.fixture
def db_env(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 27, max_dbs=2)
    yield env, env.open_db(b"near", dupsort=True)
    env.close()


def _put(txn: Any, db: Any, writes: list[Put]) -> None:
    """Apply the index's writes (the frontier's FrontierDB.apply does this in a crawl)."""
    for w in writes:
        assert w.table == "near"
        txn.put(w.key, w.value, db=db)


def _flip(h: int, bits: list[int]) -> int:
    for bit in bits:
        h ^= 1 << bit
    return h


def _bins(verify: bytes, bins: list[int]) -> bytes:
    """``verify`` with the 2-bit values of ``bins`` changed."""
    x = int.from_bytes(verify, "little")
    for b in bins:
        x ^= 1 << (2 * b)
    return x.to_bytes(VERIFY_BYTES, "little")


def _fp(rnd: random.Random) -> Fingerprint:
    return Fingerprint(rnd.getrandbits(64), rnd.randbytes(VERIFY_BYTES))


def test_finds_within_three_bits_in_any_bands(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    rnd = random.Random(1)
    stored = [_fp(rnd) for _ in range(300)]
    with env.begin(write=True) as txn:
        for i, fp in enumerate(stored):
            _put(txn, db, index.add(fp, b"page%d" % i))
        for i, fp in enumerate(stored):
            h, v = fp.index, fp.verify
            assert index.find(txn, fp) == b"page%d" % i
            near = _flip(h, [0, 17, 34])  # three different bands: only band 3 matches
            assert index.find(txn, Fingerprint(near, v)) == b"page%d" % i
            assert index.find(txn, Fingerprint(_flip(h, [60, 61, 62]), v)) == b"page%d" % i
            assert index.find(txn, Fingerprint(near, v), max_distance=2) is None
            assert index.find(txn, Fingerprint(_flip(h, [0, 17, 34, 51]), v)) is None  # every band differs
    assert index.stats() == NearStats(lookups=1_500, matches=900, rejected=0)


def test_candidate_needs_a_close_verification_sketch(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    rnd = random.Random(2)
    fp = _fp(rnd)
    at_limit = _bins(fp.verify, list(range(0, 2 * VERIFY_MAX_DISTANCE, 2)))
    assert verify_distance(fp.verify, at_limit) == VERIFY_MAX_DISTANCE
    beyond = _bins(at_limit, [511])
    with env.begin(write=True) as txn:
        _put(txn, db, index.add(fp, b"stored"))
        assert index.find(txn, Fingerprint(fp.index, at_limit)) == b"stored"
        assert index.find(txn, Fingerprint(_flip(fp.index, [3]), beyond)) is None
        assert index.find(txn, Fingerprint(fp.index, rnd.randbytes(VERIFY_BYTES))) is None
    assert index.stats() == NearStats(lookups=3, matches=1, rejected=2)


def test_returns_the_closest_candidate(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    rnd = random.Random(3)
    h, v = 0x0123_4567_89AB_CDEF, rnd.randbytes(VERIFY_BYTES)
    with env.begin(write=True) as txn:
        _put(txn, db, index.add(Fingerprint(_flip(h, [1, 2, 3]), _bins(v, [1])), b"verify 1, index 3"))
        _put(txn, db, index.add(Fingerprint(_flip(h, [5]), _bins(v, [1, 2, 3])), b"verify 3, index 1"))
        _put(txn, db, index.add(Fingerprint(h, _bins(v, [4, 5])), b"verify 2, index 0"))
        _put(txn, db, index.add(Fingerprint(_flip(h, [20, 21]), _bins(v, [6])), b"verify 1, index 2"))
        # Fewest differing verification bins first, then fewest index bits.
        assert index.find(txn, Fingerprint(h, v)) == b"verify 1, index 2"
        # Pages with the same index part are told apart by their sketches.
        assert index.find(txn, Fingerprint(h, _bins(v, [4, 5, 9]))) == b"verify 2, index 0"


def test_pages_with_equal_index_parts(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    rnd = random.Random(4)
    first, second = _fp(rnd), rnd.randbytes(VERIFY_BYTES)
    with env.begin(write=True) as txn:
        _put(txn, db, index.add(first, b"a"))
        _put(txn, db, index.add(Fingerprint(first.index, second), b"b"))
        assert index.find(txn, first) == b"a"
        assert index.find(txn, Fingerprint(first.index, second)) == b"b"


def test_real_fingerprints(db_env: tuple[Any, Any]) -> None:
    """Edited copies are found; pages drawn uniformly from a small vocabulary (word sets ~70 % alike, so
    their index parts often collide) are not."""
    env, db = db_env
    index = NearDupIndex(db)
    rng = np.random.default_rng(5)
    corpus = Corpus(seed=2)
    docs = [corpus.words(rng, 2_000) for _ in range(40)]
    small = Corpus(seed=3, vocab_size=3_000, zipf=0.0)
    uniform = [fingerprint(small.text(small.words(rng, 5_000))) for _ in range(60)]
    with env.begin(write=True) as txn:
        for i, d in enumerate(docs):
            _put(txn, db, index.add(fingerprint(corpus.text(d)), b"doc%d" % i))
        for i, fp in enumerate(uniform):
            assert index.find(txn, fp) is None
            _put(txn, db, index.add(fp, b"uniform%d" % i))
        found = [index.find(txn, fingerprint(corpus.text(corpus.edit(rng, d, 0.02)))) for d in docs]
    assert sum(f == b"doc%d" % i for i, f in enumerate(found)) >= 36
    assert all(f is None or f == b"doc%d" % i for i, f in enumerate(found))
    assert index.stats().rejected > 0  # the index part alone would have collapsed some uniform pages


def test_persists_across_transactions(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    fp = Fingerprint(42, bytes(VERIFY_BYTES))
    with env.begin(write=True) as txn:
        _put(txn, db, NearDupIndex(db).add(fp, b"x" * MAX_PAYLOAD))
    with env.begin() as txn:
        assert NearDupIndex(db).find(txn, Fingerprint(43, fp.verify)) == b"x" * MAX_PAYLOAD


def test_rejects_bad_arguments(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    fp = Fingerprint(1, bytes(VERIFY_BYTES))
    with env.begin(write=True) as txn:
        with pytest.raises(ValueError, match="payload"):
            _put(txn, db, index.add(fp, b"x" * (MAX_PAYLOAD + 1)))
        with pytest.raises(ValueError, match="sketch"):
            _put(txn, db, index.add(Fingerprint(1, b"short"), b"x"))
        with pytest.raises(ValueError, match="max_distance"):
            index.find(txn, fp, max_distance=MAX_CANDIDATE_DISTANCE + 1)
        with pytest.raises(ValueError, match="max_distance"):
            index.find(txn, fp, max_distance=-1)


def test_larger_distances_need_a_shared_band(db_env: tuple[Any, Any]) -> None:
    env, db = db_env
    index = NearDupIndex(db)
    fp = _fp(random.Random(6))
    with env.begin(write=True) as txn:
        _put(txn, db, index.add(fp, b"stored"))
        six_in_three_bands = Fingerprint(_flip(fp.index, [0, 1, 16, 17, 32, 33]), fp.verify)
        six_in_four_bands = Fingerprint(_flip(fp.index, [0, 1, 16, 17, 32, 48]), fp.verify)
        assert index.find(txn, six_in_three_bands) is None
        assert index.find(txn, six_in_three_bands, max_distance=5) is None
        assert index.find(txn, six_in_three_bands, max_distance=6) == b"stored"
        assert index.find(txn, six_in_four_bands, max_distance=MAX_CANDIDATE_DISTANCE) is None


@settings(max_examples=100, deadline=None)
@given(st.integers(0, (1 << 64) - 1), st.lists(st.integers(0, 63), max_size=3, unique=True))
def test_property_three_bit_flips_are_always_found(h: int, bits: list[int]) -> None:
    env_dir = Path(tempfile.mkdtemp())
    env = lmdb.open(str(env_dir), map_size=1 << 22, max_dbs=2)
    verify = random.Random(h).randbytes(VERIFY_BYTES)
    try:
        db = env.open_db(b"near", dupsort=True)
        index = NearDupIndex(db)
        with env.begin(write=True) as txn:
            _put(txn, db, index.add(Fingerprint(h, verify), b"p"))
            decoy = h ^ (1 << 63) ^ (1 << 47) ^ (1 << 31) ^ (1 << 15)
            _put(txn, db, index.add(Fingerprint(decoy, _bins(verify, [7])), b"decoy"))
            found = index.find(txn, Fingerprint(_flip(h, bits), verify))
        assert found == b"p"  # the decoy is 4 bits from h and its sketch is farther
    finally:
        env.close()
        shutil.rmtree(env_dir)
