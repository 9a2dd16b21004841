"""polecat/node/leases.py rule 6: one step of the event loop leases at most STEP_LEASES hosts, or for at
most STEP_BUDGET seconds of the node's clock, then gives the loop a turn. Counted in steps and leases
with a fake clock, never timed: a loaded machine cannot break it."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import pytest

from polecat.config import config_from_mapping
from polecat.frontier.records import Idle, Lease
from polecat.node.leases import STEP_BUDGET, STEP_LEASES, LeaseLoop
from polecat.node.run_state import RunCounters, Waker
from polecat.testing.fakes import FakeClock
from polecat.writes import Decided

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
    """``hosts`` hosts all ready at once; each lease costs ``cost`` seconds of the fake clock and is noted
    with the loop turn it was made in."""

    hosts: int
    clock: FakeClock
    turns: Turns
    cost: float = 0.0
    paused: bool = False
    queued: int = 0
    budget: Budget = field(default_factory=Budget)
    made_in: list[int] = field(default_factory=list)

    def lease(self, now: float, *, prefer_warm: bool = False) -> Decided[Lease | Idle]:
        if len(self.made_in) == self.hosts:
            return Decided(Idle(), [])
        self.clock.advance(self.cost)
        self.made_in.append(self.turns.turn)
        host = f"h{len(self.made_in)}.test"
        return Decided(Lease(host, f"http://{host}/", "page"), [])


class AppliedAsIs:
    def applied(self, decided: Decided[object]) -> object:
        return decided.value


class FreeCommits:
    def __init__(self) -> None:
        self.frontier_free = asyncio.Event()
        self.frontier_free.set()


class InstantRunner:
    async def run(self, lease: Lease) -> None:
        return None


async def lease_all(hosts: int, cost: float) -> list[int]:
    """Run a lease loop over ``hosts`` ready hosts; the loop turn of each lease."""
    cfg = config_from_mapping({"data_dir": "/nonexistent", "fetch": {"concurrency": hosts + 1}})
    clock, turns, stop = FakeClock(), Turns(), asyncio.Event()
    frontier = ReadyFrontier(hosts, clock, turns, cost)
    loop = LeaseLoop(cfg, frontier=frontier, db=AppliedAsIs(), commits=FreeCommits(),  # type: ignore[arg-type]
                     runner=InstantRunner(), waker=Waker(lambda: None),  # type: ignore[arg-type]
                     counters=RunCounters(), link=None, clock=clock, stop=asyncio.Event())
    counting = asyncio.create_task(turns.run(stop))
    await loop.run(serve=False)
    stop.set()
    await counting
    assert len(frontier.made_in) == hosts
    return frontier.made_in


async def test_a_step_leases_at_most_step_leases_hosts_however_many_are_ready() -> None:
    made_in = await lease_all(10 * STEP_LEASES + 5, cost=0.0)
    per_step = Counter(made_in)
    assert max(per_step.values()) == STEP_LEASES  # 650 hosts ready at once: never all in one step
    assert len(per_step) == 11  # ten full steps, and the five left in one more


async def test_a_step_ends_once_its_time_budget_is_spent_on_the_nodes_clock() -> None:
    cost = STEP_BUDGET / 2.5  # a slow lease: the third one spends the budget
    made_in = await lease_all(300, cost=cost)
    per_step = Counter(made_in)
    assert max(per_step.values()) == 3
    assert sum(per_step.values()) == 300 and len(per_step) == 100
