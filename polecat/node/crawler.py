"""One crawler node: wires frontier, fetcher, parser, dedup and store to the event loop.

The node owns no policy: the frontier decides what to fetch, when, and what an outcome means. The node
is its parts, each with one job: the lease loop (polecat/node/leases.py) asks the frontier for the next
request and runs each as a task (polecat/node/lease_runner.py: fetch, then the page pipeline, then the
frontier's completion); the commits (polecat/node/commits.py) make it durable in their order; the
member (polecat/node/member.py) is what the cluster calls. All state changes happen on the event-loop
thread between awaits, which is what makes the frontier's single write transaction safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import lmdb

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.config import Config
from polecat.dedup.canon import Canonicalizer
from polecat.errors import PolecatError
from polecat.faults import storage_fault
from polecat.fetch.descriptors import plan_descriptors, raise_nofile_limit
from polecat.fetch.http import Fetcher, request_headers
from polecat.fetch.seams import PageFetcher
from polecat.frontier.frontier import Frontier
from polecat.frontier.head_reader import ThreadHeadReader
from polecat.frontier.intake import ACCEPTED, SEEN
from polecat.frontier.migrate import MigrationReport
from polecat.frontier.opener import open_frontier
from polecat.frontier.read_ahead import HeadsAhead
from polecat.frontier.records import Completion, Lease
from polecat.frontier.robots import RobotsPolicy
from polecat.heap import fix_mmap_threshold
from polecat.hosts import host_key
from polecat.node import turns, verdict
from polecat.node.commits import Commits
from polecat.node.lease_runner import LeaseRunner
from polecat.node.leases import LeaseLoop
from polecat.node.member import Member
from polecat.node.pipeline import Page, PagePipeline
from polecat.node.run_state import SEEDS_REFUSED_KEPT, RunCounters, Waker
from polecat.node.seed_feed import SeedFeed
from polecat.node.stats import CrawlStats, collect_stats
from polecat.node.turns import PageTurns
from polecat.parse.robots import product_token
from polecat.store.archive import archive_info
from polecat.store.base import PageStore
from polecat.store.segments import check_unlocked
from polecat.store.segstore import open_store

if TYPE_CHECKING:
    from polecat.cluster.link import ClusterLink

log = logging.getLogger("polecat")

_QUEUED_OR_SEEN = frozenset((ACCEPTED, SEEN))
"""A seed's decisions that are no refusal (the rest are counted)."""

PageCallback = Callable[[Page], Awaitable[None] | None]
LeaseObserver = Callable[[Lease, Completion], None]
"""Called with every lease's outcome (the service's metrics and status page)."""


@dataclass(frozen=True, slots=True)
class Opened:
    """What opening a data dir did to bring it up to this release (``polecat upgrade`` prints it)."""

    schema: MigrationReport | None
    """The frontier's keys rewritten from schema 1 (polecat/frontier/migrate.py), if they were."""
    near_dropped: int | None
    """Entries of a near-duplicate index of an older fingerprint format dropped, if one was."""
    reindexed: int
    """Stored pages (re)entered into the near-duplicate index: those of an older fingerprint format
    (polecat/node/commits.py rule 7), and those a crash left unindexed (rule 4)."""
    near_left: int
    """Store records of an older fingerprint format left unindexed (rule 7: too many to index at open)."""


class Crawler:
    """A crawler node. Use as ``async with Crawler(cfg) as c: await c.run()``.

    ``on_page`` is called for every successfully fetched page (2xx); or iterate :meth:`pages` while
    :meth:`run` executes in another task. Seeds come from ``cfg.scope.seeds`` and :meth:`add_seed`.
    ``link`` makes the node one member of a multi-process crawl (``polecat crawl --workers N``, see
    :mod:`polecat.cluster.link`): it fetches only for its own slices and runs until :meth:`stop`.
    ``upgrade`` makes opening finish every upgrade of the data dir whatever it costs (``polecat
    upgrade``); otherwise the costly part waits (:attr:`opened`, polecat/node/commits.py rule 7).
    """

    def __init__(self, config: Config, *, on_page: PageCallback | None = None,
                 on_lease: LeaseObserver | None = None, link: ClusterLink | None = None,
                 clock: Clock = SYSTEM_CLOCK, fetcher: PageFetcher | None = None,
                 store: PageStore | None = None, upgrade: bool = False) -> None:
        if config.workers != 1 and link is None:
            raise PolecatError("workers: a Crawler is one process; run a crawl over several with "
                               "polecat.processes.supervisor.crawl_with_workers(cfg)")
        self.config = config
        self._clock = clock
        self._given_fetcher = fetcher
        self._given_store = store
        """Seams for tests (polecat/testing/fakes.py); None: the real fetcher and segment store."""
        self._upgrade = upgrade
        fix_mmap_threshold()  # pages at the body cap must not grow the heap for good
        self._on_page = on_page
        self._on_lease = on_lease
        self._link = link
        self._counters = RunCounters()
        self._page_queues: list[asyncio.Queue[Page | None]] = []
        self._stop = asyncio.Event()
        self._receiving = True
        self._started_at = 0.0
        self._opened = False
        self._fatal: BaseException | None = None
        self._fatal_raised = False

    if not TYPE_CHECKING:  # at run time only: mypy keeps checking every attribute name

        def __getattr__(self, name: str) -> Any:
            # Called only for attributes that do not exist: the parts __aenter__ opens.
            if name in _OPENED_PARTS:
                raise PolecatError("the crawler is not open: use `async with Crawler(config) as crawler:` "
                                   "(or `await crawler.__aenter__()`) before calling its methods")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Crawler:
        # Descriptors first (polecat/fetch/descriptors.py): a concurrency the limit cannot hold is
        # lowered before any part is built with it.
        budget = plan_descriptors(raise_nofile_limit(), self.config.fetch.concurrency)
        if (warning := budget.warning()) is not None:
            log.warning(warning)
            fetch = replace(self.config.fetch, concurrency=budget.concurrency)
            self.config = replace(self.config, fetch=fetch)
        cfg = self.config
        if self._given_store is None:  # a running crawl of this dir: refused, not waited for behind it
            check_unlocked(cfg.data_dir / "store")
        local = open_frontier(cfg, self._clock.wall())
        self._db, self._seen, self._robots = local.db, local.seen, local.robots
        self._frontier = frontier = local.frontier
        self._canon = Canonicalizer(cfg.dedup.tracking_params, cfg.dedup.keep_query_order)
        archive = archive_info(user_agent=cfg.fetch.user_agent, request_headers=request_headers(cfg.fetch),
                               requests=cfg.store.request_records)
        try:
            self._store: PageStore = self._given_store or open_store(cfg.data_dir / "store", cfg.store,
                                                                     archive=archive)
        except BaseException:  # e.g. a torn segment that needs `store repair`: hold no frontier open
            self._db.close()
            raise
        self._bodies_at_start = self._store.stats().bodies
        self._waker = waker = Waker(frontier.next_due)
        self._commits = Commits(cfg.frontier, db=self._db, frontier=frontier, store=self._store,
                                seen=self._seen, bloom_path=local.bloom_path, link=self._link,
                                clock=self._clock, fail=self._fail, wake=waker.set)
        self._pipeline = PagePipeline(cfg, frontier=frontier, db=self._db, store=self._store,
                                      canon=self._canon, agent_token=product_token(cfg.fetch.user_agent),
                                      errors=self._counters.errors, emit=self._emit, wake=waker.set,
                                      stage=link.stage if (link := self._link) is not None else None,
                                      claim=link.claims.claim if link is not None and link.claims else None,
                                      clock=self._clock)
        if link is not None and link.claims is not None:
            link.claims.bind(self._store, self._db)
        rebuilt, left = self._commits.rebuild_near_index(self._pipeline, whole=self._upgrade)
        self._opened_report = Opened(self._db.upgraded, self._db.near_dropped,
                                     rebuilt + self._commits.reindex_past_mark(self._pipeline), left)
        # The fetcher stamps responses on this clock: the pipeline converts them with its offset.
        self._fetcher: PageFetcher = self._given_fetcher or Fetcher(
            cfg.fetch, cfg.dns, clock=self._clock, max_open=budget.connections)
        await self._fetcher.__aenter__()
        runner = LeaseRunner(cfg, frontier=frontier, db=self._db, robots=self._robots, fetcher=self._fetcher,
                             store=self._store, pipeline=self._pipeline, canon=self._canon,
                             commits=self._commits, waker=waker, counters=self._counters, clock=self._clock,
                             turns=PageTurns(self._clock.monotonic, turns.TURN_SECONDS),
                             on_lease=self._on_lease, fail=self._fail, failed=lambda: self._fatal is not None,
                             permit=self._link.permit if self._link is not None else None)
        seeds_file = cfg.scope.seeds_file
        self._feed = None if seeds_file is None else SeedFeed(
            seeds_file, add_seeds=self.add_seeds, frontier_free=self._commits.frontier_freed,
            wake=waker.set, clock=self._clock)
        reader = ThreadHeadReader(self._db.env, self._db.queue, self._db.hosts)
        heads = HeadsAhead(frontier.read_ahead, reader)
        self._loop = LeaseLoop(cfg, frontier=frontier, db=self._db, commits=self._commits, runner=runner,
                               waker=waker, counters=self._counters, link=self._link, clock=self._clock,
                               stop=self._stop, feeding=lambda: self._feed is not None and self._feed.running,
                               short=self._fetcher.connections_short, full=self._fetcher.connections_full,
                               heads=heads)
        self._member = Member(frontier=frontier, db=self._db, store=self._store, commits=self._commits,
                              loop=self._loop,
                              runner=runner, counters=self._counters,
                              waker=waker, link=self._link, clock=self._clock,
                              receiving=lambda: self._receiving)
        self._opened = True
        if self._link is not None:  # lease only this member's slices, whatever else the frontier holds
            self._link.bind(frontier)
            frontier.set_owned(self._link.ring.slices_of(self._link.self_id), self._clock.wall())
        try:
            now = self._clock.wall()
            for seed in (*cfg.scope.seeds, *cfg.refresh.feeds):  # a listed feed starts as a seed
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
        await self._loop.cancel_all()
        await self._fetcher.__aexit__(et, e, tb)
        try:
            if self._fatal is None and self._commits.try_commit(save_bloom=True):
                self._store.close()
                self._db.close()
            else:  # keep only what was committed before the failure; the next start replays the rest
                with contextlib.suppress(Exception):
                    self._store.close()
                self._db.close()
                if et is None and not self._fatal_raised:  # the final commit failed
                    raise PolecatError(f"crawl stopped: {self._fatal}") from self._fatal
        finally:
            self._commits.close()

    def add_seed(self, url: str, *, importance: float = 1.0, now: float | None = None,
                 forward: bool = False) -> str:
        """Queue a seed URL (its host joins the scope). Returns the frontier's decision. A seed another
        member owns is only added to the scope here (``"other_owner"``: the configuration's seeds, which
        every member reads), or with ``forward`` staged for its owner (``"forwarded"``: an operator's
        seed; durable in the outbox at the next commit)."""
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
        if decision not in _QUEUED_OR_SEEN:
            self._count_refused(url, decision)
        self._waker.set()
        return decision

    def add_seeds(self, urls: Sequence[str]) -> list[str | None]:
        """:meth:`add_seed` of each of ``urls`` (a seeds file's batch, polecat/node/seed_feed.py): the
        seeds this node owns in one frontier decision (frontier/intake.py rule 7). Answers each seed's
        decision, None for a line that is not an http(s) URL."""
        # Canonicalized list-wide (issue 39: a batch is ~all canonical seeds owned here); another member's
        # seed is queued by its owner one by one, as add_seed does.
        canonicals = list(map(self._canon.canonicalize, map(str.strip, urls)))
        owns = self._frontier.owns
        answers: list[str | None] = [None] * len(urls)
        mine: list[tuple[int, str]] = []
        for i, canonical in enumerate(canonicals):
            if canonical is not None:
                if owns(canonical):
                    mine.append((i, canonical))
                else:
                    answers[i] = self.add_seed(urls[i])
        decisions = self._db.applied(self._frontier.add_seeds([c for _, c in mine], self._clock.wall()))
        for (i, _), decision in zip(mine, decisions, strict=True):
            answers[i] = decision
            if decision not in _QUEUED_OR_SEEN:  # a call only for a refused seed: a batch is ~all queued
                self._count_refused(urls[i], decision)
        self._waker.set()
        return answers

    def _count_refused(self, url: str, decision: str) -> None:
        """Count the seed ``url`` refused for ``decision`` (the first ones kept with their reason)."""
        c = self._counters
        c.seeds_refused_total += 1
        if len(c.seeds_refused) < SEEDS_REFUSED_KEPT:
            c.seeds_refused.append((url, decision))

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
        """Stop (or, with False, resume) leasing new requests (persisted at the next commit);
        in-flight requests finish."""
        self._db.apply(self._frontier.set_paused(paused))
        self._waker.set()

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

    @property
    def member(self) -> Member:
        """This node as a member of a crawl over several processes or machines (polecat/node/member.py)."""
        return self._member

    @property
    def opened(self) -> Opened:
        """What opening the data dir upgraded (:class:`Opened`)."""
        return self._opened_report

    @property
    def bytes_fetched(self) -> int:
        """Page body bytes received in this run, as sent on the wire."""
        return self._counters.bytes_fetched

    @property
    def last_commit(self) -> tuple[float, float]:
        """Wall-clock time and duration (seconds) of the last commit."""
        return self._commits.last

    async def commit(self, *, lmdb: bool = False) -> None:
        """Return once a frontier commit holds every change made so far (the operator API answers after
        it). While :meth:`run` runs, its committer makes that commit, so two store flushes never overlap;
        otherwise it is made here (polecat/node/commits.py). ``lmdb``: an LMDB commit (its rule 9)."""
        await self._commits.durable(lmdb=lmdb)

    def throttle_now(self, pattern: str, rate: float) -> None:
        """:meth:`throttle` for a running crawl: matching hosts wait one new interval before their next
        request (:meth:`Frontier.throttle_now`)."""
        self._db.apply(self._frontier.throttle_now(pattern, rate, self._clock.wall()))

    def robots_file(self, origin: str) -> tuple[int, float, bytes] | None:
        """The stored robots.txt answer of ``origin``: status, fetch time, body; None if none."""
        return self._frontier.robots_answer(origin)

    def stop(self) -> None:
        """Ask :meth:`run` to stop leasing and return once in-flight requests end, or after
        ``fetch.stop_grace`` seconds: requests still in flight then are cancelled and their URLs stay
        queued for the next start."""
        self._stop.set()
        self._waker.set()
        if self._link is not None and self._link.claims is not None:  # no lease waits on claims now
            self._link.claims.stopping()

    async def pages(self) -> AsyncIterator[Page]:
        """Iterate pages as they are fetched, while :meth:`run` runs in another task."""
        q: asyncio.Queue[Page | None] = asyncio.Queue(maxsize=1024)
        self._page_queues.append(q)
        try:
            while (page := await q.get()) is not None:
                yield page
        finally:
            self._page_queues.remove(q)

    # --- a run ----------------------------------------------------------------------------------

    async def run(self, *, serve: bool = False) -> CrawlStats:
        """Crawl until the frontier is exhausted, ``scope.max_pages`` fetches were made, or :meth:`stop`.
        With ``serve`` an empty frontier is not the end: the node waits for new URLs until :meth:`stop`."""
        self._started_at = self._clock.wall()
        committer = self._commits.start()
        counters = self._counters
        feeding = None
        rebuilding = None
        if self._commits.near_rebuild_left:  # commits rule 7: past the bound, while the crawl runs
            rebuilding = asyncio.create_task(self._commits.rebuild_in_background(self._pipeline))
        if self._feed is not None:
            self._feed.running = True  # before the loop's first look: it must not end idle (feed rule 4)
            feeding = asyncio.create_task(self._feed.run())
            feeding.add_done_callback(self._feed_done)
        try:
            await self._loop.run(serve=serve)
            counters.ended = counters.ended or verdict.STOPPED
            if self._fatal is None:
                f = self._frontier.freshness(self._clock.wall())
                counters.freshness = (f.tracked, f.due, f.important, f.within)
        finally:
            self._receiving = False
            if rebuilding is not None:  # what it indexed goes with the last commit; the next run goes on
                rebuilding.cancel()
                await asyncio.gather(rebuilding, return_exceptions=True)
            if feeding is not None and not feeding.done():  # stopped (max pages, stop()): stop reading
                feeding.cancel()
                await asyncio.gather(feeding, return_exceptions=True)
            self._commits.stop()
            try:
                await committer
                if self._fatal is None:  # the Bloom snapshot waits for the one __aexit__ commits last
                    self._commits.try_commit(save_bloom=False)
            finally:  # after a fault or a cancel ("abort") too: nobody may wait for a commit never made
                self._commits.abandon()
                for q in self._page_queues:
                    with contextlib.suppress(asyncio.QueueFull):
                        q.put_nowait(None)
        if self._fatal is not None:
            counters.ended = verdict.FAILED
            # What was committed is consistent; the rest replays on the next start.
            self._fatal_raised = True
            raise PolecatError(f"crawl stopped: {self._fatal}") from self._fatal
        return self.stats()

    def _feed_done(self, task: asyncio.Task[None]) -> None:
        """The seeds file could not be read to its end (a fault, or a file gone): stop like a fault."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._fail(exc)

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
        self._loop.cancel_others()
        self.stop()

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
        c = self._counters
        now = self._clock.wall()
        return collect_stats(
            now=now, started_at=self._started_at, fetches=c.fetches, violations=c.violations,
            errors=c.errors, near_dups=self._pipeline.near_dups, near_deltas=self._pipeline.near_deltas,
            pages_cut=self._pipeline.pages_cut, requisites_queued=self._pipeline.requisites_queued,
            bodies_at_start=self._bodies_at_start,
            frontier=self._frontier.stats(now), parked=self._frontier.parked_hosts(),
            seen=self._seen.stats(), canon=self._canon.stats(),
            robots=self._robots.stats(), dns=self._fetcher.resolver.stats(), store=self._store.stats(),
            answered=c.answered, ended=c.ended, seeds_refused=c.seeds_refused,
            seeds_refused_total=c.seeds_refused_total,
            refresh_queued=c.refresh_queued, freshness=c.freshness, near=self._pipeline.near_stats(),
            near_rebuild_left=self._commits.near_rebuild_left, tls=self._fetcher.tls_stats(),
        )


_OPENED_PARTS = frozenset({"_db", "_seen", "_robots", "_canon", "_store", "_bodies_at_start", "_frontier",
                           "_pipeline", "_fetcher", "_waker", "_commits", "_loop", "_member",
                           "_opened_report"})
"""What :meth:`Crawler.__aenter__` creates: reading one before means the crawler is not open."""


def _log_callback_error(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("on_page callback failed", exc_info=task.exception())
