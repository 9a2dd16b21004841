"""The frontier's LMDB writer thread (polecat/frontier/db.py rules 1 and 2)."""

from __future__ import annotations

import threading
from pathlib import Path

from polecat.frontier.db import FrontierDB


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
