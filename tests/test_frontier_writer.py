"""The frontier's LMDB writer thread (polecat/frontier/db.py rules 1 and 2)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from polecat.frontier.db import FrontierDB
from polecat.frontier.seenlog import SeenRuns
from polecat.writes import Put


def test_a_commit_runs_on_the_writer_thread_and_the_txn_waits_for_it(tmp_path: Path) -> None:
    db = FrontierDB(tmp_path / "f", map_size=1 << 24, params={})
    threads: list[int] = []
    started, release = threading.Event(), threading.Event()
    commit_txn = db._writer._commit

    def held_commit(txn: object, before: object, after: object) -> object:
        threads.append(threading.get_ident())
        started.set()
        release.wait(5)
        return commit_txn(txn, before, after)  # type: ignore[arg-type]

    db._writer._commit = held_commit  # type: ignore[method-assign]
    db.txn.put(b"a", b"1", db=db.meta)
    db.pending = 3
    seq = db.seq
    pending = db.start_commit(to_lmdb=True)  # an LMDB commit (db.py rule 6)
    assert started.wait(5) and not pending.done() and db.pending == 0  # returned; the commit waits
    assert threads[0] != threading.get_ident()
    release.set()
    db.txn.put(b"b", b"2", db=db.meta)  # waits for the commit, then writes into the next transaction
    assert pending.done() and db.seq == seq + 1
    db.close()  # drops the uncommitted b
    again = FrontierDB(tmp_path / "f", map_size=1 << 24, params={})
    assert again.txn.get(b"a", db=again.meta) == b"1" and again.txn.get(b"b", db=again.meta) is None
    assert again.seq == seq + 1
    again.close()


def test_an_lmdb_commit_prepares_the_seen_run_on_the_writer_thread(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """db.py rule 4 / seenlog.py rule 2: the memtable is sorted and the manifest made on the writer
    thread, not on the caller's (the event loop's); the run it lists holds every key after a reopen."""
    db = FrontierDB(tmp_path / "f", map_size=1 << 24, params={})
    prepared_on: list[int] = []
    prepare = SeenRuns.prepare

    def noted(runs: SeenRuns, seq: int) -> bytes:
        prepared_on.append(threading.get_ident())
        return prepare(runs, seq)

    monkeypatch.setattr(SeenRuns, "prepare", noted)
    keys = sorted(bytes([i % 7, 0, i % 3]) + bytes(14) + bytes([i]) for i in range(200))
    db.apply([Put("seen", key, b"") for key in reversed(keys)])
    db.commit(to_lmdb=True)
    assert len(prepared_on) == 1 and prepared_on[0] != threading.get_ident()
    db.close()
    again = FrontierDB(tmp_path / "f", map_size=1 << 24, params={})
    assert [key for key, _ in again.items("seen")] == keys
    again.close()
