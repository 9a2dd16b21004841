"""The on-loop work of the node's periodic commit done a bounded step of the event loop at a time
(polecat/node/commits.py rule 11): its writes (polecat/frontier/db.py rule 15) and the working-set cut's
ranking (polecat/frontier/host_table.py rule 22), counted with loop turns, a fake clock and calls,
never timed."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import lmdb
import pytest

from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.frontier.db import FrontierDB
from polecat.frontier.host_table import HostState, HostTable
from polecat.node.commits import APPLY_CHUNK, APPLY_STEP, APPLY_STEP_SECONDS, Commits
from polecat.testing.fakes import FakeClock
from polecat.writes import Put, PutRows, Write
from tests.frontier_helpers import Rig, canon, politeness
from tests.test_lease_steps import Turns

pytestmark = pytest.mark.timeout(120)

WRITES = 10 * APPLY_STEP * APPLY_CHUNK + 5


def key(i: int) -> bytes:
    return b"step-%06d" % i


def writes(n: int, value: bytes = b"v") -> list[Write]:
    return [Put("meta", key(i), value) for i in range(n)]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[FrontierDB]:
    frontier_db = FrontierDB(tmp_path / "frontier", map_size=1 << 28, params={})
    try:
        yield frontier_db
    finally:
        frontier_db.close()


def in_txn(db: FrontierDB, n: int) -> int:
    """Keys of :func:`writes` in the open transaction, read under the queue (no read through ``db``)."""
    txn: lmdb.Transaction = db._writer.txn
    return sum(txn.get(key(i), db=db.meta) is not None for i in range(n))


def test_queued_writes_are_applied_a_step_at_a_time_and_before_any_read(db: FrontierDB) -> None:
    """db.py rule 15: apply_step applies at most its count; a write applied meanwhile goes behind the
    queue; a read applies everything queued first, in order."""
    db.apply_later(writes(1000))
    assert in_txn(db, 1000) == 0
    assert db.apply_step(256) == 744 and in_txn(db, 1000) == 256
    db.apply([Put("meta", key(999), b"newer")])  # behind the queue: the older value must not win
    assert in_txn(db, 1000) == 256
    assert db.get("meta", key(999)) == b"newer"  # the read applied the queue, then the newer write
    assert in_txn(db, 1000) == 1000 and db.apply_step(256) == 0


def test_a_step_splits_a_batch_of_rows_where_it_ends(db: FrontierDB) -> None:
    """db.py rule 15: a PutRows (a seeds batch) counts its rows, and the step that ends within it applies
    its first rows only."""
    db.apply_later([PutRows("meta", [key(i) for i in range(1000)], [b"v"] * 1000)])
    assert db.apply_step(256) == 1 and in_txn(db, 1000) == 256
    assert db.apply_step(700) == 1 and in_txn(db, 1000) == 956
    assert db.apply_step(700) == 0 and in_txn(db, 1000) == 1000


class Store:
    def flush(self) -> None:
        return None

    def record_count(self) -> int:
        return 0


class Preparing:
    """A frontier whose commit writes ``n`` records kept in memory."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pending_ops = n

    def prepare_commit(self) -> list[Write]:
        return writes(self.n)

    def rank_for_commit(self, most: int) -> bool:
        return True


def applied_per_turn(db: FrontierDB, turns: Turns, monkeypatch: pytest.MonkeyPatch, clock: FakeClock,
                     cost: float, began: asyncio.Event) -> Counter[int]:
    """Writes of :func:`writes` applied in each loop turn (``began`` set at the first); each chunk applied
    costs ``cost`` seconds of the fake clock."""
    per_turn: Counter[int] = Counter()
    apply = db._apply

    def counted(txn: lmdb.Transaction, batch: Iterable[Write]) -> None:
        batch = list(batch)
        ours = sum(isinstance(w, Put) and w.key.startswith(b"step-") for w in batch)
        per_turn[turns.turn] += ours
        if ours:
            clock.advance(cost)
            began.set()
        apply(txn, batch)

    monkeypatch.setattr(db, "_apply", counted)
    return per_turn


@pytest.mark.parametrize(("cost", "most"), [(0.0, APPLY_STEP * APPLY_CHUNK),
                                            (APPLY_STEP_SECONDS / 2.5, 3 * APPLY_CHUNK)])
async def test_the_periodic_commit_applies_its_writes_a_bounded_step_at_a_time(
        db: FrontierDB, monkeypatch: pytest.MonkeyPatch, cost: float, most: int) -> None:
    """commits.py rule 11: the writes of a periodic commit go into the transaction at most APPLY_STEP
    chunks (or APPLY_STEP_SECONDS of the node's clock) a loop turn, frontier calls held meanwhile, all of
    them before the commit is made."""
    clock, turns, stop = FakeClock(), Turns(), asyncio.Event()
    commits = Commits(FrontierConfig(), db=db, frontier=Preparing(WRITES), store=Store(),  # type: ignore[arg-type]
                      seen=None, bloom_path=None, link=None, clock=clock,  # type: ignore[arg-type]
                      fail=lambda exc: None, wake=lambda: None)
    commits._last_bloom_save = clock.wall()  # no Bloom snapshot in this commit
    began = asyncio.Event()
    per_turn = applied_per_turn(db, turns, monkeypatch, clock, cost, began)
    seq = db.seq
    held: list[bool] = []

    async def frontier_call() -> None:  # what a lease does once the steps began: wait for a free frontier
        await began.wait()
        held.append(not commits.frontier_free.is_set())
        await commits.frontier_free.wait()
        held.append(in_txn(db, WRITES) == WRITES)

    counting = asyncio.create_task(turns.run(stop))
    calling = asyncio.create_task(frontier_call())
    try:
        await commits._commit_off_loop()
        await calling
    finally:
        stop.set()
        await counting
        commits.close()
    assert sum(per_turn.values()) == WRITES
    assert max(per_turn.values()) == most
    assert len(per_turn) >= WRITES // most
    assert held == [True, True]
    assert db.seq == seq + 1 and db.get("meta", key(WRITES - 1)) == b"v"



HOSTS, BOUND = 600, 400


def full_table(tmp_path: Path) -> HostTable:
    """A host table with ``HOSTS`` records in memory, past a working-set bound of ``BOUND``."""
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1.0)))
    for i in range(HOSTS):
        rig.frontier.add_seed(canon(f"http://h{i:03d}.cut.test/"), 0.0)
    table: HostTable = rig.raw._table
    table.working_hosts = BOUND
    return table


@pytest.mark.usefixtures("frontier_backend")
def test_the_cut_ranked_in_steps_ranks_a_step_at_most_and_drops_what_one_pass_would(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """host_table.py rule 22: rank_step ranks at most its count of records; the commit's cut then ranks
    the candidates kept (the cut and a quarter), not every record in memory, and drops the same records
    as a ranking of all memory at the commit; a candidate made busy between the steps is kept."""
    calls: list[str] = []
    key = HostTable._cut_key

    def counted(table: HostTable, host: str, st: HostState) -> object:
        calls.append(host)
        return key(table, host, st)

    at_once = full_table(tmp_path / "once")
    at_once.host_writes()

    stepped = full_table(tmp_path / "steps")
    monkeypatch.setattr(HostTable, "_cut_key", counted)
    steps = 0
    while True:
        steps += 1
        before = len(calls)
        done = stepped.rank_step(100)
        assert len(calls) - before <= 100
        if done:
            break
    assert steps == HOSTS // 100 and len(calls) == HOSTS
    calls.clear()
    cut = stepped._cut_due()
    assert cut == HOSTS - BOUND * 3 // 4
    stepped.host_writes()
    assert len(calls) == cut + cut // 4  # the candidates, not the 600 records
    assert set(stepped.hosts) == set(at_once.hosts) and len(stepped.hosts) == HOSTS - cut

    busy = full_table(tmp_path / "busy")
    assert not busy.rank_step(HOSTS // 2)
    assert busy._ranking is not None
    victim = max(busy._ranking.best)[2]  # the first the cut would drop
    busy.hosts[victim].in_flight = True  # leased meanwhile: never dropped (rule 6)
    assert busy.rank_step(HOSTS)
    busy.host_writes()
    assert victim in busy.hosts and len(busy.hosts) == HOSTS - cut
