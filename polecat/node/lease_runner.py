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
6. In a cluster whose ownership can be lost (etcd), ownership is checked again just before the request
   is sent (``may_send``), not only when the URL was leased: a node frozen between the two (a GC pause,
   a paused VM) wakes fenced and withdraws the lease (the URL stays queued; not counted as a fetch).
7. A page the pipeline holds for its content claim's answer (polecat/cluster/claimlink.py) is completed
   once it is stored (at most ``cluster.claim_wait`` later): the frontier never records as done a page
   whose store record is not written, and a page held when the node dies is fetched again.
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
from polecat.errors import FetchError, PolecatError, StorageFault
from polecat.fetch.http import Response
from polecat.fetch.seams import PageFetcher
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
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
from polecat.store.base import FetchRecord, PageStore, content_hash

if TYPE_CHECKING:
    from polecat.node.crawler import LeaseObserver

log = logging.getLogger("polecat")


class LeaseRunner:
    """Runs one lease at a time per call of :meth:`run` (many run at once as tasks)."""

    def __init__(self, cfg: Config, *, frontier: Frontier, db: FrontierDB, robots: RobotsPolicy,
                 fetcher: PageFetcher, store: PageStore, pipeline: PagePipeline, canon: Canonicalizer,
                 commits: Commits, waker: Waker, counters: RunCounters, clock: Clock,
                 on_lease: LeaseObserver | None, fail: Callable[[BaseException], None],
                 failed: Callable[[], bool], may_send: Callable[[str], bool] | None = None) -> None:
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
        self._on_lease = on_lease
        self._fail = fail
        self._failed = failed
        self._may_send = may_send
        """Whether this node may send a request to a host now (rule 6); None: always."""

    async def run(self, lease: Lease) -> None:
        """Fetch ``lease`` and record how it ended (the rules above)."""
        if self._cfg.politeness.key_by_ip and not await self._bind_ip(lease):
            if lease.kind == "page":
                self._counters.fetches -= 1  # withdrawn before anything was sent (rule 4)
            self._waker.set()
            return
        if self._may_send is not None and not self._may_send(lease.host):  # rule 6
            self._frontier.withdraw(lease)
            if lease.kind == "page":
                self._counters.fetches -= 1
            log.info("withdrew the lease of %s: this node no longer owns its host's slice", lease.url)
            self._waker.set()
            return
        try:
            if lease.kind == "robots":
                completion = await self._robots_fetch(lease)
            else:
                completion = await self._page_fetch(lease)
        except asyncio.CancelledError:
            raise  # rule 1
        except (StorageFault, OSError, lmdb.Error) as exc:  # rule 2: the machine, not the page
            self._fail(exc)
            return
        except Exception as exc:  # rule 2: a bug must cost one URL, never the node
            log.exception("internal error on %s", lease.url)
            self._counters.errors["internal"] += 1
            now = self._clock.wall()
            completion = Completion(Attempt(now, now, None), "failed", f"internal:{type(exc).__name__}")
        await self._commits.frontier_free.wait()
        if self._failed():
            return  # rule 3
        if self._on_lease is not None:
            self._on_lease(lease, completion)
        if self._commits.defer(lease, completion):
            return  # rule 3: completed right after the commit in progress
        now = self._clock.wall()
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
        self._waker.after_lease()

    async def _bind_ip(self, lease: Lease) -> bool:
        """Rule 4. A resolution failure is left to the fetch, which reports it like any DNS error."""
        try:
            addrs = await self._fetcher.resolver.lookup(dns_name(lease.host))
        except FetchError:
            return True
        return not addrs or self._frontier.bind_ip(lease, addrs[0][0], self._clock.wall())

    async def _robots_fetch(self, lease: Lease) -> Completion:
        started = self._clock.wall()
        pacer = RobotsPacer(self._frontier, self._canon, lease, self._clock)
        try:
            outcome = await self._fetcher.fetch_robots(origin_of(lease.url) + "/robots.txt", pacer=pacer)
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

    async def _page_fetch(self, lease: Lease) -> Completion:
        started = self._clock.wall()
        try:
            resp = await self._fetcher.fetch(lease.url, etag=lease.etag, last_modified=lease.last_modified)
        except FetchError as exc:
            self._counters.errors[exc.kind] += 1
            _log_failure(lease, exc)
            return page_failed(started, self._clock.wall(), exc)
        self._counters.answered += 1
        _log_response(lease, resp)
        self._counters.bytes_fetched += resp.wire_bytes
        await self._commits.frontier_free.wait()  # the pipeline queues outlinks and reads the near index
        completion = self._pipeline.handle(lease, resp, started)
        await self._pipeline.stored(lease.url)  # rule 7
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
