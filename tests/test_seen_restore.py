"""The seen-set's Bloom snapshot after a kill -9 (polecat/dedup/seen.py, polecat/frontier/seenlog.py rule
7): a snapshot of an earlier commit is brought up to date with the keys committed since, not rebuilt from
the whole table; one the table cannot follow (of a later commit) is rebuilt."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from polecat.config import Config, FrontierConfig
from polecat.dedup.seen import SeenSet
from tests.frontier_helpers import Rig, canon

CFG = replace(Config(scope=replace(Config().scope, mode="any")),
              frontier=FrontierConfig(working_hosts=100, log_mb=64))


def add(rig: Rig, batch: str, now: float) -> None:
    rig.frontier.add_many([canon(f"http://{batch}{i}.test/p") for i in range(20)], 1, 0.5, now)
    rig.frontier.commit()


@pytest.fixture
def rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    rebuild = SeenSet.rebuild.__func__  # type: ignore[attr-defined]

    def counted(cls: type[SeenSet], *args: object, **kwargs: object) -> SeenSet:
        calls.append(1)
        return rebuild(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(SeenSet, "rebuild", classmethod(counted))
    return calls


def test_a_snapshot_of_an_earlier_commit_is_brought_up_to_date_not_rebuilt(tmp_path: Path,
                                                                            rebuilds: list[int]) -> None:
    rig = Rig(tmp_path, cfg=CFG)
    add(rig, "a", 1_000.0)
    rig.seen.save(tmp_path / "seen.bloom", rig.db.seq)  # the node's periodic save (polecat/node/commits.py)
    add(rig, "b", 1_001.0)
    rig.db.commit(to_lmdb=True)  # b's keys in a run of a later LMDB commit
    add(rig, "c", 1_002.0)  # c's in the log only
    assert rig.db._in_lmdb < rig.db.seq
    rig.crash()
    rebuilds.clear()
    rig.reopen(1_003.0)
    assert rebuilds == []
    keys = list(rig.db.seen_keys())
    assert len(keys) == 60 and all(k in rig.seen._bloom for k in keys)
    assert all(rig.frontier.add(canon(f"http://{b}{i}.test/p"), 1, 0.5, 1_003.0) == "seen"
               for b in "abc" for i in range(20))


def test_a_snapshot_of_a_later_commit_is_rebuilt(tmp_path: Path, rebuilds: list[int]) -> None:
    rig = Rig(tmp_path, cfg=CFG)
    add(rig, "a", 1_000.0)
    rig.seen.save(tmp_path / "seen.bloom", rig.db.seq + 5)  # of data this dir does not hold
    rig.crash()
    rebuilds.clear()
    rig.reopen(1_001.0)
    assert rebuilds == [1]
    assert all(k in rig.seen._bloom for k in rig.db.seen_keys())
