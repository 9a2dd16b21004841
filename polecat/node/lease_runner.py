"""One lease, from its request to its completion: fetch, hand the response to the pipeline, report the
outcome to the frontier. What a failure or a robots.txt answer means is the frontier's call
(polecat/frontier/outcomes.py); this module only does the I/O and applies the decisions.

Rules:

1. A lease cancelled in flight records nothing: its queue entry is replayed after a restart.
2. A fault of the machine (disk full, I/O error, LMDB) records nothing and stops the node (``fail``); a
   bug costs one URL (completed ``failed`` with reason ``internal:<type>``), never the node.
3. After a fault nothing more is recorded; a page completion that arrives while a commit's store flush
   runs waits for that commit (polecat/node/commits.py rule 2).
4. With ``politeness.key_by_ip`` the host's address is resolved first and the frontier holds the IP,
   or the lease is withdrawn before anything is sent (it does not count as a fetch).
5. After a completion, a host with more queued work has its DNS answer warmed for its next request (a
   no-op while the answer is cached).
6. In a cluster whose ownership can be lost (etcd), a request needs leave to go out (``permit``,
   polecat/cluster/ownership.py rule 10): asked when the lease starts, then as a send gate
   (``SendLeave.send``) just before the request's bytes are written (polecat/fetch/pool.py rule 8), not
   only when the URL was leased: a node frozen between the two (a GC pause, a paused VM) wakes fenced
   and sends nothing. A lease refused either way is withdrawn (the URL stays queued; not a fetch), its
   host held back for :data:`REFUSED_HOLD` (polecat/frontier/leasing.py rule 8).
7. A request that may not go on (``SendLeave.go_on``) is aborted by :meth:`LeaseRunner.abort_unpermitted`
   (the cluster node calls it every 0.1 s): its task is cancelled, its connection closed, and its lease
   withdrawn with the host waiting one interval from the abort (the request may have reached the
   server); nothing else about it is recorded, and its URL stays queued for the host's owner.
8. A page the pipeline holds for its content claims' answers (polecat/cluster/claimlink.py) is completed
   once it is stored (at most ``cluster.claim_wait`` later per step: its near claim or exact claim, then
   a near copy's deposit): the frontier never records as done a page whose store record is not written,
   and a page held when the node dies is fetched again. Its host is released as soon as the response is
   handled (polecat/frontier/leasing.py rule 7): the host's next request waits for its politeness
   interval only, not for the claims; but while :data:`MAX_RELEASED` pages are released and held, a
   held page keeps its host until it is stored, as before: when the claims fall behind (a loaded
   machine, a slow owner), the fetches slow down with them instead of outrunning them into ``claim_wait``.
9. After a completion, a host that keeps no connection (polecat/frontier/leasing.py rule 10: nothing
   due within the keep-alive) has its idle connections closed at once (``PageFetcher.let_go``,
   polecat/fetch/pool.py rule 11), not left open for the keep-alive; a page whose completion waits for
   a commit (rule 3) is judged when it is held, its own URL still counted queued.
10. A response in hand takes a turn of page work (polecat/node/turns.py) before its CPU step: a page's
   before the pipeline (parse, outlinks, dedup, store) and its completion, a robots.txt's before its
   parse and completion. A failed request does not: its completion is a few writes of the frontier.
   A lease's first step takes one too (its DNS answer, its connection, its request's bytes): the lease
   loop starts up to 64 a step (polecat/node/leases.py rule 6), and their first steps all ran in the
   loop's next iteration. A response's turn is taken with the frontier free (polecat/node/commits.py
   rule 14), and taken again if a commit began while it waited: turns granted and then held for an
   LMDB commit's end all ran when it ended, 180-240 page steps in one loop iteration of a 1M-host
   breadth crawl (benchmarks/README.md "Issue 39: page work a loop turn").
11. A lease whose request ended, its response in hand, and that waits for the frontier (a commit holds it,
   polecat/node/commits.py rule 2) is parked meanwhile (:attr:`LeaseRunner.parked`, its response's bytes
   in :attr:`LeaseRunner.parked_bytes`) and wakes the lease loop: its connection is back in the pool, so
   its slot may go to a lease taken ahead of an LMDB commit (polecat/node/leases.py rule 7), whose
   request then goes during the commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import lmdb

from polecat.clock import Clock
from polecat.config import Config
from polecat.dedup.canon import Canonicalizer
from polecat.errors import FetchError, PolecatError, RequestWithheld, StorageFault
from polecat.fetch.http import Response
from polecat.fetch.pool import SendGate
from polecat.fetch.seams import PageFetcher
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.leasing import keeps_connection
from polecat.frontier.outcomes import page_failed, robots_answered, robots_failed, sitemaps_named
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease, origin_of
from polecat.frontier.robots import RobotsPolicy
from polecat.hosts import hostname
from polecat.logs import fields
from polecat.node.commits import Commits
from polecat.node.pipeline import PagePipeline
from polecat.node.robots_pacer import RobotsPacer
from polecat.node.run_state import RunCounters, Waker
from polecat.node.turns import PageTurns
from polecat.store.base import FetchRecord, PageStore, content_hash

if TYPE_CHECKING:
    from polecat.cluster.link import SendLeave
    from polecat.node.crawler import LeaseObserver

log = logging.getLogger("polecat")

MAX_RELEASED = 64
"""Pages released and held for their claims at once at most (rule 8): about half a second of a worker's
pages at a few hundred pages/s, against a claim round of tens of ms."""
REFUSED_HOLD = 0.1
"""Seconds a host whose lease was refused its leave waits before it is leased again (rule 6): the cluster
node brings the frontier's owned slices in line with its ownership every 0.1 s (rule 7)."""


class LeaseRunner:
    """Runs one lease at a time per call of :meth:`run` (many run at once as tasks)."""

    def __init__(self, cfg: Config, *, frontier: Frontier, db: FrontierDB, robots: RobotsPolicy,
                 fetcher: PageFetcher, store: PageStore, pipeline: PagePipeline, canon: Canonicalizer,
                 commits: Commits, waker: Waker, counters: RunCounters, clock: Clock, turns: PageTurns,
                 on_lease: LeaseObserver | None, fail: Callable[[BaseException], None],
                 failed: Callable[[], bool], permit: Callable[[str], SendLeave | None] | None = None) -> None:
        self._cfg = cfg
        self._frontier = frontier
        self._db = db
        self._robots = robots
        self._fetcher = fetcher
        self._store = store
        self._pipeline = pipeline
        self._canon = canon
        self._commits = commits
        self._waker = waker
        self._counters = counters
        self._clock = clock
        self._turns = turns
        self._on_lease = on_lease
        self._fail = fail
        self._failed = failed
        self._permit = permit
        """Leave to send a request to a host (rules 6-7); None: every request may go."""
        self._going: dict[asyncio.Task[None], SendGate] = {}
        """The leases in flight under a leave, by their task, with its ``go_on`` (rule 7)."""
        self._aborting: set[asyncio.Task[None]] = set()
        """Tasks cancelled by :meth:`abort_unpermitted` (rule 7), until they saw it."""
        self._released = 0
        """Pages whose hosts were released while they wait for their claims (rule 8)."""
        self.parked = 0
        """Leases waiting for the frontier with their response in hand (rule 11)."""
        self.parked_bytes = 0
        """Their responses' bytes (rule 11)."""

    async def run(self, lease: Lease) -> None:
        """Fetch ``lease`` and record how it ended (the rules above)."""
        await self._turns.take()  # rule 10: the request's start
        if self._cfg.politeness.key_by_ip and not await self._bind_ip(lease):
            if lease.kind == "page":
                self._counters.fetches -= 1  # withdrawn before anything was sent (rule 4)
            self._waker.set()
            return
        gate: SendGate | None = None
        task = asyncio.current_task()
        if self._permit is not None:
            leave = self._permit(lease.host)
            if leave is None:  # rule 6
                self._withdraw(lease, None)
                return
            assert task is not None
            gate = leave.send
            self._going[task] = leave.go_on
        try:
            if lease.kind == "robots":
                completion = await self._robots_fetch(lease, gate)
            else:
                completion = await self._page_fetch(lease, gate)
        except RequestWithheld:  # rule 6: the gate closed before anything was sent
            self._withdraw(lease, None)
            return
        except asyncio.CancelledError:
            if task is None or task not in self._aborting:
                raise  # rule 1
            if task.uncancel() > 0:
                raise  # also cancelled for another reason (the node stops): rule 1
            self._withdraw(lease, self._clock.wall())  # rule 7
            return
        except (StorageFault, OSError, lmdb.Error) as exc:  # rule 2: the machine, not the page
            self._fail(exc)
            return
        except Exception as exc:  # rule 2: a bug must cost one URL, never the node
            log.exception("internal error on %s", lease.url)
            self._counters.errors["internal"] += 1
            now = self._clock.wall()
            completion = Completion(Attempt(now, now, None), "failed", f"internal:{type(exc).__name__}")
        finally:
            if task is not None:
                self._going.pop(task, None)
                self._aborting.discard(task)  # a fetch that ended its own way as the abort came
        await self._frontier_freed()
        if self._failed():
            return  # rule 3
        if self._on_lease is not None:
            self._on_lease(lease, completion)
        now = self._clock.wall()
        if self._commits.defer(lease, completion):  # rule 3: completed right after the commit in progress
            if not keeps_connection(self._frontier.host_state(lease.host), now, held=1):  # rule 9
                self._fetcher.let_go(lease.url)
            return
        try:
            self._db.apply(self._frontier.complete(lease, completion, now))
        except (PolecatError, lmdb.Error) as exc:
            self._fail(exc)
            return
        named = sitemaps_named(self._robots, lease, completion, now)
        if named is not None:
            self._pipeline.add_sitemaps(*named, now)
        self._commits.after_change()
        st = self._frontier.host_state(lease.host)
        if st is not None and st.queued and not st.parked:  # rule 5
            self._fetcher.resolver.prefetch(dns_name(lease.host))
        if not keeps_connection(st, now):  # rule 9
            self._fetcher.let_go(lease.url)
        self._waker.after_lease()

    async def _turn(self, size: int) -> None:
        """Rule 10: a turn of page work, the frontier free; ``size``: the response's bytes (rule 11)."""
        free = self._commits.frontier_free
        while True:
            await self._frontier_freed(size)
            await self._turns.take()
            if free.is_set():
                return

    async def _frontier_freed(self, size: int = 0) -> None:
        """:meth:`Commits.frontier_freed`, parked meanwhile with a response of ``size`` bytes (rule 11)."""
        if self._commits.frontier_free.is_set():
            return
        self.parked += 1
        self.parked_bytes += size
        self._waker.set()
        try:
            await self._commits.frontier_freed()
        finally:
            self.parked -= 1
            self.parked_bytes -= size

    def abort_unpermitted(self) -> int:
        """Cancel the requests in flight that may not go on (rule 7); returns how many."""
        aborted = 0
        for task, go_on in list(self._going.items()):
            if task not in self._aborting and not go_on():
                self._aborting.add(task)
                task.cancel()
                aborted += 1
        return aborted

    def _withdraw(self, lease: Lease, aborted_at: float | None) -> None:
        """Rules 6 and 7: the lease is given back, its URL stays queued, it is no fetch."""
        hold = None if aborted_at is not None else self._clock.wall() + REFUSED_HOLD
        self._frontier.withdraw(lease, aborted_at, hold_until=hold)
        if lease.kind == "page":
            self._counters.fetches -= 1
        log.info("%s the request to %s: this node no longer owns its host's slice",
                 "aborted" if aborted_at is not None else "withdrew", lease.url)
        self._waker.set()

    async def _bind_ip(self, lease: Lease) -> bool:
        """Rule 4. A resolution failure is left to the fetch, which reports it like any DNS error."""
        try:
            addrs = await self._fetcher.resolver.lookup(dns_name(lease.host))
        except FetchError:
            return True
        return not addrs or self._frontier.bind_ip(lease, addrs[0][0], self._clock.wall())

    async def _robots_fetch(self, lease: Lease, gate: SendGate | None) -> Completion:
        started = self._clock.wall()
        pacer = RobotsPacer(self._frontier, self._canon, lease, self._clock)
        try:
            outcome = await self._fetcher.fetch_robots(origin_of(lease.url) + "/robots.txt", pacer=pacer,
                                                       gate=gate)
            await self._turn(len(outcome.body))
        except (asyncio.CancelledError, RequestWithheld):
            pacer.after(lease.url, None)  # a host a redirect hop borrowed goes back (politeness rule 8)
            raise
        except FetchError as exc:
            self._counters.errors[f"robots:{exc.kind}"] += 1
            _log_failure(lease, exc)
            return robots_failed(started, self._clock.wall(), exc, pacer.hop_from)
        _log_response(lease, outcome)
        if self._cfg.store.archive_robots:  # archive-grade: the robots.txt the crawl obeyed is kept
            digest = content_hash(outcome.body, self._store.hash_name)
            self._store.put(FetchRecord(outcome.url, started, outcome.status, outcome.headers, digest,
                                        len(outcome.body), outcome.truncated), outcome.body)
        return robots_answered(pacer.finish(outcome), outcome.status, outcome.body, outcome.retry_after,
                               outcome.remote_ip)

    async def _page_fetch(self, lease: Lease, gate: SendGate | None) -> Completion:
        started = self._clock.wall()
        scope = self._cfg.scope
        cap = None
        if scope.requisites and self._frontier.is_requisite(lease.url):
            cap = scope.max_requisite_bytes  # frontier/requisites.py rule 4: a requisite's own body cap
        try:
            stream = self._pipeline.stream_for(lease)
            resp = await self._fetcher.fetch(lease.url, etag=lease.etag, last_modified=lease.last_modified,
                                             stream=stream, max_bytes=cap, gate=gate)
        except FetchError as exc:
            self._counters.errors[exc.kind] += 1
            _log_failure(lease, exc)
            return page_failed(started, self._clock.wall(), exc)
        self._counters.answered += 1
        _log_response(lease, resp)
        self._counters.bytes_fetched += resp.wire_bytes
        await self._turn(resp.wire_bytes)  # the pipeline queues outlinks and reads the near index
        completion = self._pipeline.handle(lease, resp, started, stream.sink)
        if self._released < MAX_RELEASED and self._pipeline.holds(lease.url):
            # rule 8: the host's next request need not wait for this page's claims
            self._frontier.release_request(lease, completion, self._clock.wall())
            self._waker.after_lease()
            self._released += 1
            try:
                await self._pipeline.stored(lease.url)
            finally:
                self._released -= 1
        else:
            await self._pipeline.stored(lease.url)
        return completion


def dns_name(host: str) -> str:
    """The name (or IP literal) the resolver takes for a ``host[:port]`` politeness key."""
    return hostname(host).strip("[]")


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
