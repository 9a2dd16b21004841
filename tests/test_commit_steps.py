"""The on-loop work of the node's periodic commit done a bounded step of the event loop at a time
(polecat/node/commits.py rule 11): its writes (polecat/frontier/db.py rule 15) and the working-set cut's
ranking (polecat/frontier/host_table.py rule 22), counted with loop turns, a fake clock and calls,
never timed."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
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
def db(frontier_db: FrontierDB) -> FrontierDB:
    return frontier_db


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

    def heaps_step(self) -> bool:
        return True

    def late_writes(self) -> list[Write]:
        return []


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



class Cutting(Preparing):
    """A frontier whose commit's records are taken at :meth:`prepare_commit` and whose heaps' rebuild
    takes three loop turns; ``events`` records both in order."""

    def __init__(self, events: list[str]) -> None:
        super().__init__(WRITES)
        self.events, self.heaps = events, 0

    def prepare_commit(self) -> list[Write]:
        self.events.append("records")
        return super().prepare_commit()

    def late_writes(self) -> list[Write]:
        self.events.append("late")
        return []

    def heaps_step(self) -> bool:
        self.heaps += 1
        return self.heaps % 3 == 0


@pytest.mark.parametrize("to_lmdb", [False, True])
async def test_no_frontier_decision_falls_between_a_commit_s_records_and_its_start(
        db: FrontierDB, monkeypatch: pytest.MonkeyPatch, to_lmdb: bool) -> None:
    """commits.py rule 16: from the host records and counters a periodic commit takes (prepare_commit)
    to its start (start_commit), a frontier call that waits for a free frontier makes no decision; what a
    call that does not wait decided meanwhile (an operator's control) is written by late_writes in the
    step the commit starts; so the rows a decision writes and its host's record are in one commit. The
    leases taken ahead of an LMDB commit (rule 15) come before the records, the heaps' rebuild (rule 12)
    after the start. A decision between them put its rows in one commit and its host's record in the
    next: a kill -9 between the two left a host counting a URL it had not, or not counting one it had
    (never leased again)."""
    events: list[str] = []
    clock, stop = FakeClock(), asyncio.Event()
    frontier = Cutting(events)
    commits = Commits(FrontierConfig(), db=db, frontier=frontier, store=Store(),  # type: ignore[arg-type]
                      seen=None, bloom_path=None, link=None, clock=clock,  # type: ignore[arg-type]
                      fail=lambda exc: None, wake=lambda: None)
    commits._last_bloom_save = clock.wall()
    commits._to_lmdb = to_lmdb
    start = db.start_commit

    def started(**kwargs: bool) -> object:
        events.append("start")
        return start(**kwargs)

    async def lease_ahead(seconds: float) -> None:
        for _ in range(3):
            events.append("ahead")
            await asyncio.sleep(0)

    monkeypatch.setattr(db, "start_commit", started)
    commits.lease_ahead = lease_ahead

    async def deciding() -> None:  # a lease loop's or page's frontier calls, a loop turn apart
        while not stop.is_set():
            await commits.frontier_freed()
            events.append("decision")
            await asyncio.sleep(0)

    async def controls() -> None:  # an operator's calls: they do not wait
        while not stop.is_set():
            events.append("control")
            await asyncio.sleep(0)

    calls = [asyncio.create_task(deciding()), asyncio.create_task(controls())]
    try:
        await commits._commit_off_loop()
    finally:
        stop.set()
        await asyncio.gather(*calls)
        commits.close()
    cut = events[events.index("records"):events.index("start")]
    assert "decision" not in cut and "control" in cut, events
    assert cut[-1] == "late", events  # after the last control, in the step the commit starts
    if to_lmdb or "ahead" in events:  # an LMDB commit (the fixture's db may have no log: each is one)
        assert events.index("ahead") < events.index("records"), events
    assert frontier.heaps == 3 and "decision" in events[events.index("start"):]


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


class Rebuilding(Preparing):
    """A frontier whose commit found its three heaps due for a rebuild (host_table.py rule 23): notes
    the loop turn of each step."""

    def __init__(self, turns: Turns) -> None:
        super().__init__(1)
        self.turns = turns
        self.steps: list[int] = []

    def heaps_step(self) -> bool:
        self.steps.append(self.turns.turn)
        return len(self.steps) >= 3


async def test_the_periodic_commit_rebuilds_a_heap_a_loop_turn(db: FrontierDB) -> None:
    """commits.py rule 12: the three heaps' rebuild of a periodic commit is three steps, a loop turn
    between each two."""
    clock, turns, stop = FakeClock(), Turns(), asyncio.Event()
    frontier = Rebuilding(turns)
    commits = Commits(FrontierConfig(), db=db, frontier=frontier, store=Store(),  # type: ignore[arg-type]
                      seen=None, bloom_path=None, link=None, clock=clock,  # type: ignore[arg-type]
                      fail=lambda exc: None, wake=lambda: None)
    commits._last_bloom_save = clock.wall()
    counting = asyncio.create_task(turns.run(stop))
    try:
        await commits._commit_off_loop()
    finally:
        stop.set()
        await counting
        commits.close()
    assert len(frontier.steps) == 3 and len(set(frontier.steps)) == 3


def live(heap: list[tuple[float, str]], table: HostTable) -> set[str]:
    return {host for at, host in heap if table.scheduled.get(host) == at}


@pytest.mark.usefixtures("frontier_backend")
def test_the_heaps_rebuilt_in_steps_are_whole_after_each_step(tmp_path: Path) -> None:
    """host_table.py rule 23: with the rebuild in steps, a rebuild found due rebuilds nothing at once;
    each step rebuilds one heap (ready, due, warm), stale entries gone, one tuple a host (rule 19); a
    host scheduled again between the steps is in every heap it belongs in; and each heap holds every
    host it must after every step."""
    table = full_table(tmp_path)
    hosts = sorted(table.hosts)
    for i, host in enumerate(hosts):
        if i % 3 == 0:
            table.warm[host] = 0.0
        table.schedule(host, 100.0 + i)  # the seeds' entries at 0.0 are stale from here on
    heaps = (table.heap, table.due_heap, table.warm_heap)

    def whole() -> None:
        scheduled = set(table.scheduled)
        assert live(table.heap, table) == scheduled
        assert live(table.due_heap, table) >= {h for h in scheduled if h not in table.due
                                               and h not in table.parked}
        assert live(table.warm_heap, table) >= {h for h in scheduled if h in table.warm}

    before = [len(heap) for heap in heaps]
    table.heaps_in_steps = True
    table._rebuild_heaps()
    assert [len(heap) for heap in heaps] == before  # none yet: the steps make it
    whole()
    assert not table.heaps_step()
    assert len(table.heap) == len(table.scheduled) and [len(h) for h in heaps[1:]] == before[1:]
    whole()
    table.schedule(hosts[0], 50.0)  # warm, scheduled again between the steps: a stale entry in each heap
    table.unschedule(hosts[1])
    assert not table.heaps_step()
    whole()
    assert table.heaps_step() and table.heaps_step()  # done; and nothing more to do
    whole()
    scheduled = len(table.scheduled)
    assert len(table.due_heap) == scheduled and len(table.warm_heap) == len(live(table.warm_heap, table))
    # Rule 19: one tuple a host in all three heaps, but the ready heap's stale entries of the two hosts
    # changed between the steps (the due and warm heaps, rebuilt after, hold none).
    assert len({id(entry) for heap in heaps for entry in heap}) == scheduled + 2


async def test_a_wait_for_a_free_frontier_looks_again_once_woken(db: FrontierDB) -> None:
    """commits.py rule 14: a periodic commit sets the gate after its writes and clears it for its LMDB
    commit in one step of the loop; a waiter woken by the set must not go on while it is cleared."""
    commits = Commits(FrontierConfig(), db=db, frontier=Preparing(0), store=Store(),  # type: ignore[arg-type]
                      seen=None, bloom_path=None, link=None, clock=FakeClock(),  # type: ignore[arg-type]
                      fail=lambda exc: None, wake=lambda: None)
    gate, went_on = commits.frontier_free, []

    async def frontier_call() -> None:
        await commits.frontier_freed()
        went_on.append(gate.is_set())

    try:
        gate.clear()
        calling = asyncio.create_task(frontier_call())
        await asyncio.sleep(0)
        gate.set()
        gate.clear()  # the same step: the LMDB commit begins
        for _ in range(3):
            await asyncio.sleep(0)
        assert went_on == []
        gate.set()
        await calling
        assert went_on == [True]
    finally:
        commits.close()


async def test_a_commit_answers_only_those_that_waited_for_it_before_it_began(
        db: FrontierDB, monkeypatch: pytest.MonkeyPatch) -> None:
    """commits.py rule 17: a wait for a commit (a hand-off receive's acknowledgement, an operator call's
    answer) that began before the commit in progress began is answered by it; one that began after waits
    for the next, which holds what it waited for. Before, both went on at the end of the commit in
    progress, and a batch queued during its log append was acknowledged without a commit holding it."""
    clock = FakeClock()
    commits = Commits(FrontierConfig(), db=db, frontier=Preparing(0), store=Store(),  # type: ignore[arg-type]
                      seen=None, bloom_path=None, link=None, clock=clock,  # type: ignore[arg-type]
                      fail=lambda exc: None, wake=lambda: None)
    commits._last_bloom_save = clock.wall()
    start = db.start_commit
    waits: list[asyncio.Task[None]] = []

    def started(**kwargs: bool) -> object:
        begun = start(**kwargs)
        if not waits:  # asked once this commit has begun: a receive queued during its append
            waits.append(asyncio.ensure_future(commits.next_periodic()))
        return begun

    monkeypatch.setattr(db, "start_commit", started)
    before = asyncio.ensure_future(commits.next_periodic())
    await asyncio.sleep(0)
    try:
        await commits._commit_off_loop()
        await asyncio.sleep(0)
        assert before.done() and not waits[0].done()
        await commits._commit_off_loop()
        await asyncio.sleep(0)
        assert waits[0].done()
    finally:
        commits.close()
