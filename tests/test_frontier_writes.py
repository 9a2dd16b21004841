"""Every frontier call that changes state is a decision (polecat/writes.py): it returns its
writes and leaves the tables alone until they are applied. Each test calls the frontier itself
(``rig.raw``), checks the writes, checks the transaction did not change, then applies them."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from polecat.config import Config, RefreshConfig, ScopeConfig
from polecat.frontier.keys import op_key, url_key
from polecat.frontier.leasing import ROBOTS_SKIPS_PER_LEASE
from polecat.frontier.records import Lease, Wait
from polecat.frontier.slices import slice_of
from polecat.writes import Decided, Delete, DeleteSlices, Write
from tests.frontier_helpers import Rig, canon, politeness


def shape(writes: list[Write]) -> list[str]:
    return [f"{type(w).__name__}:{w.table}" if not isinstance(w, DeleteSlices) else "DeleteSlices"
            for w in writes]


def rows(rig: Rig, table: str) -> int:
    return rig.db.count(table)


def open_host(rig: Rig, url: str, now: float, robots: bytes = b"") -> None:
    rig.frontier.add_seed(canon(url), now)
    lease = rig.frontier.lease(now)
    assert isinstance(lease, Lease) and lease.kind == "robots"
    rig.complete_robots(lease, now, body=robots)


def test_adding_returns_the_seen_and_queue_writes(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    seed = rig.raw.add_seed(canon("http://a.test/"), 0.0)
    # intake.py rule 9: the seed mark is in the host's record (in memory, written with the next commit).
    assert seed.value == "accepted" and shape(seed.writes) == ["Put:seen", "Put:queue"]
    st = rig.raw._table.hosts["a.test"]
    assert st.seed
    assert rows(rig, "queue") == rows(rig, "seen") == 0  # decided, not written
    assert rig.raw.queued == 1  # the in-memory index already counts it
    rig.db.apply(seed.writes)
    assert rows(rig, "queue") == rows(rig, "seen") == 1
    links = [canon(f"http://a.test/{i}") for i in (1, 2, 2, 3)] + [canon("http://a.test/")]
    many = rig.raw.add_many(links, 1, 0.5, 0.0)
    assert many.value == 3 and shape(many.writes) == ["Put:seen", "Put:queue"] * 3
    assert rows(rig, "queue") == 1
    rig.db.apply(many.writes)
    assert rows(rig, "queue") == 4
    again = rig.raw.add(canon("http://a.test/3"), 1, 0.5, 0.0)
    assert again == Decided("seen", [])


def test_a_redirect_batch_names_each_url_once(tmp_path: Path) -> None:
    # Admitted one by one (hops > 0), a URL repeated in the batch is still marked and queued once.
    rig = Rig(tmp_path)
    url = canon("http://a.test/t")
    got = rig.raw.admit([url, url], 1, 0.5, 0.0, hops=1)
    assert got.value.accepted == 1 and shape(got.writes) == ["Put:seen", "Put:queue"]


def test_lease_returns_the_robots_skips_and_reads_none_twice(tmp_path: Path) -> None:
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1000.0))
    rig = Rig(tmp_path, cfg=cfg)
    open_host(rig, "http://a.test/", 0.0, robots=b"User-agent: *\nDisallow: /no/\n")
    root = rig.frontier.lease(5.0)
    assert isinstance(root, Lease)
    rig.complete(root, 5.0)
    n = ROBOTS_SKIPS_PER_LEASE + 10
    rig.frontier.add_many([canon(f"http://a.test/no/{i}") for i in range(n)], 1, 0.9, 6.0)
    rig.frontier.add(canon("http://a.test/yes"), 1, 0.1, 6.0)
    first = rig.raw.lease(10.0)
    # The skip budget ran out: the retired URLs are still in the table, so the call stops here.
    assert first.value == Wait(10.0) and shape(first.writes) == ["Delete:queue", "Put:urls"] * (n - 10)
    assert rows(rig, "queue") == n + 1
    rig.db.apply(first.writes)
    second = rig.raw.lease(10.0)
    assert isinstance(second.value, Lease) and second.value.url == canon("http://a.test/yes")
    assert len(second.writes) == 2 * 10
    rig.db.apply(second.writes)
    assert rows(rig, "queue") == 1 and rig.raw.queued == 1
    assert dict(rig.raw.stats(10.0).done)["skipped:robots"] == n  # each retired once


def test_operator_controls_are_decisions(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    for i in range(3):
        rig.frontier.add(canon(f"http://a.b.test/{i}"), 1, 0.1, 0.0)
    block = rig.raw.block("*.b.test")
    assert block.value == 3 and shape(block.writes) == ["Put:ops"] + ["Delete:queue", "Put:urls"] * 3
    assert rows(rig, "queue") == 3 and rows(rig, "ops") == 0
    rig.db.apply(block.writes)
    assert rows(rig, "queue") == 0
    assert rig.raw.unblock("*.b.test") == Decided(True, [Delete("ops", op_key("block", "*.b.test"))])
    assert rig.raw.unblock("*.b.test").value is False
    assert shape(rig.raw.set_throttle("a.test", 5.0)) == ["Put:ops"]
    assert rig.raw.unthrottle("a.test").value is True and rig.raw.unthrottle("a.test").value is False
    assert shape(rig.raw.set_paused(True)) == ["Put:ops"]
    assert shape(rig.raw.set_paused(False)) == ["Delete:ops"]


def test_requeue_due_returns_its_writes(tmp_path: Path) -> None:
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1000.0),
                 refresh=RefreshConfig(enabled=True, min_interval=60.0, default_interval=60.0))
    rig = Rig(tmp_path, cfg=cfg)
    open_host(rig, "http://a.test/", 0.0)
    page = rig.frontier.lease(5.0)
    assert isinstance(page, Lease)
    rig.complete(page, 5.0)
    due = rig.raw.requeue_due(10_000.0)
    # The URL's refresh rows follow its record: no longer due (refresh_index.py rule 4).
    assert due.value[0] == 1 and shape(due.writes) == ["Put:urls", "Put:refresh", "Delete:due", "Put:queue"]
    assert rows(rig, "queue") == 0
    rig.db.apply(due.writes)
    assert rows(rig, "queue") == 1 and rig.frontier.requeue_due(10_000.0)[0] == 0


def test_adopt_marks_a_url_queued_and_seen_there_once(tmp_path: Path) -> None:
    a, b = Rig(tmp_path / "a"), Rig(tmp_path / "b")
    a.frontier.add_seed(canon("http://x.test/"), 0.0)
    a.frontier.add(canon("http://x.test/1"), 1, 0.5, 0.0)
    bundle = a.raw.export_slices([slice_of("x.test")], 1.0)  # the dirty host record comes along
    assert any(table == "hosts" for table, _, _ in bundle.records())
    got = b.raw.adopt(bundle, 1.0)
    # The bundle holds both URLs in "queue" and in "seen": each is marked, and written, once.
    assert got.value.queued == 2 and got.value.seen == 0 and got.value.duplicates == 0
    assert shape(got.writes).count("Put:seen") == 2 and rows(b, "queue") == 0
    b.db.apply(got.writes)
    assert rows(b, "queue") == 2 and rows(b, "seen") == 2
    assert b.seen.stats().urls == 2


def test_release_and_commit_preparation_are_writes(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.frontier.add_seed(canon("http://x.test/"), 0.0)
    s = slice_of("x.test")
    released = rig.raw.release_slices([s])
    # handover.py rule 7: the host with its queue row (and its record, not written yet, which holds its
    # seed mark: intake.py rule 9), then the slice (its seen keys) and the meta row of the release under way.
    assert shape(released) == ["Put:meta", "Delete:queue", "Delete:hosts", "DeleteSlices", "Delete:meta"]
    assert rows(rig, "queue") == 1 and rig.raw.queued == 0  # forgotten in memory, deleted once applied
    rig.db.apply(released)
    assert rows(rig, "queue") == rows(rig, "seen") == 0
    rig.frontier.add_seed(canon("http://y.test/"), 0.0)
    prep = rig.raw.prepare_commit()
    # host_table.py rule 8: the host in memory gets its ``resident`` row with its first commit; the
    # counters follow (the queue's, the host numbers' (rule 14), the outcomes', the queue bands' (rule
    # 24: counted from the start on a new data dir), the hosts' (rule 12), the refresh index's).
    assert shape(prep) == ["Put:hosts", "Put:resident", "Put:meta", "Put:meta", "Put:meta", "Put:meta",
                           "Put:meta", "Put:meta"]
    assert rows(rig, "hosts") == 0
    assert rig.raw.prepare_commit()[0].table == "meta"  # host records are written once per commit


def test_opening_applies_the_configured_controls(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.frontier.add(canon("http://a.test/1"), 1, 0.5, 0.0)
    rig.frontier.commit()
    rig.crash()
    rig.cfg = replace(rig.cfg, scope=replace(rig.cfg.scope, block=("a.test",)))
    rig.reopen(1.0)
    assert rig.frontier.queued == 0 and rig.db.txn.get(op_key("block", "a.test"), db=rig.db.ops) == b""
    rec = rig.frontier.url_record(canon("http://a.test/1"))
    assert rec is not None and rec.reason == "blocked"
    assert rig.db.get("seen", url_key(canon("http://a.test/1"))) is not None


def test_writes_applied_during_a_commit_wait_for_the_next_transaction(tmp_path: Path) -> None:
    """FrontierDB rule 3: an apply during a commit in flight returns at once; a read waits for it."""
    rig = Rig(tmp_path)
    db: Any = rig.db
    gate, commit_txn = threading.Event(), db._writer._commit
    db._writer._commit = lambda txn, before, after: (gate.wait(5), commit_txn(txn, before, after))[1]
    done = rig.raw.add_seed(canon("http://a.test/"), 0.0)
    fut = db.start_commit(to_lmdb=True)  # an LMDB commit: a log append leaves the txn to the loop
    db.apply(done.writes)  # would block on the writer thread's commit if it used the transaction
    assert not fut.done() and len(db._backlog) == len(done.writes)
    gate.set()
    assert rows(rig, "queue") == 1 and db._backlog == []  # the read waited for the commit, then the backlog
    rig.frontier.commit()
    rig.crash()
    rig.reopen(1.0)
    assert rig.frontier.queued == 1
