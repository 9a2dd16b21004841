"""SeenSet over a real LMDB environment: exactness, false-positive accounting, crash-safe restore."""

from __future__ import annotations

import random
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import lmdb
import pytest

from polecat.dedup.seen import SeenSet, Stored


def _fps(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(16) for _ in range(n)]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Any]:
    environment = lmdb.open(str(tmp_path / "db"), map_size=1 << 28, max_dbs=4)
    yield environment
    environment.close()


def _restore(env: Any, db: Any, bloom: Path, tag: int, capacity: int, fp_rate: float) -> SeenSet:
    """The set over the LMDB table ``db``, as the frontier restores it over its seen table."""

    def keys() -> Iterator[bytes]:
        with env.begin(db=db) as txn, txn.cursor(db=db) as cur:
            yield from (bytes(k) for k in cur.iternext(keys=True, values=False))

    return SeenSet.restore(keys, _entries(env, db), bloom, tag, capacity, fp_rate)


def _open(
    env: Any, tmp_path: Path, tag: int, capacity: int = 1_000, fp_rate: float = 0.01
) -> tuple[Any, SeenSet]:
    db = env.open_db(b"seen")
    return db, _restore(env, db, tmp_path / "seen.bloom", tag, capacity, fp_rate)


def _stored(txn: Any, db: Any) -> Stored:
    """The table's lookup in ``txn``, as the frontier hands it to the set."""
    return partial(txn.get, db=db)


def _add(seen: SeenSet, txn: Any, db: Any, fps: list[bytes]) -> list[bool]:
    """Mark ``fps`` and write the new ones to the table, as the frontier's applied writes do."""
    new = seen.mark_many(_stored(txn, db), fps)
    for fp, is_new in zip(fps, new, strict=True):
        if is_new:
            txn.put(fp, b"", db=db)
    return new


def _entries(env: Any, db: Any) -> int:
    with env.begin(db=db) as txn:
        n: int = txn.stat(db)["entries"]
    return n


def test_mark_is_exact_despite_false_positives(env: Any, tmp_path: Path) -> None:
    # A tiny, saturated filter answers "seen" often; the table must keep every answer right.
    db = env.open_db(b"seen")
    seen = _restore(env, db, tmp_path / "seen.bloom", 0, capacity=10, fp_rate=0.5)
    keys = _fps(3_000, 1)
    with env.begin(write=True) as txn:
        assert all(_add(seen, txn, db, [k])[0] for k in keys)
        assert not any(seen.mark(_stored(txn, db), k) for k in keys)
        batch = keys[10:20] + _fps(5, 2) + keys[:1]
        assert _add(seen, txn, db, batch) == [False] * 10 + [True] * 5 + [False]
    assert _entries(env, db) == 3_005
    stats = seen.stats()
    assert stats.urls == 3_005
    assert stats.bloom_false_positives > 0
    assert stats.lookups_saved + stats.bloom_false_positives == 3_005
    assert stats.observed_fp_rate == stats.bloom_false_positives / 3_005
    assert stats.memory_bytes > 0


def test_a_marked_key_is_seen_once_written(env: Any, tmp_path: Path) -> None:
    # The set decides, the caller writes: a key marked new reads as seen once its write is applied.
    db, seen = _open(env, tmp_path, tag=0)
    a, b = _fps(2, 3)
    with env.begin(write=True) as txn:
        assert _add(seen, txn, db, [a, b]) == [True, True]
        assert seen.mark_many(_stored(txn, db), [a, b]) == [False, False]
        assert seen.mark(_stored(txn, db), b) is False
    assert seen.stats().urls == 2


def test_observed_false_positive_rate_near_target(env: Any, tmp_path: Path) -> None:
    db, seen = _open(env, tmp_path, tag=0, capacity=50_000, fp_rate=0.01)
    keys = _fps(50_000, 4)
    with env.begin(write=True) as txn:
        for i in range(0, len(keys), 5_000):
            assert all(_add(seen, txn, db, keys[i : i + 5_000]))
    stats = seen.stats()
    assert stats.urls == 50_000
    # Over a filter filling from empty to capacity the average rate is well under the final 1 %.
    assert 0 < stats.observed_fp_rate < 0.01
    assert stats.lookups_saved == 50_000 - stats.bloom_false_positives


def test_restore_uses_the_saved_filter_when_the_tag_matches(env: Any, tmp_path: Path) -> None:
    db, seen = _open(env, tmp_path, tag=0)
    keys = _fps(500, 5)
    with env.begin(write=True) as txn:
        _add(seen, txn, db, keys)
    seen.save(tmp_path / "seen.bloom", tag=1)
    # Plant an entry the saved filter does not know: a matching tag must trust the file, not rescan.
    planted = _fps(1, 6)[0]
    with env.begin(write=True, db=db) as txn:
        txn.put(planted, b"")
    db, restored = _open(env, tmp_path, tag=1)
    assert restored.stats().urls == 501
    with env.begin(write=True) as txn:
        assert not any(_add(restored, txn, db, keys))
        # The file was trusted, not rescanned (a rebuilt filter would know the planted key): keeping the
        # tag in step with commits is the caller's side of the contract.
        assert planted not in restored._bloom
    assert restored.stats().bloom_false_positives == 0  # every key was found in the loaded filter


@pytest.mark.parametrize("damage", ["tag", "missing", "corrupt"])
def test_restore_rebuilds_from_the_table(env: Any, tmp_path: Path, damage: str) -> None:
    db, seen = _open(env, tmp_path, tag=0)
    keys = _fps(2_500, 7)
    with env.begin(write=True) as txn:
        _add(seen, txn, db, keys[:2_000])
    seen.save(tmp_path / "seen.bloom", tag=1)
    with env.begin(write=True) as txn:  # committed after the save: the file is stale
        _add(seen, txn, db, keys[2_000:])
    path = tmp_path / "seen.bloom"
    if damage == "missing":
        path.unlink()
    elif damage == "corrupt":
        path.write_bytes(path.read_bytes()[:100])
    db, restored = _open(env, tmp_path, tag=2)
    assert restored.stats().urls == 2_500
    with env.begin(write=True) as txn:
        assert _add(restored, txn, db, keys) == [False] * 2_500
    # Rebuilt from every committed key: the later 500 are in the filter, not found by lookup.
    assert restored.stats().bloom_false_positives == 0
    assert restored.stats().lookups_saved == 0


def test_restore_of_an_empty_table(env: Any, tmp_path: Path) -> None:
    db, seen = _open(env, tmp_path, tag=5)
    assert seen.stats().urls == 0
    with env.begin(write=True) as txn:
        assert _add(seen, txn, db, [b"k" * 16])[0] is True
