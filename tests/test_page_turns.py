"""Turns of page work (polecat/node/turns.py): the policy's decisions on a simulated loop, sans I/O
(first come first served, no starvation, at most the budget and one step a window, a bounded number
woken), and a real crawl of a local web whose page steps are counted per loop iteration. Counted, never
timed: the simulated steps advance a simulated clock, and the crawl runs with a budget of 0 s, so
every window grants one turn whatever the machine's speed."""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.fetch.http import Response
from polecat.frontier.records import Lease
from polecat.node import turns
from polecat.node.lease_runner import LeaseRunner
from polecat.node.pipeline import PagePipeline
from polecat.node.turns import MOST_WOKEN, PageTurns, TurnPolicy
from polecat.testing.breadth import BreadthWeb

BUDGET = 1.0


@dataclass(eq=False)
class Step:
    """A simulated step of page work: it costs ``cost`` of the simulated clock once granted."""

    number: int
    cost: float
    cancel_after: int | None
    """Iterations after its arrival it is cancelled in, if it still waits then."""
    arrived: int = 0
    ahead: int = 0
    """Steps that waited (woken or not) when it arrived."""
    ticks: int = 0
    """Ticks it saw while it waited."""


@dataclass
class Sim:
    """A loop as asyncio runs one (each iteration runs the handles ready when it began; what they
    schedule runs in the next), driving a :class:`TurnPolicy` as :class:`PageTurns` does."""

    policy: TurnPolicy[Step] = field(default_factory=lambda: TurnPolicy(BUDGET))
    now: float = 0.0
    iteration: int = 0
    windows: int = 0
    ready: deque[tuple[str, Step | None]] = field(default_factory=deque)
    granted: list[tuple[Step, int, int]] = field(default_factory=list)
    """(step, window, iteration) in the order granted."""
    waiting: list[Step] = field(default_factory=list)
    cancelled: list[Step] = field(default_factory=list)
    most_woken: int = 0

    def schedule(self) -> None:
        if self.policy.wants_tick():
            self.policy.tick_pending = True
            self.ready.append(("tick", None))

    def grant(self, step: Step) -> None:
        self.granted.append((step, self.windows, self.iteration))
        self.now += step.cost
        self.schedule()

    def run(self, step_costs: list[list[tuple[float, int | None]]], limit: int = 20_000) -> None:
        arriving = deque(step_costs)
        number = 0
        while arriving or self.ready or self.waiting:
            assert self.iteration < limit, "the waiters were never all served"
            this, self.ready = self.ready, deque()
            for cost, cancel_after in arriving.popleft() if arriving else []:  # the poll's responses
                this.append(("arrive", Step(number, cost, cancel_after)))
                number += 1
            for kind, step in this:
                if kind == "tick":
                    self.windows += 1
                    for s in self.waiting:
                        s.ticks += 1
                    woken = self.policy.tick()
                    self.ready.extend(("resume", s) for s in woken)
                    self.schedule()
                    self.most_woken = max(self.most_woken, self.policy.waiting - len(self.policy._queue))
                    continue
                assert step is not None
                if kind == "arrive":
                    step.arrived, step.ahead = self.iteration, self.policy.waiting
                    if self.policy.ask(self.now):
                        self.grant(step)
                    else:
                        self.policy.enqueue(step)
                        self.waiting.append(step)
                        self.schedule()
                elif step in self.waiting:  # resume; a cancelled step's future is never resolved
                    if self.policy.resumed(step, self.now):
                        self.waiting.remove(step)
                        self.grant(step)
                    else:
                        self.schedule()
            for step in list(self.waiting):  # cancellations land between iterations
                if step.cancel_after is not None and self.iteration - step.arrived >= step.cancel_after:
                    self.policy.cancelled(step)
                    self.waiting.remove(step)
                    self.cancelled.append(step)
                    self.schedule()
            self.iteration += 1


costs = st.lists(st.lists(st.tuples(st.floats(0.0, 0.6), st.none() | st.integers(0, 4)), max_size=40),
                 max_size=30)


@settings(max_examples=300, deadline=None)
@given(costs)
def test_turns_are_first_come_first_served_bounded_a_window_and_never_starve(
        step_costs: list[list[tuple[float, int | None]]]) -> None:
    sim = Sim()
    sim.run(step_costs)
    done = [step for step, _, _ in sim.granted]
    arrived = sum(len(batch) for batch in step_costs)
    assert len(done) + len(sim.cancelled) == arrived  # every step ran, or was cancelled waiting
    # rule 2: granted in the order they arrived
    assert [s.number for s in done] == sorted(s.number for s in done)
    # rule 1: a window's turns began before its budget was spent: its work is at most the budget and
    # the cost of its last step
    by_window: dict[int, list[Step]] = {}
    for step, window, _ in sim.granted:
        by_window.setdefault(window, []).append(step)
    for steps in by_window.values():
        assert sum(s.cost for s in steps[:-1]) < BUDGET
    # rule 3: one window an iteration, two as the queue runs dry
    windows_in = Counter(it for it, _ in {(it, w) for _, w, it in sim.granted})
    assert max(windows_in.values(), default=0) <= 2
    # rule 3: no starvation; each tick serves the front of the queue
    for step in done:
        assert step.ticks <= step.ahead + 1
    assert sim.most_woken <= MOST_WOKEN


def test_a_tick_wakes_what_the_last_full_window_granted_and_a_quarter_more() -> None:
    policy: TurnPolicy[int] = TurnPolicy(BUDGET)
    assert policy.ask(0.0)
    for n in range(1, 100):
        assert not policy.ask(BUDGET)  # the window is spent, then others wait: each waits
        policy.enqueue(n)
    woken_by_tick = []
    for _ in range(5):
        woken = policy.tick()
        woken_by_tick.append(woken)
        now = 0.0
        for w in woken:  # each step costs a quarter of the budget: four fit a window
            if policy.resumed(w, now):
                now += BUDGET / 4
    # A window of one that ended on its budget: two woken; windows that granted all they woke: more
    # each tick; four fit, so six woken (4 + 4 // 4 + 1), the two refused first at the next tick.
    assert woken_by_tick == [[1, 2], [3, 4, 5], [6, 7, 8, 9], [10, 11, 12, 13, 14, 15],
                             [14, 15, 16, 17, 18, 19]]
    assert policy.waiting == 99 - 17
    assert max(len(w) for w in woken_by_tick) <= MOST_WOKEN


async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_is_served() -> None:
    gate = PageTurns(lambda: 0.0, seconds=0.0)  # every window grants one turn
    await gate.take()
    order: list[int] = []

    async def step(n: int) -> None:
        await gate.take()
        order.append(n)

    tasks = [asyncio.create_task(step(n)) for n in range(4)]
    await asyncio.sleep(0)
    tasks[1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == [0, 2, 3]
    assert gate.policy.waiting == 0


@dataclass
class IterationCounter:
    """A ``call_soon`` chain: ``n`` goes up once per loop iteration while it runs."""

    n: int = 0
    running: bool = True

    def __call__(self) -> None:
        self.n += 1
        if self.running:
            asyncio.get_running_loop().call_soon(self)


def started(fetch: Callable[..., Awaitable[Any]], counter: IterationCounter,
            steps_in: list[int]) -> Callable[..., Awaitable[Any]]:
    """``fetch`` noting the loop iteration it starts in."""

    async def counted(*args: Any) -> Any:
        steps_in.append(counter.n)
        return await fetch(*args)

    return counted


@pytest.mark.asyncio
@pytest.mark.timeout(120)
@pytest.mark.parametrize("gated", [True, False])
async def test_a_crawl_runs_its_page_steps_a_bounded_number_an_iteration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gated: bool) -> None:
    # A budget of 0 s: each window grants one turn; a window of the queue running dry and the next
    # may share an iteration (rule 3). Without turns, every response of a poll ran in its iteration.
    monkeypatch.setattr(turns, "TURN_SECONDS", 0.0 if gated else float("inf"))
    counter = IterationCounter()
    steps_in: list[int] = []
    handle = PagePipeline.handle

    def counted(self: PagePipeline, lease: Lease, resp: Response, *args: Any) -> Any:
        steps_in.append(counter.n)
        return handle(self, lease, resp, *args)

    monkeypatch.setattr(PagePipeline, "handle", counted)
    for name in ("_page_fetch", "_robots_fetch"):  # a lease's start: its request made (lease_runner rule 10)
        monkeypatch.setattr(LeaseRunner, name, started(getattr(LeaseRunner, name), counter, steps_in))
    hosts = 60
    with BreadthWeb(hosts) as web:
        cfg = config_from_mapping({
            "data_dir": str(tmp_path / "data"),
            "scope": {"seeds": web.seeds()},
            "politeness": {"rate": 1000.0},
            "fetch": {"concurrency": hosts},
            "refresh": {"guess_sitemap": False},
            "frontier": {"commit_ms": 2.0},
            "dns": {"nameservers": [web.dns.address], "allow_private": True}})
        asyncio.get_running_loop().call_soon(counter)
        try:
            async with Crawler(cfg) as crawler:
                # Every periodic commit an LMDB commit (frontier/db.py rule 6), the frontier busy during
                # it: steps that got their turn must not wait for its end and then run all at once.
                crawler._db.log_bytes = 0
                await crawler.run()
        finally:
            counter.running = False
        assert web.stats().complete_hosts == hosts
    per_iteration = Counter(steps_in)
    assert len(steps_in) >= hosts * (2 + 2 * web.leaves)  # each page's start and response, robots' start
    if gated:
        assert max(per_iteration.values()) <= 2
    else:  # the test's own check that the crawl makes steps pile up in one iteration
        assert max(per_iteration.values()) > 2
