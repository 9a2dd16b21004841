"""The node's lease loop: ask the frontier for the next request, run each as a task, sleep until
something can change the answer, and say why the run ended.

Rules:

1. The loop leases only while the frontier is free (no commit on its writer thread), a concurrency slot
   is free, the crawl is not paused and, in a cluster, the hand-off backlog is under its bound; it never
   spins: otherwise it sleeps (polecat/node/run_state.py ``Waker``).
2. A run ends when it is stopped, when ``scope.max_pages`` page leases were made, or when the frontier
   is idle (a crawl with nothing left it may fetch now or later); the reason is
   :func:`polecat.node.verdict.idle_end`'s. A node serving an API (``serve``) or a member of a
   ``--workers`` crawl never ends on idle: it waits for new URLs until stopped, and a member whose page
   budget is spent keeps receiving hand-offs. Nor does a crawl whose seeds file is still being read
   (``feeding``, polecat/node/seed_feed.py rule 4).
3. With refresh on, the URLs due are queued again once per run, or every ``refresh.scan_interval`` for a
   serving node (its next scan bounds every sleep). A scan runs in steps (polecat/frontier/
   refresh_queue.py rule 1), one a turn of this loop, leases in between; while one is under way the run
   does not end on idle, and its scan is due again only from its last step on.
4. At the end, requests in flight may finish; once stopped, those still running ``fetch.stop_grace``
   seconds later are cancelled and their URLs stay queued (nothing about them is recorded).
5. Each lease tells the frontier whether the fetcher's connections are near their descriptor cap
   (``short``, fetch/pool.py rule 9): then it prefers hosts already in rotation (frontier/leasing.py
   rule 6); and whether they are full (``full``, fetch/pool.py rule 15, counting the leases in flight
   whose URL is https, those that may open a TLS connection: a plain-HTTP lease opens none, and counting
   it held the https hosts of a mixed crawl back under the cap): then it leases no host that is not in
   rotation and would open a TLS connection (frontier/leasing.py rule 11; a plain-HTTP host it does).
6. One step of the loop leases at most :data:`STEP_LEASES` hosts, or for at most :data:`STEP_BUDGET`
   seconds (on the node's clock), then gives the event loop a turn: the requests just leased start, and
   their responses, timers and the commit are served, before it leases more. A breadth crawl with
   thousands of hosts ready at once used to lease them all in one step (150 ms median, 1.1 s at worst,
   benchmarks/README.md "Issue 39: loop stalls").
7. Before an LMDB commit, during which the frontier is not called (polecat/node/commits.py rule 15), the
   loop takes leases ahead (:meth:`LeaseLoop.lease_ahead`, polecat/frontier/leasing.py rule 12): as many as
   it leased in the commit's expected hold at its rate (over the last :data:`RATE_WINDOW` at least; at most
   :data:`AHEAD_SHARE` times ``fetch.concurrency``), under rules 1, 2 and 5 as any lease. They are held,
   not sent, until their ``not_before`` (the host's politeness), then started first, each as a slot is
   free, whether the frontier is held or not: their requests go on during the LMDB commit. While the
   frontier is held, the leases parked for it with their responses in hand (polecat/node/lease_runner.py
   rule 11) do not count against ``fetch.concurrency`` as long as those responses hold at most
   :data:`PARKED_BYTES`: their connections are back in the pool, and counted they held every slot until
   the commit ended (at ``fetch.concurrency`` leases taken ahead, and parked ones counted past it, 256
   more requests a commit went out and no more: benchmarks/README.md "Issue 39: leasing during an LMDB
   commit"). Once the frontier is free they go on, and count again. Leases still held when the run ends
   are withdrawn: their URLs stay queued, and they are no fetches.
8. The queue heads of the hosts due next are read ahead of the leases on a thread of their own from the
   start of the run (``heads``: polecat/frontier/read_ahead.py, polecat/frontier/head_reader.py), a step
   of it before each lease call (the reader's counts in, the next hosts out, never a wait for a read),
   until the frontier's read-ahead stops (its heads found in memory, read_ahead.py rule 4) or the run
   ends: the reader is stopped then, before the node closes the frontier, its thread joined and its read
   transaction aborted. Right after an open from a cold page cache each lease waited for its host's queue
   head to come off the disk (benchmarks/README.md "Issue 39: queue heads read ahead after a cold open").
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from polecat.clock import Clock
from polecat.config import Config
from polecat.frontier import refresh_queue
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.read_ahead import HeadsAhead
from polecat.frontier.records import Idle, Lease, Wait
from polecat.frontier.refresh_queue import DueScan
from polecat.node import verdict
from polecat.node.commits import Commits
from polecat.node.lease_runner import LeaseRunner
from polecat.node.run_state import RunCounters, Waker
from polecat.runloop import StepBudget, alarm_clock

if TYPE_CHECKING:
    from polecat.cluster.link import ClusterLink

log = logging.getLogger("polecat")

BACKLOG_RECHECK = 0.1
"""Seconds between looks at the hand-off backlog while it is over its bound."""
STEP_LEASES = 64
"""Leases made in one step of the event loop at most (rule 6): each request's first step (DNS, connect)
runs in the loop's next turn, so this also bounds how many start in one turn."""
AHEAD_SHARE = 4
"""Leases taken ahead of an LMDB commit at most, in ``fetch.concurrency`` (rule 7): ~1,000 by default,
about what a breadth crawl here leases in one 1-second LMDB commit."""
RATE_WINDOW = 1.0
"""Seconds of leasing, at least, over which rule 7 measures the lease rate: LMDB commits may come close
together (a small log, a checkpoint round's), and a window of a few ms may hold no lease at all."""
PARKED_BYTES = 64 << 20
"""Bytes of the parked leases' responses up to which they do not count against ``fetch.concurrency``
while the frontier is held (rule 7): what the leases taken ahead may add to memory, whatever their pages'
sizes (``fetch.max_body_bytes`` each at most)."""
STEP_BUDGET = 0.01
"""Seconds of leasing in one step of the event loop at most (rule 6): the issue's 50 ms bound on a step,
less what the requests it starts cost in the next turn."""


class LeaseLoop:
    """Runs the leases of one crawl run; see the module docstring."""

    def __init__(self, cfg: Config, *, frontier: Frontier, db: FrontierDB, commits: Commits,
                 runner: LeaseRunner, waker: Waker, counters: RunCounters, link: ClusterLink | None,
                 clock: Clock, stop: asyncio.Event, feeding: Callable[[], bool] = lambda: False,
                 short: Callable[[], bool] = lambda: False,
                 full: Callable[[int], bool] = lambda leases: False, heads: HeadsAhead | None = None) -> None:
        self._cfg = cfg
        self._heads = heads
        """The queue heads read ahead of the leases (rule 8); None: not read ahead."""
        self._feeding = feeding
        self._short = short
        self._full = full
        """Whether the TLS connections, with those the given https leases in flight may open, are full
        (rule 5)."""
        self._frontier = frontier
        self._db = db
        self._commits = commits
        self._runner = runner
        self._waker = waker
        self._counters = counters
        self._link = link
        self._clock = clock
        self._stop = stop
        self.tasks: set[asyncio.Task[None]] = set()
        """The leases in flight."""
        self._tls_tasks: set[asyncio.Task[None]] = set()
        """Those of them whose URL is https: those that may open a TLS connection (rule 5)."""
        self.idle = False
        """The frontier had nothing to lease at the last look (or a member's budget is spent)."""
        self._next_scan = 0.0
        self._scan: DueScan | None = None
        """The refresh scan under way (rule 3)."""
        self._held: list[tuple[float, int, Lease]] = []
        """Leases taken ahead, not started yet, as a heap by ``not_before`` (rule 7)."""
        self._held_seq = itertools.count()
        self._leased = 0
        """Leases made since :attr:`_rate_from` (rule 7's rate)."""
        self._rate_from = 0.0
        self._rate = 0.0
        """Leases a second over the last window of :data:`RATE_WINDOW` or more (rule 7)."""

    async def run(self, *, serve: bool) -> None:
        """Lease until the run ends (rule 2); sets ``counters.ended`` unless stopped."""
        alarms = alarm_clock(asyncio.get_running_loop(), self._clock)
        limit = self._cfg.scope.max_pages
        counters, frontier, link, waker = self._counters, self._frontier, self._link, self._waker
        counters.ended = ""
        step = StepBudget(self._clock, STEP_LEASES, STEP_BUDGET)
        held = self._held
        self._leased, self._rate_from, self._rate = 0, self._clock.wall(), 0.0
        self._commits.lease_ahead = self.lease_ahead  # rule 7
        heads = self._heads
        try:
            if heads is not None:
                heads.start()  # rule 8
            while not self._stop.is_set():
                if held and not frontier.paused and held[0][0] <= self._clock.wall() and self._slot_free():
                    self._start(heapq.heappop(held)[2], self._clock.wall())  # rule 7: first, held or not
                    if step.spent():
                        await asyncio.sleep(0)
                        step.begin()
                    continue
                if not self._commits.frontier_free.is_set():
                    if held:  # rule 7: woken by a lease parked, the frontier free again, or the time
                        await waker.sleep(alarms, self._held_due())
                    else:
                        await self._commits.frontier_free.wait()
                    step.begin()
                    continue
                if limit and counters.fetches >= limit:
                    if held:  # rule 7: counted already, they go first
                        await waker.sleep(alarms, self._held_due())
                        step.begin()
                        continue
                    counters.ended = verdict.MAX_PAGES
                    if link is None:
                        break
                    self.idle = True  # rule 2: a member's budget is spent, it keeps receiving
                    await waker.sleep(alarms, None)
                    step.begin()
                    continue
                if not self._slot_free() or frontier.paused:
                    await waker.sleep(alarms, None)
                    step.begin()
                    continue
                now = self._clock.wall()
                if self._cfg.refresh.enabled and now >= self._next_scan:
                    self._scan_step(now, serve)
                if link is not None and link.backlogged():
                    await waker.sleep(alarms, now + BACKLOG_RECHECK)  # owners are slow to accept: wait
                    step.begin()
                    continue
                if heads is not None:
                    heads.step(now)  # rule 8
                decision = self._db.applied(frontier.lease(now, prefer_warm=self._short(),  # rule 5
                                                           full=self._full(len(self._tls_tasks))))
                self.idle = isinstance(decision, Idle) and not held
                if isinstance(decision, Lease):
                    self._took(decision)
                    self._start(decision, now)
                    if step.spent():
                        await asyncio.sleep(0)  # rule 6
                        step.begin()
                elif isinstance(decision, Wait):
                    until = decision.until
                    if held:  # rule 7 (a slot is free here: the first is not due yet)
                        until = held[0][0] if until is None else min(until, held[0][0])
                    await waker.sleep(alarms, _earliest(until, self._next_scan))
                    step.begin()
                elif isinstance(decision, Idle):
                    if held or serve or link is not None or self._feeding() or self._scan is not None:
                        await waker.sleep(alarms, _earliest(self._held_due(), self._next_scan))
                        step.begin()
                        continue
                    counters.ended = verdict.idle_end(budget_full=frontier.budget.full,
                                                      queued=frontier.queued)
                    break
            self._commits.lease_ahead = None  # rule 7: none taken once the loop starts no more
            self._withdraw_held()
            await self._drain()
        finally:
            if heads is not None:
                heads.stop()  # rule 8: before the node closes the frontier
            self._commits.lease_ahead = None
            self._withdraw_held()
            alarms.close()

    def _held_due(self) -> float | None:
        """When the first held lease is due (rule 7), None if none is held or it is due already: then a
        slot is what it waits for, and a lease that ends or parks wakes the loop."""
        held = self._held
        return held[0][0] if held and held[0][0] > self._clock.wall() else None

    def _slot_free(self) -> bool:
        """Whether a lease may start under ``fetch.concurrency`` (rule 7: while the frontier is held, the
        parked leases do not count up to :data:`PARKED_BYTES`; once it is free they go on)."""
        runner = self._runner
        parked = runner.parked if (not self._commits.frontier_free.is_set()
                                   and runner.parked_bytes <= PARKED_BYTES) else 0
        return len(self.tasks) - parked < self._cfg.fetch.concurrency

    def _took(self, lease: Lease) -> None:
        """The frontier made ``lease``: a fetch, if a page (rule 2), and one more for rule 7's rate."""
        if lease.kind == "page":
            self._counters.fetches += 1
        self._leased += 1

    def _start(self, lease: Lease, now: float) -> None:
        """Run ``lease`` as a task, in flight from now on."""
        if now < lease.not_before:
            self._counters.violations += 1  # self-check of politeness rule 2; must stay 0
        task = asyncio.create_task(self._runner.run(lease))
        self.tasks.add(task)
        if lease.tls:
            self._tls_tasks.add(task)
        task.add_done_callback(self._lease_done)

    async def lease_ahead(self, seconds: float) -> None:
        """Rule 7: take leases for the ``seconds`` of an LMDB commit about to start, held until their
        time; returns once taken (a step of the event loop at a time, rule 6)."""
        frontier, counters, link = self._frontier, self._counters, self._link
        limit = self._cfg.scope.max_pages
        now = self._clock.wall()
        elapsed = now - self._rate_from
        rate = self._leased / elapsed if elapsed > 0 else 0.0
        if elapsed >= RATE_WINDOW:  # a window long enough to say the rate; a shorter one says the last's
            self._rate, self._leased, self._rate_from = rate, 0, now
        else:
            rate = max(rate, self._rate)
        want = min(AHEAD_SHARE * self._cfg.fetch.concurrency, math.ceil(rate * seconds)) - len(self._held)
        # polecat/frontier/leasing.py rule 9: a call that looked at its most answers Wait(now)
        calls = 2 * want
        step = StepBudget(self._clock, STEP_LEASES, STEP_BUDGET)
        while want > 0 and calls > 0:
            if (self._stop.is_set() or frontier.paused or not self._commits.frontier_free.is_set()
                    or (limit and counters.fetches >= limit) or (link is not None and link.backlogged())):
                break
            calls -= 1
            now = self._clock.wall()
            if self._heads is not None:
                self._heads.step(now)  # rule 8
            decision = self._db.applied(frontier.lease(now, prefer_warm=self._short(),  # rule 5
                                                       full=self._full(len(self._tls_tasks)), ahead=seconds))
            if isinstance(decision, Lease):
                self._took(decision)
                heapq.heappush(self._held, (decision.not_before, next(self._held_seq), decision))
                want -= 1
            elif not (isinstance(decision, Wait) and decision.until == now):
                break
            if step.spent():
                await asyncio.sleep(0)
                step.begin()
        if self._held:
            self._waker.set()  # those due now start at once

    def _withdraw_held(self) -> None:
        """Rule 7: the leases still held when the run ends are given back."""
        held, self._held = self._held, []
        for _, _, lease in held:
            self._frontier.withdraw(lease)
            if lease.kind == "page":
                self._counters.fetches -= 1

    def _lease_done(self, task: asyncio.Task[None]) -> None:
        """A lease's task ended: its concurrency slot is free only now. The wake-up it set on its way out
        can run the loop first, while it still counts as in flight; without this second one, leases that
        all end in one loop iteration left a saturated loop asleep for good with work queued."""
        self.tasks.discard(task)
        self._tls_tasks.discard(task)
        self._waker.after_lease()

    def _scan_step(self, now: float, serve: bool) -> None:
        """Rule 3: a step of the refresh scan under way, or of a new one."""
        refresh = self._cfg.refresh
        if self._scan is None:
            self._scan = DueScan(now, refresh.scan_interval if serve else None)
        scan, before = self._scan, self._scan.queued
        fresh = self._db.applied(self._frontier.scan_step(  # read at the call: tests make steps small
            scan, now, rows=refresh_queue.SCAN_ROWS, hosts=refresh_queue.SCAN_HOSTS))
        self._counters.refresh_queued += scan.queued - before
        if fresh is None:
            self._next_scan = now  # more steps: due at once, so no sleep outlasts the scan
            return
        self._scan = None
        self._counters.freshness = (fresh.tracked, fresh.due, fresh.important, fresh.within)
        self._next_scan = now + refresh.scan_interval if serve else math.inf
        if scan.queued:
            log.info("refresh: %d URLs due queued again", scan.queued)

    async def _drain(self) -> None:
        """Rule 4."""
        stopped = asyncio.ensure_future(self._stop.wait())
        deadline: float | None = None
        grace = self._cfg.fetch.stop_grace
        try:
            while self.tasks:
                if deadline is None and self._stop.is_set():
                    deadline = self._clock.monotonic() + grace
                timeout = None if deadline is None else max(0.0, deadline - self._clock.monotonic())
                waiting = [*self.tasks] if stopped.done() else [*self.tasks, stopped]
                await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if deadline is not None and self._clock.monotonic() >= deadline and self.tasks:
                    log.warning("stop: cancelling %d requests still in flight after %.1fs; their URLs stay "
                                "queued", len(self.tasks), grace)
                    for task in list(self.tasks):
                        task.cancel()
                    await asyncio.gather(*self.tasks, return_exceptions=True)
        finally:
            stopped.cancel()

    def cancel_others(self) -> None:
        """Cancel every lease in flight but the caller's own (a fault stops the node)."""
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()

    async def cancel_all(self) -> None:
        """Cancel every lease in flight and wait for them (closing the node)."""
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)


def _earliest(until: float | None, scan: float) -> float | None:
    """The earlier of a wake-up time and the next refresh scan (``inf``: no scan planned)."""
    if scan == math.inf or scan == 0.0:
        return until
    return scan if until is None else min(until, scan)
