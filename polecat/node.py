"""One crawler node: wires frontier, fetcher, parser, dedup and store to the event loop.

The node owns no policy. It asks the frontier for leases, runs each as a task (fetch, parse, dedup,
store), reports the outcome back, and checkpoints: store flush first, then the frontier commit, so
the frontier never records as done a page the store could lose. All state changes happen on the
event-loop thread between awaits, which is what makes the frontier's single write transaction safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

import lmdb

from polecat.config import Config
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.nearindex import MAX_PAYLOAD, NearDupIndex
from polecat.dedup.seen import SeenSet
from polecat.dedup.simhash import Fingerprint, fingerprint
from polecat.errors import BlockedAddressError, FetchError, PolecatError
from polecat.fetch.charset import decode_html
from polecat.fetch.http import Fetcher, Response
from polecat.fetch.robots import RobotsPolicy, product_token
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier, origin_of
from polecat.frontier.patterns import hostname
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Idle, Lease, Outcome, Wait, child_importance
from polecat.parse.html import parse_html
from polecat.stats import CrawlStats, collect_stats
from polecat.store.base import FetchRecord, PageStore, content_hash, open_store

log = logging.getLogger("polecat")

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BLOOM_SAVE_INTERVAL = 60.0


@dataclass(frozen=True, slots=True)
class Page:
    """A fetched page as the library API hands it to callbacks."""

    url: str
    status: int
    fetched_at: float
    content_type: str
    content_hash: bytes
    body: bytes
    text: str
    links: tuple[str, ...]
    """Canonical outlinks (before scope and seen filtering)."""
    depth: int
    truncated: bool
    duplicate_of: str | None
    """URL of the page this one near-duplicates (or of its own previous fetch when unchanged)."""


PageCallback = Callable[[Page], Awaitable[None] | None]


class Crawler:
    """A crawler node. Use as ``async with Crawler(cfg) as c: await c.run()``.

    ``on_page`` is called for every successfully fetched page (2xx); or iterate :meth:`pages` while
    :meth:`run` executes in another task. Seeds come from ``cfg.scope.seeds`` and :meth:`add_seed`.
    """

    def __init__(self, config: Config, *, on_page: PageCallback | None = None) -> None:
        self.config = config
        self._on_page = on_page
        self._page_queues: list[asyncio.Queue[Page | None]] = []
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._errors: Counter[str] = Counter()
        self._fetches = 0
        self._violations = 0
        self._near_dups = 0
        self._started_at = 0.0
        self._last_bloom_save = 0.0
        self._opened = False
        self._fatal: BaseException | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Crawler:
        cfg = self.config
        data = cfg.data_dir
        data.mkdir(parents=True, exist_ok=True)
        self._db = FrontierDB(data / "frontier", map_size=cfg.frontier.map_size,
                              params={"url_fingerprint": "xxh3_128", "canon": 1, "near_index": 2})
        self._bloom_path = data / "seen.bloom"
        self._seen = SeenSet.restore(self._db.env, self._db.seen, self._bloom_path, self._db.seq,
                                     cfg.dedup.expected_urls, cfg.dedup.bloom_fp_rate)
        self._robots = RobotsPolicy(cfg.robots, cfg.fetch.user_agent)
        self._agent_token = product_token(cfg.fetch.user_agent)
        self._canon = Canonicalizer(cfg.dedup.tracking_params)
        self._near = NearDupIndex(self._db.near)
        self._store: PageStore = open_store(data / "store", cfg.store)
        self._bodies_at_start = self._store.stats().bodies
        self._frontier = Frontier(self._db, cfg, self._robots, self._seen, time.time())
        self._fetcher = Fetcher(cfg.fetch, cfg.dns)
        await self._fetcher.__aenter__()
        self._opened = True
        now = time.time()
        for seed in cfg.scope.seeds:
            self.add_seed(seed, now=now)
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
        if self._fatal is None:
            self._checkpoint(save_bloom=True)
            self._store.close()
            self._db.close()
        else:  # keep only what was committed before the failure; the next start replays the rest
            with contextlib.suppress(Exception):
                self._store.close()
            self._db.abort()

    def add_seed(self, url: str, *, importance: float = 1.0, now: float | None = None) -> str:
        """Queue a seed URL (its host joins the scope). Returns the frontier's decision."""
        canonical = self._canon.canonicalize(url.strip())
        if canonical is None:
            raise PolecatError(f"seed {url!r} is not an http(s) URL")
        decision = self._frontier.add_seed(canonical, time.time() if now is None else now, importance)
        self._wake.set()
        return decision

    def block(self, pattern: str) -> int:
        """Block hosts matching ``pattern`` (``example.com`` or ``*.example.com``) from now on, persisted:
        their queued URLs are recorded done (reason ``blocked``). Returns how many were dropped."""
        return self._frontier.block(pattern)

    def throttle(self, pattern: str, rate: float) -> None:
        """Set the request rate (req/s) of hosts matching ``pattern``, persisted across restarts."""
        if not rate > 0:
            raise PolecatError(f"throttle rate for {pattern!r} must be > 0, got {rate}")
        self._frontier.set_throttle(pattern, rate)

    def stop(self) -> None:
        """Ask :meth:`run` to stop leasing and return once in-flight requests end."""
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

    async def run(self) -> CrawlStats:
        """Crawl until the frontier is exhausted, ``scope.max_pages`` fetches were made, or :meth:`stop`."""
        loop = asyncio.get_running_loop()
        self._started_at = time.time()
        self._last_bloom_save = self._started_at
        checkpointer = asyncio.create_task(self._checkpoint_loop())
        limit = self.config.scope.max_pages
        concurrency = self.config.fetch.concurrency
        try:
            while not self._stop.is_set():
                if limit and self._fetches >= limit:
                    break
                if len(self._tasks) >= concurrency:
                    await self._sleep(loop, None)
                    continue
                now = time.time()
                decision = self._frontier.lease(now)
                if isinstance(decision, Lease):
                    if decision.kind == "page":
                        self._fetches += 1
                    if now < decision.not_before:
                        self._violations += 1  # self-check of politeness rule 2; must stay 0
                    task = asyncio.create_task(self._run_lease(decision))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif isinstance(decision, Wait):
                    await self._sleep(loop, decision.until)
                elif isinstance(decision, Idle):
                    break
            while self._tasks:
                await asyncio.wait(list(self._tasks))
        finally:
            checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checkpointer
            if self._fatal is None:
                self._checkpoint(save_bloom=True)
            for q in self._page_queues:
                with contextlib.suppress(asyncio.QueueFull):
                    q.put_nowait(None)
        if self._fatal is not None:
            # What was committed is consistent; the rest replays on the next start.
            raise PolecatError(f"crawl stopped: {self._fatal}") from self._fatal
        return self.stats()

    def _fail(self, exc: BaseException) -> None:
        """State can no longer be saved (disk full, map full, I/O error): stop, keep what was committed."""
        if self._fatal is None:
            log.error("stopping: %s", exc)
            self._fatal = exc
        self.stop()

    async def _sleep(self, loop: asyncio.AbstractEventLoop, until: float | None) -> None:
        """Wait for a completion, a new URL, stop, or the wall-clock time ``until``."""
        self._wake.clear()
        handle = None
        if until is not None:
            handle = loop.call_later(max(0.0, until - time.time()), self._wake.set)
        try:
            await self._wake.wait()
        finally:
            if handle is not None:
                handle.cancel()

    def _checkpoint(self, *, save_bloom: bool = False) -> None:
        """Store flush, then (optionally) the Bloom snapshot, then the frontier commit."""
        self._store.flush()
        now = time.time()
        if save_bloom or now - self._last_bloom_save >= BLOOM_SAVE_INTERVAL:
            # Tagged with the counter the commit below writes: a crash in between forces a rebuild.
            self._seen.save(self._bloom_path, self._db.next_seq)
            self._last_bloom_save = now
        self._frontier.commit()

    async def _checkpoint_loop(self) -> None:
        period = self.config.frontier.commit_ms / 1000
        while True:
            await asyncio.sleep(period)
            if self._frontier.pending_ops:
                try:
                    self._checkpoint()
                except (PolecatError, OSError, lmdb.Error) as exc:
                    self._fail(exc)
                    return

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
        except Exception as exc:  # a bug must cost one URL, never the node
            log.exception("internal error on %s", lease.url)
            self._errors["internal"] += 1
            now = time.time()
            completion = Completion(Attempt(now, now, None), "failed", f"internal:{type(exc).__name__}")
        try:
            self._frontier.complete(lease, completion, time.time())
            if self._frontier.pending_ops >= self.config.frontier.commit_ops:
                self._checkpoint()
        except (PolecatError, OSError, lmdb.Error) as exc:
            self._fail(exc)
            return
        st = self._frontier.host_state(lease.host)
        if st is not None and st.queued and not st.parked:
            # Warm DNS for the host's next request (a no-op while its answer is cached).
            self._fetcher.resolver.prefetch(hostname(lease.host).strip("[]"))
        self._wake.set()

    async def _bind_ip(self, lease: Lease) -> bool:
        """Per-IP politeness: resolve first, then let the frontier hold the IP (or withdraw the lease).
        A resolution failure is left to the fetch, which reports it like any DNS error."""
        try:
            addrs = await self._fetcher.resolver.lookup(hostname(lease.host).strip("[]"))
        except FetchError:
            return True
        return not addrs or self._frontier.bind_ip(lease, addrs[0][0], time.time())

    async def _robots_fetch(self, lease: Lease) -> Completion:
        origin = origin_of(lease.url)
        started = time.time()
        try:
            resp = await self._fetcher.fetch_robots(lease.url)
        except FetchError as exc:
            self._errors[f"robots:{exc.kind}"] += 1
            self._robots.record_failure(origin, time.time(), exc)
            return _failure(started, exc)
        self._robots.record_response(origin, resp.status, resp.body, time.time(),
                                     retry_after=resp.retry_after)
        return Completion(_attempt(started, resp), "fetched", str(resp.status), ip=resp.remote_ip)

    async def _page_fetch(self, lease: Lease) -> Completion:
        started = time.time()
        try:
            resp = await self._fetcher.fetch(lease.url, etag=lease.etag, last_modified=lease.last_modified)
        except FetchError as exc:
            self._errors[exc.kind] += 1
            return _failure(started, exc)
        attempt = _attempt(started, resp)
        status = resp.status
        if status in RETRY_STATUSES:
            self._errors[f"http_{status}"] += 1
            return Completion(attempt, "retry", str(status), ip=resp.remote_ip)
        if 300 <= status < 400 and status != 304:
            if resp.location:
                self._follow_redirect(lease, resp.location, started)
            self._store_record(lease.url, resp, started, resp.body)
            return Completion(attempt, "redirect", str(status), ip=resp.remote_ip)
        if status == 304:
            prev = self._store.history(lease.url)
            if prev:
                self._store.put(FetchRecord(lease.url, started, 304, resp.headers, prev[-1].content_hash, 0,
                                            duplicate_of=lease.url, kind="revisit"), None)
            return Completion(attempt, "not_modified", "304", prev[-1].content_hash if prev else None,
                              ip=resp.remote_ip, changed=False)
        digest, duplicate_of = self._process_body(lease, resp, started)
        return Completion(attempt, "fetched", str(status), digest, etag=_header(resp, "etag"),
                          last_modified=_header(resp, "last-modified"), ip=resp.remote_ip,
                          changed=duplicate_of != lease.url)

    def _process_body(self, lease: Lease, resp: Response, started: float) -> tuple[bytes, str | None]:
        """Parse, queue outlinks, dedup and store a 2xx/4xx body; returns its hash and what it duplicates."""
        body = resp.body
        digest = content_hash(body)
        is_html = resp.content_type in HTML_TYPES
        text = ""
        links: tuple[str, ...] = ()
        if is_html and 200 <= resp.status < 300:
            html = decode_html(body, resp.charset)
            parsed = parse_html(html, lease.url, agent_token=self._agent_token)
            text = parsed.text
            raw = list(parsed.links)
            if parsed.canonical:
                raw.append(parsed.canonical)
            links = self._add_links(raw, parsed.base, lease, started)
            if parsed.noindex:
                self._store_record(lease.url, resp, started, None, skipped="noindex")
                return digest, None
        if resp.content_type not in self.config.fetch.store_types and 200 <= resp.status < 300:
            self._store_record(lease.url, resp, started, None, skipped="type")
            return digest, None
        duplicate_of = None
        if text and not self._store.has(digest):
            duplicate_of = self._near_duplicate(lease.url, digest, text)
        elif text:
            # The body may have outlived its fingerprint (a crash after the store flush, before the
            # frontier commit that holds the index): keep every stored page findable.
            fp = fingerprint(text)
            if self._near.find(self._db.txn, fp, 0) is None:
                self._index(lease.url, digest, fp)
        if duplicate_of is not None and not self.config.dedup.store_near_duplicates:
            orig_hash, orig_url = duplicate_of
            self._store.put(FetchRecord(lease.url, started, resp.status, resp.headers, orig_hash, len(body),
                                        resp.truncated, duplicate_of=orig_url, kind="revisit"), None)
            self._emit(lease, resp, started, orig_hash, body, text, links, orig_url)
            return orig_hash, orig_url
        self._store_record(lease.url, resp, started, body, digest=digest)
        if 200 <= resp.status < 300:
            self._emit(lease, resp, started, digest, body, text, links, None)
        return digest, None

    def _near_duplicate(self, url: str, digest: bytes, text: str) -> tuple[bytes, str] | None:
        """(hash, URL) of a stored page within the fingerprint distance, or None after indexing this one."""
        fp = fingerprint(text)
        txn = self._db.txn
        match = self._near.find(txn, fp, self.config.dedup.simhash_distance)
        if match is not None:
            self._near_dups += 1
            return match[:32], match[32:].decode()
        self._index(url, digest, fp)
        return None

    def _index(self, url: str, digest: bytes, fp: Fingerprint) -> None:
        payload = digest + url.encode()
        if len(payload) <= MAX_PAYLOAD:  # an LMDB dupsort value limit; such long URLs are rare
            self._near.add(self._db.txn, fp, payload)

    def _store_record(self, url: str, resp: Response, started: float, body: bytes | None, *,
                      digest: bytes | None = None, skipped: str = "") -> None:
        if body is None:
            # Fetched but not stored (type, noindex): the history still records the fetch.
            headers = (*resp.headers, ("X-Polecat-Skipped", skipped))
            self._store.put(FetchRecord(url, started, resp.status, headers, content_hash(b""), 0,
                                        resp.truncated), b"")
            return
        self._store.put(FetchRecord(url, started, resp.status, resp.headers,
                                    digest or content_hash(body), len(body), resp.truncated), body)

    def _follow_redirect(self, lease: Lease, location: str, now: float) -> None:
        """Queue a redirect target like a discovered URL, politely, with the hop count carried."""
        if lease.hops >= self.config.fetch.max_redirects:
            self._errors["too_many_redirects"] += 1
            return
        target = self._canon.canonicalize(location, lease.url)
        if target is not None:
            self._frontier.add(target, lease.depth, lease.importance, now, hops=lease.hops + 1)
            self._wake.set()

    def _add_links(self, raw: list[str], base: str, lease: Lease, now: float) -> tuple[str, ...]:
        urls = tuple(dict.fromkeys(self._canon.canonicalize_links(raw, base)))
        if urls:
            self._frontier.add_many(urls, lease.depth + 1, child_importance(lease.importance, len(urls)), now)
            self._wake.set()
        return urls

    def _emit(self, lease: Lease, resp: Response, started: float, digest: bytes, body: bytes, text: str,
              links: tuple[str, ...], duplicate_of: str | None) -> None:
        if self._on_page is None and not self._page_queues:
            return
        page = Page(lease.url, resp.status, started, resp.content_type, digest, body, text, links,
                    lease.depth, resp.truncated, duplicate_of)
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
            now=time.time(), started_at=self._started_at, fetches=self._fetches,
            violations=self._violations, errors=self._errors, near_dups=self._near_dups,
            bodies_at_start=self._bodies_at_start,
            frontier=self._frontier.stats(time.time()), parked=self._frontier.parked_hosts(),
            seen=self._seen.stats(), canon=self._canon.stats(),
            robots=self._robots.stats(), dns=self._fetcher.resolver.stats(), store=self._store.stats(),
        )


HOST_FATAL = (BlockedAddressError,)
"""Errors that every request to the host would repeat in this run: the host is parked at once."""


def _failure(started: float, exc: FetchError) -> Completion:
    attempt = Attempt(started, time.time(), None, failed=exc.retryable)
    outcome: Outcome = "retry" if exc.retryable else "failed"
    park = f"{exc.kind}: {exc}" if isinstance(exc, HOST_FATAL) else ""
    return Completion(attempt, outcome, exc.kind, park=park)


def _attempt(started: float, resp: Response) -> Attempt:
    """The response's monotonic timings (the fetcher's clock) as wall-clock seconds. They are converted
    with an offset read now, not from ``started``: the fetcher may have started its clock later (a
    connection-pool wait), and an anchor computed from ``started`` would come out early."""
    offset = time.time() - time.monotonic()
    return Attempt(started, resp.ended + offset, resp.first_byte + offset, resp.status, resp.retry_after)


def _header(resp: Response, name: str) -> str | None:
    for k, v in resp.headers:
        if k.lower() == name:
            return v
    return None


def _log_callback_error(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("on_page callback failed", exc_info=task.exception())
