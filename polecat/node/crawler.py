"""One crawler node: wires frontier, fetcher, parser, dedup and store to the event loop.

The node owns no policy. It asks the frontier for leases, runs each as a task (fetch, parse, dedup,
store), reports the outcome back, and checkpoints: store flush first, then the frontier commit, so
the frontier never records as done a page the store could lose. All state changes happen on the
event-loop thread between awaits, which is what makes the frontier's single write transaction safe.

A page's near-duplicate index entry goes into the frontier's open transaction when the page is
stored, so a crash between a store flush and the frontier commit after it keeps bodies whose entries
were lost. Each frontier commit therefore records the store's record count (:data:`STORE_MARK`): every
record before it had its entry committed. On opening, the node indexes again the records past the mark
(pipeline.py, ``reindex``), so a near-copy fetched before its original's replay still finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import math
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any

import lmdb

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.config import Config
from polecat.dedup.canon import Canonicalizer
from polecat.errors import BlockedAddressError, FetchError, FetchTimeout, PolecatError, StorageFault
from polecat.faults import storage_fault
from polecat.fetch.http import Fetcher, Response, request_headers
from polecat.fetch.seams import PageFetcher
from polecat.frontier.frontier import Frontier
from polecat.frontier.intake import ACCEPTED, SEEN
from polecat.frontier.opener import open_local
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Idle, Lease, Outcome, Refused, RobotsOutcome, Wait, origin_of
from polecat.frontier.robots import Ready, RobotsPolicy, is_answer
from polecat.heap import fix_mmap_threshold
from polecat.hosts import host_key, hostname
from polecat.logs import fields
from polecat.node import verdict
from polecat.node.pipeline import Page, PagePipeline, attempt_of
from polecat.node.stats import CrawlStats, collect_stats
from polecat.parse.robots import product_token
from polecat.runloop import AlarmClock, alarm_clock
from polecat.store.archive import archive_info
from polecat.store.base import FetchRecord, PageStore, content_hash
from polecat.store.segstore import open_store
from polecat.writes import Put

if TYPE_CHECKING:
    from polecat.cluster.batch import Batch, HandoffUrl
    from polecat.cluster.link import ClusterLink
    from polecat.frontier.bundle import SliceBundle
    from polecat.frontier.records import AdoptReport
    from polecat.frontier.routing import Admission

log = logging.getLogger("polecat")

BLOOM_SAVE_INTERVAL = 60.0
STORE_MARK = b"store_mark"
"""Frontier meta key: the store's record count at the frontier's last node checkpoint (module docstring)."""
BACKLOG_RECHECK = 0.1
"""Seconds between looks at the hand-off backlog while it is over its bound."""


PageCallback = Callable[[Page], Awaitable[None] | None]
LeaseObserver = Callable[[Lease, Completion], None]
"""Called with every lease's outcome (the service's metrics and status page)."""


class Crawler:
    """A crawler node. Use as ``async with Crawler(cfg) as c: await c.run()``.

    ``on_page`` is called for every successfully fetched page (2xx); or iterate :meth:`pages` while
    :meth:`run` executes in another task. Seeds come from ``cfg.scope.seeds`` and :meth:`add_seed`.
    ``link`` makes the node one member of a multi-process crawl (``polecat crawl --workers N``, see
    :mod:`polecat.cluster.link`): it fetches only for its own slices and runs until :meth:`stop`.
    """

    def __init__(self, config: Config, *, on_page: PageCallback | None = None,
                 on_lease: LeaseObserver | None = None, link: ClusterLink | None = None,
                 clock: Clock = SYSTEM_CLOCK, fetcher: PageFetcher | None = None,
                 store: PageStore | None = None) -> None:
        if config.workers != 1 and link is None:
            raise PolecatError("workers: a Crawler is one process; run a crawl over several with "
                               "polecat.processes.supervisor.crawl_with_workers(cfg)")
        self.config = config
        self._clock = clock
        self._given_fetcher = fetcher
        self._given_store = store
        """Seams for tests (polecat/testing/fakes.py); None: the real fetcher and segment store."""
        fix_mmap_threshold()  # pages at the body cap must not grow the heap for good
        self._on_page = on_page
        self._on_lease = on_lease
        self._link = link
        self._owned: frozenset[int] | None = None
        self._durable: list[asyncio.Future[None]] = []
        self._flushing = False
        """A periodic checkpoint's store flush is running in a worker thread."""
        self._frontier_free = asyncio.Event()
        self._frontier_free.set()
        """Clear while a periodic checkpoint's LMDB commit runs on the frontier's writer thread: frontier
        calls wait for it (polecat/frontier/db.py rule 2)."""
        self._deferred: list[tuple[Lease, Completion]] = []
        """Page completions that wait for the commit after the flush in progress."""
        self._checkpoint_due = asyncio.Event()
        self._checkpoints_end = True
        """No periodic checkpointer runs (before and after :meth:`run`)."""
        self._quiet = False
        self._receiving = True
        self.bytes_fetched = 0
        """Page body bytes received in this run, as sent on the wire."""
        self.last_checkpoint = (0.0, 0.0)
        """Wall-clock time and duration (seconds) of the last checkpoint."""
        self._page_queues: list[asyncio.Queue[Page | None]] = []
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._sleeping = False
        """The loop waits in :meth:`_sleep` (until ``_sleep_until``; None: until woken)."""
        self._sleep_until: float | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._errors: Counter[str] = Counter()
        self._fetches = 0
        self._answered = 0
        self._ended = ""
        self._seeds_refused: list[tuple[str, str]] = []
        self._violations = 0
        self._started_at = 0.0
        self._last_bloom_save = 0.0
        self._opened = False
        self._fatal: BaseException | None = None
        self._fatal_raised = False
        self._next_scan = 0.0
        self._refresh_queued = 0
        self._freshness: tuple[int, int, int, int] | None = None

    if not TYPE_CHECKING:  # at run time only: mypy keeps checking every attribute name

        def __getattr__(self, name: str) -> Any:
            # Called only for attributes that do not exist: the parts __aenter__ opens.
            if name in _OPENED_PARTS:
                raise PolecatError("the crawler is not open: use `async with Crawler(config) as crawler:` "
                                   "(or `await crawler.__aenter__()`) before calling its methods")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Crawler:
        cfg = self.config
        data = cfg.data_dir
        local = open_local(cfg, self._clock.wall())
        self._db, self._seen, self._robots = local.db, local.seen, local.robots
        self._bloom_path = local.bloom_path
        self._bloom_saver = ThreadPoolExecutor(1, thread_name_prefix="polecat-bloom-save")
        """Writes the seen-set's Bloom snapshots, one at a time and in order (off the loop)."""
        self._canon = Canonicalizer(cfg.dedup.tracking_params, cfg.dedup.keep_query_order)
        archive = archive_info(user_agent=cfg.fetch.user_agent, request_headers=request_headers(cfg.fetch),
                               requests=cfg.store.request_records)
        try:
            self._store: PageStore = self._given_store or open_store(data / "store", cfg.store,
                                                                     archive=archive)
        except BaseException:  # e.g. a torn segment that needs `store repair`: hold no frontier open
            self._db.close()
            self._bloom_saver.shutdown()
            raise
        self._bodies_at_start = self._store.stats().bodies
        self._frontier = local.frontier
        self._pipeline = PagePipeline(cfg, frontier=self._frontier, db=self._db, store=self._store,
                                      canon=self._canon, agent_token=product_token(cfg.fetch.user_agent),
                                      errors=self._errors, emit=self._emit, wake=self._wake.set,
                                      stage=link.stage if (link := self._link) is not None else None,
                                      clock=self._clock)
        self._reindex_past_mark()
        self._fetcher: PageFetcher = self._given_fetcher or Fetcher(cfg.fetch, cfg.dns)
        await self._fetcher.__aenter__()
        self._opened = True
        now = self._clock.wall()
        if self._link is not None:  # lease only this member's slices, whatever else the frontier holds
            self._link.bind(self._frontier)
            self._frontier.set_owned(self._link.ring.slices_of(self._link.self_id), now)
        try:
            for seed in cfg.scope.seeds:
                self.add_seed(seed, now=now)
        except BaseException as exc:  # close what was opened: no unclosed session, no held lock
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        if not self._opened:
            return
        self._opened = False
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._fetcher.__aexit__(et, e, tb)
        try:
            if self._fatal is None and self._try_checkpoint(save_bloom=True):
                self._store.close()
                self._db.close()
            else:  # keep only what was committed before the failure; the next start replays the rest
                with contextlib.suppress(Exception):
                    self._store.close()
                self._db.close()
                if et is None and not self._fatal_raised:  # the final checkpoint failed
                    raise PolecatError(f"crawl stopped: {self._fatal}") from self._fatal
        finally:
            self._bloom_saver.shutdown()

    def add_seed(self, url: str, *, importance: float = 1.0, now: float | None = None,
                 forward: bool = False) -> str:
        """Queue a seed URL (its host joins the scope). Returns the frontier's decision. A seed another
        member owns is only added to the scope here (``"other_owner"``: the configuration's seeds, which
        every member reads), or with ``forward`` staged for its owner (``"forwarded"``: an operator's
        seed; durable in the outbox at the next checkpoint)."""
        canonical = self._canon.canonicalize(url.strip())
        if canonical is None:
            raise PolecatError(f"seed {url!r} is not an http(s) URL")
        if not self._frontier.owns(canonical):  # its owner queues it; the host still joins the scope here
            self._db.apply(self._frontier.add_scope_host(host_key(canonical)))
            if forward and self._link is not None:
                from polecat.cluster.batch import HandoffUrl  # cluster code loads only in a cluster

                self._link.forward([HandoffUrl(canonical, 0, importance, seed=True)])
                return "forwarded"
            return "other_owner"
        decision = self._db.applied(
            self._frontier.add_seed(canonical, self._clock.wall() if now is None else now, importance))
        if decision not in (ACCEPTED, SEEN):
            self._seeds_refused.append((url, decision))
        self._wake.set()
        return decision

    def block(self, pattern: str) -> int:
        """Block hosts matching ``pattern`` (``example.com`` or ``*.example.com``) from now on, persisted:
        their queued URLs are recorded done (reason ``blocked``). Returns how many were dropped."""
        return self._db.applied(self._frontier.block(pattern))

    def throttle(self, pattern: str, rate: float) -> None:
        """Set the request rate (req/s) of hosts matching ``pattern``, persisted across restarts."""
        if not rate > 0:
            raise PolecatError(f"throttle rate for {pattern!r} must be > 0, got {rate}")
        self._db.apply(self._frontier.set_throttle(pattern, rate))

    def unblock(self, pattern: str) -> bool:
        """Lift the block of exactly ``pattern`` (persisted); False if it was not blocked. URLs dropped
        while it held stay done (``skipped:blocked``); URLs found from now on are accepted."""
        return self._db.applied(self._frontier.unblock(pattern))

    def unthrottle(self, pattern: str) -> bool:
        """Drop the rate override of exactly ``pattern`` (persisted); False if there was none. Its hosts
        go back to the default rate from their next request."""
        return self._db.applied(self._frontier.unthrottle(pattern))

    def pause(self, paused: bool = True) -> None:
        """Stop (or, with False, resume) leasing new requests (persisted at the next checkpoint);
        in-flight requests finish."""
        self._db.apply(self._frontier.set_paused(paused))
        self._wake.set()

    @property
    def paused(self) -> bool:
        return self._frontier.paused

    @property
    def store(self) -> PageStore:
        return self._store

    @property
    def frontier(self) -> Frontier:
        """The frontier, for the operator API's reads (use on the event-loop thread only)."""
        return self._frontier

    @property
    def robots(self) -> RobotsPolicy:
        return self._robots

    @property
    def fetcher(self) -> PageFetcher:
        return self._fetcher

    async def checkpoint(self) -> None:
        """Return once a frontier commit holds every change made so far (the operator API answers after
        it). While :meth:`run` runs, its checkpointer makes that commit, so two store flushes never
        overlap; otherwise it is made here."""
        if self._checkpoints_end:
            self._checkpoint()
            return
        fut = asyncio.get_running_loop().create_future()
        self._durable.append(fut)
        self._checkpoint_due.set()
        await fut

    def set_owned(self, slices: frozenset[int]) -> None:
        """Lease only hosts of ``slices`` from now on (the cluster's ownership and fencing drive it)."""
        if slices != self._owned:
            self._owned = slices
            self._frontier.set_owned(slices, self._clock.wall())
            self._wake.set()

    def throttle_now(self, pattern: str, rate: float) -> None:
        """:meth:`throttle` for a running crawl: matching hosts wait one new interval before their next
        request (:meth:`Frontier.throttle_now`)."""
        self._db.apply(self._frontier.throttle_now(pattern, rate, self._clock.wall()))

    def adopt(self, bundle: SliceBundle, now: float | None = None) -> AdoptReport:
        """Take over the slices of ``bundle`` (durable at the next checkpoint)."""
        report = self._db.applied(self._frontier.adopt(bundle, self._clock.wall() if now is None else now))
        self._wake.set()
        return report

    def release_slices(self, slices: Iterable[int]) -> None:
        """Drop ``slices`` from this node's frontier once their new owner holds them."""
        self._db.apply(self._frontier.release_slices(slices))

    def admit(self, urls: Iterable[str], depth: int, importance: float, *, hops: int = 0) -> Admission:
        """Route discovered URLs (:meth:`Frontier.admit`): the owned ones queued, the others answered."""
        now = self._clock.wall()
        admission = self._db.applied(self._frontier.admit(urls, depth, importance, now, hops=hops))
        self._wake.set()
        return admission

    def robots_file(self, origin: str) -> tuple[int, float, bytes] | None:
        """The stored robots.txt answer of ``origin``: status, fetch time, body; None if none."""
        return self._frontier.robots_answer(origin)

    def stop(self) -> None:
        """Ask :meth:`run` to stop leasing and return once in-flight requests end, or after
        ``fetch.stop_grace`` seconds: requests still in flight then are cancelled and their URLs stay
        queued for the next start."""
        self._stop.set()
        self._wake.set()

    async def pages(self) -> AsyncIterator[Page]:
        """Iterate pages as they are fetched, while :meth:`run` runs in another task."""
        q: asyncio.Queue[Page | None] = asyncio.Queue(maxsize=1024)
        self._page_queues.append(q)
        try:
            while (page := await q.get()) is not None:
                yield page
        finally:
            self._page_queues.remove(q)

    # --- the loop --------------------------------------------------------------------------------

    async def run(self, *, serve: bool = False) -> CrawlStats:
        """Crawl until the frontier is exhausted, ``scope.max_pages`` fetches were made, or :meth:`stop`.
        With ``serve`` an empty frontier is not the end: the node waits for new URLs until :meth:`stop`."""
        alarms = alarm_clock(asyncio.get_running_loop(), self._clock)
        self._started_at = self._clock.wall()
        self._last_bloom_save = self._started_at
        self._checkpoints_end = False
        checkpointer = asyncio.create_task(self._checkpoint_loop())
        limit = self.config.scope.max_pages
        concurrency = self.config.fetch.concurrency
        self._ended = ""
        link = self._link
        try:
            while not self._stop.is_set():
                if not self._frontier_free.is_set():  # a commit is on the frontier's writer thread
                    await self._frontier_free.wait()
                    continue
                if limit and self._fetches >= limit:
                    self._ended = verdict.MAX_PAGES
                    if link is None:
                        break
                    self._quiet = True  # a member's budget is spent: it keeps receiving until stopped
                    await self._sleep(alarms, None)
                    continue
                if len(self._tasks) >= concurrency or self._frontier.paused:
                    await self._sleep(alarms, None)
                    continue
                now = self._clock.wall()
                if self.config.refresh.enabled and now >= self._next_scan:
                    self._scan_due(now, serve)
                if link is not None and link.backlogged():
                    await self._sleep(alarms, now + BACKLOG_RECHECK)  # owners are slow to accept: wait
                    continue
                decision = self._db.applied(self._frontier.lease(now))
                self._quiet = isinstance(decision, Idle)
                if isinstance(decision, Lease):
                    if decision.kind == "page":
                        self._fetches += 1
                    if now < decision.not_before:
                        self._violations += 1  # self-check of politeness rule 2; must stay 0
                    task = asyncio.create_task(self._run_lease(decision))
                    self._tasks.add(task)
                    task.add_done_callback(self._lease_done)
                elif isinstance(decision, Wait):
                    await self._sleep(alarms, _earliest(decision.until, self._next_scan))
                elif isinstance(decision, Idle):
                    if serve or link is not None:  # a node, or a member of a --workers crawl, waits for URLs
                        await self._sleep(alarms, _earliest(None, self._next_scan))
                        continue
                    if self._frontier.budget.full:
                        self._ended = verdict.MAX_PAGES  # what is left waits for a later run
                    else:
                        self._ended = verdict.GAVE_UP if self._frontier.queued else verdict.QUEUE_EMPTY
                    break
            await self._drain()
            self._ended = self._ended or verdict.STOPPED
            if self._fatal is None:
                f = self._frontier.freshness(self._clock.wall())
                self._freshness = (f.tracked, f.due, f.important, f.within)
        finally:
            alarms.close()
            self._receiving = False
            self._checkpoints_end = True
            self._checkpoint_due.set()
            try:
                await checkpointer
                if self._fatal is None:  # the Bloom snapshot waits for the one __aexit__ commits last
                    self._try_checkpoint(save_bloom=False)
            finally:  # after a fault or a cancel ("abort") too: nobody may wait for a commit never made
                self._abandon_waiters()
                for q in self._page_queues:
                    with contextlib.suppress(asyncio.QueueFull):
                        q.put_nowait(None)
        if self._fatal is not None:
            self._ended = verdict.FAILED
            # What was committed is consistent; the rest replays on the next start.
            self._fatal_raised = True
            raise PolecatError(f"crawl stopped: {self._fatal}") from self._fatal
        return self.stats()

    def _lease_done(self, task: asyncio.Task[None]) -> None:
        """A lease's task ended: its concurrency slot is free only now. The wake-up it set on its way out
        can run the loop first, while it still counts as in flight; without this second one, leases that
        all end in one loop iteration left a saturated loop asleep for good with work queued."""
        self._tasks.discard(task)
        self._wake_after_lease()

    def _scan_due(self, now: float, serve: bool) -> None:
        """Queue the URLs whose refresh is due: once per run, or every scan interval for a node."""
        window = self.config.refresh.scan_interval if serve else None
        queued, fresh = self._db.applied(self._frontier.requeue_due(now, window=window))
        self._refresh_queued += queued
        self._freshness = (fresh.tracked, fresh.due, fresh.important, fresh.within)
        self._next_scan = now + self.config.refresh.scan_interval if serve else math.inf
        if queued:
            log.info("refresh: %d URLs due queued again", queued)

    async def _drain(self) -> None:
        """Let requests in flight finish; once stopped, cancel those still running ``fetch.stop_grace``
        seconds later (their URLs stay queued: nothing about them is recorded)."""
        stopped = asyncio.ensure_future(self._stop.wait())
        deadline: float | None = None
        try:
            while self._tasks:
                if deadline is None and self._stop.is_set():
                    deadline = self._clock.monotonic() + self.config.fetch.stop_grace
                timeout = None if deadline is None else max(0.0, deadline - self._clock.monotonic())
                waiting = [*self._tasks] if stopped.done() else [*self._tasks, stopped]
                await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if deadline is not None and self._clock.monotonic() >= deadline and self._tasks:
                    log.warning("stop: cancelling %d requests still in flight after %.1fs; their URLs stay "
                                "queued", len(self._tasks), self.config.fetch.stop_grace)
                    for task in list(self._tasks):
                        task.cancel()
                    await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            stopped.cancel()

    def _fail(self, exc: BaseException) -> None:
        """State can no longer be saved (disk full, map full, I/O error): stop, keep what was committed.

        Requests in flight are cancelled: nothing more is recorded, so their URLs stay queued in the
        committed state and a resume after the fault is fixed fetches them."""
        if isinstance(exc, lmdb.Error):
            exc = storage_fault(exc, "frontier", self._db.path)
        elif isinstance(exc, OSError):
            exc = storage_fault(exc, "crawl state in", self.config.data_dir)
        if self._fatal is None:
            log.error("stopping: %s", exc)
            self._fatal = exc
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self.stop()

    async def _sleep(self, alarms: AlarmClock, until: float | None) -> None:
        """Wait for a completion that matters (:meth:`_wake_after_lease`), a new URL, stop, or the
        wall-clock time ``until``."""
        self._wake.clear()
        if until is not None:
            alarms.set(until, self._wake)
        self._sleeping, self._sleep_until = True, until
        try:
            await self._wake.wait()
        finally:
            self._sleeping = False
            if until is not None:
                alarms.cancel()

    def _wake_after_lease(self) -> None:
        """A lease ended: wake the loop only where that can change its next decision. It sleeps with no
        timer (for a free slot, or for the leases in flight), or a host is now due before its timer
        (the lease's own host, spaced again; a host its links queued). Any other wake-up would cost a
        loop turn, a lease call and a timer that decide nothing, several a page on a crawl that
        politeness paces. While the loop runs it decides afresh before it sleeps: nothing to do."""
        if not self._sleeping:
            return
        until = self._sleep_until
        due = self._frontier.next_due() if until is not None else None
        if until is None or (due is not None and due < until):
            self._wake.set()

    def _checkpoint(self, *, save_bloom: bool | None = None) -> None:
        """Store flush, then the Bloom snapshot (``save_bloom``: True always, None when
        ``BLOOM_SAVE_INTERVAL`` has passed, False never), then the frontier commit, all on the loop (at
        start, stop, and for operator actions; :meth:`_checkpoint_async` runs the periodic ones).

        One process saves the snapshot once at its stop, with the commit :meth:`__aexit__` makes last:
        a snapshot saved with the end of :meth:`run`'s commit would be stale at once (its tag is not
        the counter of the commit after it), and each is a write of the whole filter (12 MB at the
        default sizing; benchmarks/README.md, "Issue 17, fourth pass")."""
        self._complete_deferred()
        started = self._clock.wall()
        self._store.flush()
        self._commit(started, save_bloom)

    async def _checkpoint_async(self) -> None:
        """The periodic checkpoint, with every fsync off the loop while requests go on: the store flush in
        a worker thread, then the hand-off outbox's commit and the frontier's LMDB commit each on its
        writer thread, then (every ``BLOOM_SAVE_INTERVAL``) the Bloom snapshot in a thread. Completions
        of pages that arrive meanwhile wait (:attr:`_deferred`), so the frontier commit covers exactly
        the pages whose records that flush made durable. No frontier call is made during the frontier
        commit (:attr:`_frontier_free`); decisions that need no read (operator controls) are applied
        into the next transaction (polecat/frontier/db.py rule 3)."""
        started = self._clock.wall()
        self._flushing = True
        try:
            await asyncio.to_thread(self._store.flush)
            if self._link is not None:  # the outbox before the frontier: see polecat/cluster/outbox.py
                await _committed_off_loop(self._link.handoff.start_commit())
                self._link.handoff.finish_commit()
            self._db.apply(self._frontier.prepare_commit())
            self._mark_store()
            self._frontier_free.clear()
            try:
                await _committed_off_loop(self._db.start_commit())
            finally:
                self._frontier_free.set()
            self._db.finish_commit()
            self._committed(started)
        finally:
            self._flushing = False
        self._complete_deferred()
        now = self._clock.wall()
        if now - self._last_bloom_save >= BLOOM_SAVE_INTERVAL:
            self._last_bloom_save = now
            # A copy taken after the commit holds every key it holds (tagged with it); written meanwhile.
            snapshot, tag = self._seen.snapshot(), self._db.seq
            await asyncio.wrap_future(self._bloom_saver.submit(snapshot.save, self._bloom_path, tag))

    def _complete_deferred(self) -> None:
        deferred, self._deferred = self._deferred, []
        for lease, completion in deferred:
            self._db.apply(self._frontier.complete(lease, completion, self._clock.wall()))
        if deferred:
            self._wake.set()

    def _commit(self, started: float, save_bloom: bool | None) -> None:
        if self._link is not None:  # the outbox before the frontier: see polecat/cluster/outbox.py
            self._link.handoff.commit()
        now = self._clock.wall()
        if save_bloom or (save_bloom is None and now - self._last_bloom_save >= BLOOM_SAVE_INTERVAL):
            # Tagged with the counter the commit below writes: a crash in between forces a rebuild.
            # On the saver's thread, after any snapshot still being written there.
            self._bloom_saver.submit(self._seen.save, self._bloom_path, self._db.next_seq).result()
            self._last_bloom_save = now
        self._db.apply(self._frontier.prepare_commit())
        self._mark_store()
        self._db.commit()
        self._committed(started)

    def _mark_store(self) -> None:
        """Record, in the commit about to start, how many store records it covers (module docstring)."""
        self._db.apply([Put("meta", STORE_MARK, str(self._store.record_count()).encode())])

    def _reindex_past_mark(self) -> None:
        """Index again the store records past the frontier's last mark (module docstring). A data dir without
        a mark (new, or from before marks) gets one at once, committed: nothing is known to be missing
        there, and a crash before the first checkpoint leaves a mark to start from. A failure costs
        collapses, not pages: it is logged and the crawl goes on."""
        raw = self._db.txn.get(STORE_MARK, db=self._db.meta)
        if raw is None:
            self._db.apply(self._frontier.prepare_commit())
            self._mark_store()
            self._db.commit()
            return
        mark = int(bytes(raw))
        if mark >= self._store.record_count():
            return
        try:
            added = self._pipeline.reindex(self._store.records_since(mark))
        except PolecatError as exc:
            log.warning("near-duplicate index: the pages stored after the last frontier commit were not "
                        "indexed again: %s", exc)
            return
        log.info("near-duplicate index: %d page(s) stored after the last frontier commit indexed again",
                 added)

    def _committed(self, started: float) -> None:
        ended = self._clock.wall()
        self.last_checkpoint = (ended, ended - started)
        waiters, self._durable = self._durable, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _abandon_waiters(self) -> None:
        """Fail what still waits for a commit once no more are made: a hand-off receive then answers
        "error" and its sender keeps the batch."""
        waiters, self._durable = self._durable, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(PolecatError("the crawl stopped before a commit held this change"))

    async def _try_checkpoint_async(self) -> bool:
        try:
            await self._checkpoint_async()
        except (PolecatError, OSError, lmdb.Error) as exc:
            self._fail(exc)
            return False
        except Exception as exc:  # a bug: stop with what was committed, never hang on deferred completions
            log.exception("checkpoint failed")
            self._fail(exc)
            return False
        return True

    def _try_checkpoint(self, *, save_bloom: bool | None = None) -> bool:
        """:meth:`_checkpoint`, stopping the node when state cannot be saved; whether it succeeded."""
        try:
            self._checkpoint(save_bloom=save_bloom)
        except (PolecatError, OSError, lmdb.Error) as exc:
            self._fail(exc)
            return False
        return True

    async def _checkpoint_loop(self) -> None:
        """Checkpoint every ``commit_ms``, or sooner when ``commit_ops`` changes are pending, until
        :attr:`_checkpoints_end` is set (a checkpoint in progress is finished, never cut)."""
        period = self.config.frontier.commit_ms / 1000
        while not self._checkpoints_end:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):  # not wait_for: on 3.11 it can swallow a cancel
                    await self._checkpoint_due.wait()
            self._checkpoint_due.clear()
            if self._checkpoints_end:
                return
            if not (self._frontier.pending_ops or self._durable):
                continue
            if not await self._try_checkpoint_async():
                return

    # --- the cluster's side ----------------------------------------------------------------------

    async def receive(self, batch: Batch) -> None:
        """Queue URLs another member handed over (they are this member's by the Ring) and return once a
        frontier commit holds them, so the sender may forget them (the hand-off receiver's sink)."""
        if not self._receiving:
            raise PolecatError("this member is stopping; send the batch again later")
        await self._frontier_free.wait()
        self.queue_handed(batch.urls, self._clock.wall())
        fut = asyncio.get_running_loop().create_future()
        self._durable.append(fut)
        await fut

    def queue_handed(self, urls: Iterable[HandoffUrl], now: float) -> None:
        """Queue URLs handed to this member (durable at the next checkpoint); a forwarded seed is queued
        as a seed (its host joins the scope)."""
        for u in urls:
            if u.seed:
                self._db.applied(self._frontier.add_seed(u.url, now, u.importance))
            else:
                self._db.applied(self._frontier.add(u.url, u.depth, u.importance, now, hops=u.hops))
        self._wake.set()

    @property
    def quiet(self) -> bool:
        """Nothing to fetch, nothing to hand off, nothing being received (see polecat/cluster/link.py)."""
        return self._link is not None and self._link.quiet(self._quiet and not self._tasks)

    # --- one lease -------------------------------------------------------------------------------

    async def _run_lease(self, lease: Lease) -> None:
        if self.config.politeness.key_by_ip and not await self._bind_ip(lease):
            if lease.kind == "page":
                self._fetches -= 1  # withdrawn before anything was sent
            self._wake.set()
            return
        try:
            if lease.kind == "robots":
                completion = await self._robots_fetch(lease)
            else:
                completion = await self._page_fetch(lease)
        except asyncio.CancelledError:
            raise  # left in flight: its queue entry is replayed after restart
        except (StorageFault, OSError, lmdb.Error) as exc:  # the machine, not the page: record nothing, stop
            self._fail(exc)
            return
        except Exception as exc:  # a bug must cost one URL, never the node
            log.exception("internal error on %s", lease.url)
            self._errors["internal"] += 1
            now = self._clock.wall()
            completion = Completion(Attempt(now, now, None), "failed", f"internal:{type(exc).__name__}")
        await self._frontier_free.wait()
        if self._fatal is not None:
            return  # stopping after a fault: nothing more is recorded
        if self._on_lease is not None:
            self._on_lease(lease, completion)
        if self._flushing and lease.kind == "page":
            # Its store record may be in the batch after the one being flushed: recording the page done
            # in this commit could outlive the record. It completes right after the commit.
            self._deferred.append((lease, completion))
            return
        try:
            self._db.apply(self._frontier.complete(lease, completion, self._clock.wall()))
        except (PolecatError, lmdb.Error) as exc:
            self._fail(exc)
            return
        if lease.kind == "robots" and completion.robots is not None and completion.robots.status // 100 == 2:
            origin = origin_of(lease.url)
            now = self._clock.wall()
            decision = self._robots.lookup(origin, now)
            if isinstance(decision, Ready):
                self._pipeline.add_sitemaps(origin, decision.rules.sitemaps, now)
        if self._frontier.pending_ops >= self.config.frontier.commit_ops:
            self._checkpoint_due.set()
        st = self._frontier.host_state(lease.host)
        if st is not None and st.queued and not st.parked:
            # Warm DNS for the host's next request (a no-op while its answer is cached).
            self._fetcher.resolver.prefetch(_dns_name(lease.host))
        self._wake_after_lease()

    async def _bind_ip(self, lease: Lease) -> bool:
        """Per-IP politeness: resolve first, then let the frontier hold the IP (or withdraw the lease).
        A resolution failure is left to the fetch, which reports it like any DNS error."""
        try:
            addrs = await self._fetcher.resolver.lookup(_dns_name(lease.host))
        except FetchError:
            return True
        return not addrs or self._frontier.bind_ip(lease, addrs[0][0], self._clock.wall())

    async def _robots_fetch(self, lease: Lease) -> Completion:
        started = self._clock.wall()
        pacer = _RobotsPacer(self._frontier, self._canon, lease, self._clock)
        origin = origin_of(lease.url)
        try:
            outcome = await self._fetcher.fetch_robots(origin + "/robots.txt", pacer=pacer)
        except FetchError as exc:
            self._errors[f"robots:{exc.kind}"] += 1
            _log_failure(lease, exc)
            failed = RobotsOutcome(error=exc)
            if not pacer.on_lease_host and pacer.lease_attempt is not None:  # a hop to another host failed
                return Completion(dataclasses.replace(pacer.lease_attempt, unusable=True), "fetched",
                                  f"robots:{exc.kind}", detail=f"robots.txt: {exc.kind}: {exc}",
                                  robots=failed)
            failure = _failure(started, self._clock.wall(), exc)
            # Unread, the robots.txt keeps the host closed: whatever the error, a strike (politeness.py
            # rule 6). Without one, an error that retrying cannot mend (TLS to a plain-HTTP port) would
            # retry the robots.txt of a bounded run forever.
            return dataclasses.replace(failure, attempt=dataclasses.replace(failure.attempt, unusable=True),
                                       robots=failed)
        _log_response(lease, outcome)
        if self.config.store.archive_robots:  # archive-grade: the robots.txt the crawl obeyed is kept
            digest = content_hash(outcome.body, self._store.hash_name)
            self._store.put(FetchRecord(outcome.url, started, outcome.status, outcome.headers, digest,
                                        len(outcome.body), outcome.truncated), outcome.body)
        attempt = dataclasses.replace(pacer.finish(outcome), unusable=not is_answer(outcome.status))
        return Completion(attempt, "fetched", str(outcome.status), ip=outcome.remote_ip,
                          detail=f"robots.txt answered {outcome.status}",
                          robots=RobotsOutcome(outcome.status, outcome.body, outcome.retry_after))

    async def _page_fetch(self, lease: Lease) -> Completion:
        started = self._clock.wall()
        try:
            resp = await self._fetcher.fetch(lease.url, etag=lease.etag, last_modified=lease.last_modified)
        except FetchError as exc:
            self._errors[exc.kind] += 1
            _log_failure(lease, exc)
            return _failure(started, self._clock.wall(), exc)
        self._answered += 1
        _log_response(lease, resp)
        self.bytes_fetched += resp.wire_bytes
        await self._frontier_free.wait()  # the pipeline queues outlinks and reads the near-duplicate index
        return self._pipeline.handle(lease, resp, started)

    def _emit(self, page: Page) -> None:
        if self._on_page is not None:
            result = self._on_page(page)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                task.add_done_callback(_log_callback_error)
        for q in self._page_queues:
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(page)

    # --- observation -----------------------------------------------------------------------------

    def stats(self) -> CrawlStats:
        """A snapshot of every metric the node reports."""
        return collect_stats(
            now=self._clock.wall(), started_at=self._started_at, fetches=self._fetches,
            violations=self._violations, errors=self._errors, near_dups=self._pipeline.near_dups,
            bodies_at_start=self._bodies_at_start,
            frontier=self._frontier.stats(self._clock.wall()), parked=self._frontier.parked_hosts(),
            seen=self._seen.stats(), canon=self._canon.stats(),
            robots=self._robots.stats(), dns=self._fetcher.resolver.stats(), store=self._store.stats(),
            answered=self._answered, ended=self._ended, seeds_refused=self._seeds_refused,
            refresh_queued=self._refresh_queued, freshness=self._freshness, near=self._pipeline.near_stats(),
        )




class _RobotsPacer:
    """Runs the frontier's decisions for robots.txt redirect hops (politeness rule 8,
    polecat/frontier/hops.py): goes, waits or fails as :meth:`Frontier.hop` says, and gives each hop's
    outcome back (:meth:`Frontier.release`)."""

    def __init__(self, frontier: Frontier, canon: Canonicalizer, lease: Lease, clock: Clock) -> None:
        self._frontier = frontier
        self._clock = clock
        self._canon = canon
        self._lease = lease
        self._lease_host = lease.host
        self._host = lease.host
        self.lease_attempt: Attempt | None = None
        """The last request on the leased host, once a hop has left it."""

    def _host_of(self, url: str) -> str:
        canonical = self._canon.canonicalize(url)
        return host_key(canonical) if canonical is not None else self._lease_host

    async def before(self, url: str, previous: Response) -> None:
        attempt = attempt_of(previous, self._clock)
        if self.on_lease_host:
            self.lease_attempt = attempt
        # The leased host: spaces its next request. A borrowed host: gives it back.
        self._frontier.release(self._host, attempt)
        host = self._host_of(url)
        since = self._clock.wall()
        while True:
            now = self._clock.wall()
            decision = self._frontier.hop(self._lease, host, url, now, since)
            if isinstance(decision, Lease):
                break
            if isinstance(decision, Refused):
                self._host = host  # nothing was sent: the failure is not the leased host's
                raise FetchTimeout(f"robots.txt redirect to {url}: {decision.reason}")
            await asyncio.sleep(max(0.0, (decision.until or now) - now))
        self._host = host

    @property
    def on_lease_host(self) -> bool:
        """Whether the last request went to the leased host."""
        return self._host == self._lease_host

    def after(self, url: str, response: Response | None) -> None:
        if response is None and not self.on_lease_host:
            now = self._clock.wall()
            self._frontier.release(self._host, Attempt(now, now, None, failed=True))

    def finish(self, final: Response) -> Attempt:
        """The attempt to complete the lease with, after giving back a borrowed host."""
        attempt = attempt_of(final, self._clock)
        if self.on_lease_host:
            return attempt
        self._frontier.release(self._host, attempt)
        assert self.lease_attempt is not None
        return self.lease_attempt


_OPENED_PARTS = frozenset({"_db", "_seen", "_robots", "_bloom_path", "_bloom_saver", "_canon", "_store",
                           "_bodies_at_start", "_frontier", "_pipeline", "_fetcher"})
"""What :meth:`Crawler.__aenter__` creates: reading one before means the crawler is not open."""

HOST_FATAL = (BlockedAddressError,)
"""Errors that every request to the host would repeat in this run: the host is parked at once."""


def _failure(started: float, ended: float, exc: FetchError) -> Completion:
    attempt = Attempt(started, ended, None, failed=exc.retryable)
    outcome: Outcome = "retry" if exc.retryable else "failed"
    detail = f"{exc.kind}: {exc}"
    return Completion(attempt, outcome, exc.kind, detail=detail,
                      park=detail if isinstance(exc, HOST_FATAL) else "")


async def _committed_off_loop(commit: Future[Any]) -> None:
    """Wait for a commit running on a writer thread; its error is raised by the owner's finish."""
    with contextlib.suppress(lmdb.Error, PolecatError):
        await asyncio.wrap_future(commit)


def _earliest(until: float | None, scan: float) -> float | None:
    """The earlier of a wake-up time and the next refresh scan (``inf``: no scan planned)."""
    if scan == math.inf or scan == 0.0:
        return until
    return scan if until is None else min(until, scan)


def _log_failure(lease: Lease, exc: FetchError) -> None:
    """Logging rule 3 (polecat/logs.py): one info line per failed request."""
    log.info("%s failed: %s: %s", lease.url, exc.kind, exc,
             extra=fields(host=lease.host, url=lease.url, kind=lease.kind, reason=f"{exc.kind}: {exc}"))


def _log_response(lease: Lease, resp: Response) -> None:
    """One debug line per request that got a response; an error status is also an info line."""
    ms = round((resp.ended - resp.started) * 1000)
    level = logging.INFO if resp.status >= 400 else logging.DEBUG
    if log.isEnabledFor(level):
        extra = fields(host=lease.host, url=lease.url, kind=lease.kind, status=resp.status,
                       bytes=len(resp.body), ms=ms)
        if resp.status >= 400:
            extra["fields"]["reason"] = f"HTTP {resp.status}"
        log.log(level, "%s %d %d bytes %d ms", lease.url, resp.status, len(resp.body), ms, extra=extra)


def _dns_name(host: str) -> str:
    """The name (or IP literal) the resolver takes for a ``host[:port]`` politeness key."""
    return hostname(host).strip("[]")


def _log_callback_error(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("on_page callback failed", exc_info=task.exception())
