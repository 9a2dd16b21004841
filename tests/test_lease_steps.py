"""Steps of the event loop, counted with a fake clock, never timed (a loaded machine cannot break them):
polecat/node/leases.py rule 6 (one step leases at most STEP_LEASES hosts, or for at most STEP_BUDGET
seconds of the node's clock, then gives the loop a turn) and polecat/node/commits.py rule 10 (the page
completions a store flush held are completed a bounded step at a time)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from polecat.config import FrontierConfig, config_from_mapping
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Idle, Lease
from polecat.node.commits import DEFERRED_STEP, DEFERRED_STEP_SECONDS, Commits
from polecat.node.leases import STEP_BUDGET, STEP_LEASES, LeaseLoop
from polecat.node.run_state import RunCounters, Waker
from polecat.testing.fakes import FakeClock
from polecat.writes import Decided
from tests.lease_fakes import AppliedAsIs, FreeCommits

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


@dataclass
class Turns:
    """Counts the loop's turns: a task that bumps ``turn`` each time the loop gives it one."""

    turn: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.turn += 1
            await asyncio.sleep(0)


@dataclass
class Budget:
    full: bool = False


@dataclass
class ReadyFrontier:
    """``hosts`` hosts all ready at once, every other one https (the first too); each lease costs ``cost``
    seconds of the fake clock and is noted with the loop turn it was made in."""

    hosts: int
    clock: FakeClock
    turns: Turns
    cost: float = 0.0
    paused: bool = False
    queued: int = 0
    budget: Budget = field(default_factory=Budget)
    made_in: list[int] = field(default_factory=list)
    told_full: list[bool] = field(default_factory=list)
    """What each call was told of the connections (leases.py rule 5)."""

    def lease(self, now: float, *, prefer_warm: bool = False, full: bool = False) -> Decided[Lease | Idle]:
        self.told_full.append(full)
        if len(self.made_in) == self.hosts:
            return Decided(Idle(), [])
        self.clock.advance(self.cost)
        self.made_in.append(self.turns.turn)
        host = f"h{len(self.made_in)}.test"
        return Decided(Lease(host, f"{'https' if len(self.made_in) % 2 else 'http'}://{host}/", "page"), [])




class InstantRunner:
    parked = parked_bytes = 0

    async def run(self, lease: Lease) -> None:
        return None


async def lease_all(hosts: int, cost: float,
                    full: Callable[[int], bool] = lambda leases: False) -> ReadyFrontier:
    """Run a lease loop over ``hosts`` ready hosts; the frontier, with the loop turn of each lease."""
    cfg = config_from_mapping({"data_dir": "/nonexistent", "fetch": {"concurrency": hosts + 1}})
    clock, turns, stop = FakeClock(), Turns(), asyncio.Event()
    frontier = ReadyFrontier(hosts, clock, turns, cost)
    loop = LeaseLoop(cfg, frontier=frontier, db=AppliedAsIs(), commits=FreeCommits(),  # type: ignore[arg-type]
                     runner=InstantRunner(), waker=Waker(lambda: None),  # type: ignore[arg-type]
                     counters=RunCounters(), link=None, clock=clock, stop=asyncio.Event(), full=full)
    counting = asyncio.create_task(turns.run(stop))
    await loop.run(serve=False)
    stop.set()
    await counting
    assert len(frontier.made_in) == hosts
    return frontier


async def test_a_step_leases_at_most_step_leases_hosts_however_many_are_ready() -> None:
    made_in = (await lease_all(10 * STEP_LEASES + 5, cost=0.0)).made_in
    per_step = Counter(made_in)
    assert max(per_step.values()) == STEP_LEASES  # 650 hosts ready at once: never all in one step
    assert len(per_step) == 11  # ten full steps, and the five left in one more


async def test_a_step_ends_once_its_time_budget_is_spent_on_the_nodes_clock() -> None:
    cost = STEP_BUDGET / 2.5  # a slow lease: the third one spends the budget
    made_in = (await lease_all(300, cost=cost)).made_in
    per_step = Counter(made_in)
    assert max(per_step.values()) == 3
    assert sum(per_step.values()) == 300 and len(per_step) == 100


async def test_each_lease_is_told_whether_the_connections_with_the_leases_in_flight_are_full() -> None:
    """leases.py rule 5: the pool's answer for the https leases in flight (pool rule 15), at each call: a
    plain-HTTP lease opens no TLS connection."""
    asked: list[int] = []

    def full(leases: int) -> bool:
        asked.append(leases)
        return leases >= 2

    frontier = await lease_all(5, cost=0.0, full=full)  # one step: no lease ends before the last starts
    assert asked == [0, 1, 1, 2, 2, 3]  # h1, h3 and h5 are https
    assert frontier.told_full == [False, False, False, True, True, True]


@dataclass
class CompletingFrontier:
    """Notes the loop turn of each completion; each costs ``cost`` seconds of the fake clock."""

    clock: FakeClock
    turns: Turns
    cost: float
    completed_in: list[int] = field(default_factory=list)

    def complete(self, lease: Lease, completion: Completion, now: float) -> list[object]:
        self.clock.advance(self.cost)
        self.completed_in.append(self.turns.turn)
        return []


class Applies:
    def apply(self, writes: list[object]) -> None:
        return None


@pytest.mark.parametrize(("cost", "most"), [(0.0, DEFERRED_STEP), (DEFERRED_STEP_SECONDS / 2.5, 3)])
async def test_completions_held_by_a_flush_are_completed_a_bounded_step_at_a_time(
        cost: float, most: int) -> None:
    clock, turns, stop = FakeClock(), Turns(), asyncio.Event()
    frontier = CompletingFrontier(clock, turns, cost)
    wakes: list[int] = []
    commits = Commits(FrontierConfig(), db=Applies(), frontier=frontier, store=None,  # type: ignore[arg-type]
                      seen=None, bloom_path=None, link=None, clock=clock,  # type: ignore[arg-type]
                      fail=lambda exc: None, wake=lambda: wakes.append(turns.turn))
    try:
        commits.flushing = True
        now = clock.wall()
        held = 10 * DEFERRED_STEP + 5
        for i in range(held):
            assert commits.defer(Lease(f"h{i}.test", f"http://h{i}.test/", "page"),
                                 Completion(Attempt(now, now, now, 200), "fetched"))
        commits.flushing = False
        counting = asyncio.create_task(turns.run(stop))
        await commits._complete_deferred_in_steps()
        stop.set()
        await counting
    finally:
        commits.close()
    per_step = Counter(frontier.completed_in)
    assert sum(per_step.values()) == held and max(per_step.values()) == most
    assert len(per_step) == -(-held // most) and len(wakes) == len(per_step)  # the lease loop woken each step
