"""Queue heads read ahead of the leases after an open (polecat/frontier/read_ahead.py rules 1-4,
polecat/frontier/head_reader.py rules 1-3, polecat/node/leases.py rule 8): the hosts handed to the reader
are those the next leases take, in order, at most ``depth`` ahead; leasing never waits for a read; the read-
ahead stops once the heads are warm, and with the node, leaving no thread and no read transaction."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from polecat import Crawler
from polecat.config import Config, FrontierConfig, ScopeConfig, config_from_mapping
from polecat.frontier.db import FrontierDB
from polecat.frontier.head_reader import ThreadHeadReader
from polecat.frontier.read_ahead import WARM_SHARE, WINDOW, Head, HeadsAhead, ReadAhead
from polecat.frontier.records import Idle, Lease, Wait
from polecat.testing.fakes import Canned, FakeClock, FakeFetcher, FakeHeadReader, MemoryPageStore
from tests.frontier_helpers import Rig, canon, politeness

RATE = 1.0


def opened(tmp_path: Path, hosts: int, working: int) -> Rig:
    """A frontier of ``hosts`` hosts with two URLs each, robots.txt answered, reopened (as after a
    restart): the ones in memory at the last commit come back, the rest wait in the ``ready`` index."""
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=RATE),
                 frontier=FrontierConfig(working_hosts=working))
    rig = Rig(tmp_path, cfg)
    for i in range(hosts):
        rig.robots.record_response(f"http://h{i}.ra.test", 404, b"", 0.0)
        for path in ("/", "/b"):
            rig.frontier.add_seed(canon(f"http://h{i}.ra.test{path}"), float(i % 7))
        if rig.db.pending >= 50:
            rig.frontier.commit()
    rig.frontier.commit()
    rig.crash()  # everything committed: closes the data dir for the reopen
    rig.reopen(now=100.0)
    for i in range(hosts):
        rig.robots.record_response(f"http://h{i}.ra.test", 404, b"", 0.0)
    return rig


def lease_all(rig: Rig, heads: HeadsAhead, now: float, most: int) -> tuple[list[str], list[int], int]:
    """Lease and complete up to ``most`` times, a step of ``heads`` before each call, as the node's
    lease loop does, committing every 50 leases; the hosts leased, after each call how many hosts handed
    out were not leased, and how many hosts were leased for the first time before they were handed."""
    leased: list[str] = []
    ahead: list[int] = []
    reader = heads.reader
    assert isinstance(reader, FakeHeadReader)
    unread = 0
    for _ in range(most * 4):
        if len(leased) == most:
            break
        heads.step(now)
        got = rig.frontier.lease(now)
        if isinstance(got, Lease):
            handed = {h.host for batch in reader.handed for h in batch}
            unread += got.host not in handed
            leased.append(got.host)
            rig.complete(got, now)
            if len(leased) % 50 == 0:
                rig.frontier.commit()  # as the node's commits: the working set's cut makes room
        elif isinstance(got, Wait) and got.until is not None:
            now = max(now, got.until)
        else:
            assert isinstance(got, Idle)
            break
        ahead.append(sum(map(len, reader.handed)) - len(leased))
    return leased, ahead, unread


@pytest.mark.usefixtures("frontier_backend")
def test_hosts_handed_are_the_next_leases_in_order_bounded_by_depth(tmp_path: Path) -> None:
    rig = opened(tmp_path, hosts=90, working=100)
    assert rig.raw.hosts_in_memory == 90  # all in memory: the heap's order alone (rule 1)
    reader = FakeHeadReader()
    heads = HeadsAhead(ReadAhead(rig.raw._table, depth=16), reader)
    heads.start()
    leased, ahead, _ = lease_all(rig, heads, 100.0, most=180)
    handed = [h.host for batch in reader.handed for h in batch]
    assert len(leased) == 180
    assert handed[:len(leased)] == leased  # rule 1: in the order the leases take them
    # Rule 2: never more than depth ahead of the leases, a batch at most depth.
    assert max(ahead) <= 16
    assert all(len(batch) <= 16 for batch in reader.handed)
    assert reader.started == 1 and reader.stopped == 0


@pytest.mark.usefixtures("frontier_backend")
def test_hosts_out_of_memory_are_handed_before_their_leases(tmp_path: Path) -> None:
    rig = opened(tmp_path, hosts=250, working=100)
    assert rig.raw.hosts_in_memory < 250  # the others wait in the ready index
    reader = FakeHeadReader()
    heads = HeadsAhead(ReadAhead(rig.raw._table, depth=16), reader)
    heads.start()
    leased, ahead, unread = lease_all(rig, heads, 100.0, most=500)
    assert len(leased) == 500 and len(set(leased)) == 250
    assert any(h.num is None for batch in reader.handed for h in batch)  # rows: their records read first
    # Rule 1: most hosts were handed before their first lease. Not all: a host of a row comes in at its
    # turn in the heap, and the cut of a commit (host_table.py rule 6) files hosts in the index again;
    # where the order differs, the lease reads its head itself (rule 3).
    assert unread <= 250 // 8
    # Rule 2: the hosts handed and not leased yet stay bounded (a host leased before it was handed
    # leaves the one handed for it ahead until its entry is seen gone: twice depth here, not more).
    assert max(ahead) <= 2 * 16 and all(len(batch) <= 16 for batch in reader.handed)


@pytest.mark.usefixtures("frontier_backend")
def test_leasing_never_waits_for_the_reader(tmp_path: Path) -> None:
    rig = opened(tmp_path, hosts=150, working=100)
    reader = FakeHeadReader()  # reads nothing, ever
    heads = HeadsAhead(ReadAhead(rig.raw._table, depth=8), reader)
    heads.start()
    leased, _, _ = lease_all(rig, heads, 100.0, most=100)
    assert len(leased) == 100 and reader.counts() == (0, 0)  # every lease made, not one head read


@pytest.mark.usefixtures("frontier_backend")
def test_stops_once_a_window_of_heads_is_warm(tmp_path: Path) -> None:
    rig = opened(tmp_path, hosts=20, working=100)
    reader = FakeHeadReader()
    heads = HeadsAhead(ReadAhead(rig.raw._table, depth=8), reader)
    heads.start()
    reader.read_so_far, reader.faults = WINDOW, WINDOW // WARM_SHARE  # cold enough: goes on
    heads.step(200.0)
    assert heads.running and heads.policy.active and reader.handed
    reader.read_so_far, reader.faults = 2 * WINDOW, WINDOW // WARM_SHARE  # a window without a fault
    batches = len(reader.handed)
    heads.step(200.0)
    assert not heads.policy.active and not heads.running and reader.stopped == 1
    heads.step(200.0)
    assert heads.policy.next_heads(200.0) == [] and len(reader.handed) == batches
    heads.start()  # a later run of the same frontier: nothing to start
    assert reader.started == 1


def active_readers(db: FrontierDB) -> list[str]:
    """The rows of LMDB's reader table with a read transaction open (txnid not "-")."""
    rows = db.env.readers().splitlines()[1:]
    return [row for row in rows if row.split()[-1] != "-"]


def head_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "polecat-heads"]


def test_thread_reader_reads_every_head_and_stops_clean(tmp_path: Path) -> None:
    rig = opened(tmp_path, hosts=150, working=100)
    assert isinstance(rig.db, FrontierDB)
    rig.frontier.commit()
    table = rig.raw._table
    heads = [Head(h, st.num) for h, st in table.hosts.items()]
    heads += [Head("nowhere.test", None), Head(next(iter(table.hosts)), None)]  # no record; a record
    reader = ThreadHeadReader(rig.db.env, rig.db.queue, rig.db.hosts)
    reader.start()
    reader.read(heads)
    for _ in range(10_000):  # waits for the thread, bounded; nothing is timed
        if reader.counts()[0] == len(heads):
            break
        threading.Event().wait(0.001)
    assert reader.counts()[0] == len(heads)
    reader.stop()
    assert head_threads() == [] and active_readers(rig.db) == []
    rig.db.close()


async def test_node_stops_its_reader_with_the_run(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.0005)
    seeds = [f"http://h{i}.node.test/" for i in range(30)]
    fetcher = FakeFetcher(clock, {u: Canned(200, b"<html><body>x</body></html>") for u in seeds})
    cfg = config_from_mapping({
        "data_dir": str(tmp_path), "scope": {"seeds": seeds, "mode": "host"},
        "politeness": {"rate": 200.0}, "frontier": {"commit_ms": 20.0},
    })
    during: list[int] = []

    def note(lease: Lease, _: object) -> None:
        during.append(len(head_threads()))

    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore(), on_lease=note) as crawler:
        crawler.frontier.read_ahead.depth = 4
        await crawler.run()
        assert head_threads() == [] and active_readers(crawler._db) == []
    assert len(fetcher.calls) == 60 and max(during) == 1  # it ran, one thread, and is gone
