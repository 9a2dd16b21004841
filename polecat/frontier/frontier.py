"""The frontier: what is fetched next, when, and what became of every accepted URL.

It is a synchronous object driven by the node on the event-loop thread: ``add`` URLs, ``lease`` the next
request (or learn how long to wait), ``complete`` the lease with what happened. Time comes in as ``now``
(wall-clock seconds, so next-allowed times survive restarts). State lives in LMDB (per-host queues,
host records with next-allowed times, the seen-set, finished-URL records, operator controls; all keyed
slice-first, see polecat/frontier/keys.py) through one
batched write transaction; only the ready heap and in-flight leases are rebuilt in memory on open.

Invariant: an accepted URL is queued (its key is in ``queue``), in flight (leased, key still in ``queue``),
or done (key deleted and a record in ``urls``, in the same transaction). A crash therefore replays the
in-flight and uncommitted work and drops nothing.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections import Counter
from collections.abc import Iterable

from polecat.config import Config, PolitenessConfig
from polecat.dedup.canon import host_key
from polecat.dedup.seen import SeenSet
from polecat.errors import FrontierError
from polecat.fetch.robots import Closed, Fetch, Ready, RobotsPolicy
from polecat.frontier import refetch
from polecat.frontier.budgets import PageBudget, admit_reason
from polecat.frontier.bundle import BundleError, SliceBundle
from polecat.frontier.db import FrontierDB
from polecat.frontier.handover import delete_ranges, export_ranges
from polecat.frontier.ipkeys import IpKeys
from polecat.frontier.keys import (
    PRIORITY_BANDS,
    host_of_queue_key,
    host_of_row,
    host_row,
    op_key,
    parse_op_key,
    priority_band,
    queue_key,
    queue_prefix,
    requeue_key,
    robots_key,
    url_key,
)
from polecat.frontier.patterns import HostPatternMap
from polecat.frontier.politeness import Attempt, HostState, after_attempt, gave_up, interval
from polecat.frontier.records import (
    AdoptReport,
    Completion,
    FrontierStats,
    Idle,
    Lease,
    QueuedUrl,
    RobotsOutcome,
    UrlRecord,
    Wait,
    decode_host,
    encode_host,
    origin_of,
)
from polecat.frontier.refresh import Freshness, Prior, RefreshPolicy, refresh_slots
from polecat.frontier.robots_state import decode_robots, encode_robots, restore_robots
from polecat.frontier.scope import ScopeFilter
from polecat.frontier.slices import SLICES, check_slices, slice_of

ROBOTS_SKIPS_PER_LEASE = 256
"""Robots-disallowed URLs retired per lease call for one host before yielding to other hosts."""

HOLD_RETRY = 0.05
"""Seconds before asking again for a host that is busy with another request."""

RECENT_URLS = 131_072
"""Bound of the memo of URLs already in the seen-set: sites link the same URLs (navigation, footers)
from every page, and a memo hit skips fingerprinting, the Bloom filter and LMDB (~10 MB at most)."""

ACCEPTED = "accepted"
SEEN = "seen"


class Frontier:
    """Per-host queues, the ready heap and the done records; see the module docstring."""

    def __init__(self, db: FrontierDB, cfg: Config, robots: RobotsPolicy, seen: SeenSet, now: float,
                 *, rng: random.Random | None = None) -> None:
        self._db = db
        self._cfg = cfg
        self._pol = cfg.politeness
        self._robots = robots
        self._seen = seen
        self._rng = rng or random.Random()
        self._hosts: dict[str, HostState] = {}
        self._ipkeys = IpKeys()
        self._heap: list[tuple[float, str]] = []
        self._scheduled: dict[str, float] = {}
        self._leases: dict[str, Lease] = {}
        self._dirty: set[str] = set()
        self._recent: dict[str, None] = {}
        self._parked: dict[str, str] = {}
        self._queued = 0
        self._accepted = self._seen_count = self._dropped_blocked = 0
        self._rejected: Counter[str] = Counter()
        self._done: Counter[str] = Counter()
        """Outcomes in this run; ``_done_total`` (persisted in meta) counts them over all runs."""
        self._done_total: Counter[str] = Counter(json.loads(bytes(db.txn.get(b"done", b"{}", db=db.meta))))
        self._throttle: HostPatternMap[float] = HostPatternMap()
        self._blocked: HostPatternMap[bool] = HostPatternMap()
        self._scope = ScopeFilter(cfg.scope, ())
        self._refresh = RefreshPolicy(cfg.refresh)
        self._bands: Counter[str] | None = None
        """Queued URLs by priority band, counted once asked for (:meth:`queue_bands`), then kept."""
        self.paused = False
        """Set by the operator: the node leases nothing while it is (persisted)."""
        self._qseq = int(self._db.txn.get(b"qseq", db=self._db.meta) or b"0")
        self._refetch: list[tuple[bytes, str]] = []
        self.budget = PageBudget(cfg.scope.max_pages)
        """This run's page budget, robots.txt reservations included (polecat/frontier/budgets.py)."""
        self._fenced: frozenset[int] = frozenset()
        """Slices whose hosts are not leased (another member owns them; :meth:`set_owned`)."""
        for raw_key, raw in self._db.txn.cursor(db=self._db.ops):
            self._load_op(bytes(raw_key), bytes(raw))
        for pattern, rate in self._pol.throttle:
            self.set_throttle(pattern, rate)
        with db.txn.cursor(db=db.robots) as cur:
            for raw_key, raw in cur:
                restore_robots(robots, bytes(raw_key), raw)
        self._load_hosts(now)
        self._apply_refetches(now)
        for pattern in cfg.scope.block:
            self.block(pattern)

    # --- persistence -----------------------------------------------------------------------------

    def _load_op(self, key: bytes, raw: bytes) -> None:
        """Apply one stored operator control (on open, or adopted with a slice)."""
        kind, arg = parse_op_key(key)
        if kind == "block":
            self._blocked.set(arg, True)
        elif kind == "throttle":
            self._throttle.set(arg, float(raw))
        elif kind == "seedhost":
            self._scope.add_seed_host(arg)
        elif kind == "paused":
            self.paused = True
        elif kind == refetch.KIND:
            self._refetch.append((key, raw.decode()))

    def _apply_refetches(self, now: float) -> None:
        """Queue again the URLs whose stored copy was lost (polecat/frontier/refetch.py, rule 2)."""
        txn = self._db.txn
        for key, url in self._refetch:
            host = host_key(url)
            if txn.delete(url_key(url, host), db=self._db.urls):  # else still queued: fetched anyway
                self._enqueue(url, host, 0, 1.0, now)
            txn.delete(key, db=self._db.ops)
        self._refetch.clear()

    def _load_hosts(self, now: float) -> None:
        """Rebuild the in-memory heap from the host table. A request may have been in flight when the
        previous process died, uncommitted: every host therefore waits one interval from ``now``, so a
        restart never sends a burst (the dead process's requests all started before ``now``)."""
        for raw_key, raw in self._db.txn.cursor(db=self._db.hosts):
            host = host_of_row(bytes(raw_key))
            st = decode_host(raw)
            st.next_allowed = max(st.next_allowed, now + interval(self._pol, self._rate(host), st))
            self._hosts[host] = st
            self._queued += st.queued
            if st.queued > 0:
                self._schedule(host, st.next_allowed)

    def _save_host(self, host: str, st: HostState) -> None:
        # Host records are written once per commit, however often they changed in between.
        self._dirty.add(host)
        self._db.pending += 1

    def _flush_hosts(self) -> None:
        txn, hosts = self._db.txn, self._db.hosts
        for host in self._dirty:
            txn.put(host_row(host), encode_host(self._hosts[host]), db=hosts)
        self._dirty.clear()

    def commit(self) -> int:
        """Checkpoint: make every change so far durable. The node calls it after flushing the store."""
        self._flush_hosts()
        txn = self._db.txn
        txn.put(b"qseq", str(self._qseq).encode(), db=self._db.meta)
        txn.put(b"done", json.dumps(self._done_total).encode(), db=self._db.meta)
        return self._db.commit()

    @property
    def pending_ops(self) -> int:
        return self._db.pending

    # --- adding URLs -----------------------------------------------------------------------------

    def add_seed(self, url: str, now: float, importance: float = 1.0) -> str:
        """Queue a canonical seed URL; its host joins the crawl scope (persisted). Returns the decision."""
        host = host_key(url)
        self.add_scope_host(host)
        return self._add(url, host, 0, importance, now, seed=True)

    def add_scope_host(self, host: str) -> None:
        """Let ``host`` into the crawl scope like a seed's host (persisted) without queueing anything:
        a member of a multi-process crawl learns every seed host, whichever member queues the seed."""
        self._scope.add_seed_host(host)
        self._db.txn.put(op_key("seedhost", host), b"", db=self._db.ops)

    def add(self, url: str, depth: int, importance: float, now: float, *, hops: int = 0) -> str:
        """Queue a canonical discovered URL if it is in scope and new; returns ``"accepted"``,
        ``"seen"`` or the reason it was refused. ``hops``: redirects followed to reach it."""
        return self._add(url, host_key(url), depth, importance, now, seed=False, hops=hops)

    def add_many(self, urls: Iterable[str], depth: int, importance: float, now: float) -> int:
        """Add the outlinks of one page in one batch (one vectorised Bloom pass); returns how many were
        accepted. Per-host budgets are checked before the batch, so one page may overshoot them by its
        own links at most."""
        candidates: list[tuple[str, str]] = []
        recent = self._recent
        repeats = 0
        new_hosts: set[str] = set()
        # A page often links one URL twice: the Bloom batch must see each URL once.
        for url in dict.fromkeys(urls):
            if url in recent:
                repeats += 1
                continue
            host = host_key(url)
            reason = self._refuse(url, host, depth, False, new_hosts)
            if reason is None:
                candidates.append((url, host))
                if host not in self._hosts:
                    new_hosts.add(host)
            else:
                self._rejected[reason] += 1
        self._seen_count += repeats
        if not candidates:
            return 0
        fresh = self._seen.add_many_if_new(self._db.txn, [url_key(u, h) for u, h in candidates])
        accepted = 0
        if len(recent) + len(candidates) > RECENT_URLS:
            recent.clear()
        for (url, host), new in zip(candidates, fresh, strict=True):
            recent[url] = None
            if new:
                self._enqueue(url, host, depth, importance, now)
                accepted += 1
        self._seen_count += len(candidates) - accepted
        return accepted

    def _add(self, url: str, host: str, depth: int, importance: float, now: float, *, seed: bool,
             hops: int = 0) -> str:
        reason = self._refuse(url, host, depth, seed)
        if reason is not None:
            self._rejected[reason] += 1
            return reason
        if not self._seen.add_if_new(self._db.txn, url_key(url, host)):
            self._seen_count += 1
            return SEEN
        self._enqueue(url, host, depth, importance, now, hops)
        return ACCEPTED

    def _enqueue(self, url: str, host: str, depth: int, importance: float, now: float, hops: int = 0,
                 *, new: bool = True) -> None:
        st = self._hosts.get(host)
        if st is None:
            st = self._hosts[host] = HostState()
        self._qseq += 1
        key = queue_key(host, importance, depth, self._qseq)
        self._db.txn.put(key, QueuedUrl(url, depth, importance, 0, hops).encode(), db=self._db.queue)
        self._count_band(key, 1)
        st.queued += 1
        self._queued += 1
        self._accepted += new
        self._save_host(host, st)
        if not st.in_flight and not st.parked and host not in self._scheduled:
            self._schedule(host, max(st.next_allowed, now))

    def _refuse(self, url: str, host: str, depth: int, seed: bool,
                page_new_hosts: set[str] | None = None) -> str | None:
        """Why ``url`` may not be queued (None: it may). ``page_new_hosts``: the new hosts its page's
        links brought so far (budgets rules 3-5)."""
        if host in self._blocked:
            return "blocked"
        scope_cfg = self._cfg.scope
        if seed:
            if len(url) > scope_cfg.max_url_length:
                return "url_too_long"
        else:
            reason = self._scope.reject_reason(url, host, depth)
            if reason is None:
                new_hosts = page_new_hosts or set()
                reason = admit_reason(scope_cfg, new_host=host not in self._hosts and host not in new_hosts,
                                      hosts=len(self._hosts) + len(new_hosts), queued=self._queued,
                                      page_new_hosts=len(new_hosts))
            if reason is not None:
                return reason
        st = self._hosts.get(host)
        if st is not None:
            if st.queued >= scope_cfg.max_queue_per_host:
                return "host_queue_full"
            if st.queued + st.fetched >= scope_cfg.max_pages_per_host:
                return "host_budget"
        return None

    # --- leasing ---------------------------------------------------------------------------------

    def _schedule(self, host: str, at: float) -> None:
        if self._fenced and slice_of(host) in self._fenced:
            return
        self._scheduled[host] = at
        heapq.heappush(self._heap, (at, host))

    def lease(self, now: float) -> Lease | Wait | Idle:
        """The next request to make, or how long nothing is ready. Never returns two leases for one host
        (or, with key_by_ip, one IP) at once, nor one before the host's next-allowed time."""
        heap = self._heap
        while heap:
            at, host = heap[0]
            if self._scheduled.get(host) != at:
                heapq.heappop(heap)
                continue
            if at > now:
                return Wait(at)
            heapq.heappop(heap)
            del self._scheduled[host]
            st = self._hosts[host]
            if st.parked or st.in_flight or st.queued <= 0:
                continue
            if self._pol.key_by_ip and st.ip and not self._ip_ready(host, st.ip, now):
                continue
            got = self._lease_from(host, st, now)
            if got is not None:
                self.budget.charge(got.kind, host)
                self._leases[host] = got
                st.in_flight = True
                if self._pol.key_by_ip and st.ip:
                    self._ipkeys.take(host, st.ip)
                return got
        return Wait(None) if self._leases else Idle()

    def bind_ip(self, lease: Lease, ip: str, now: float) -> bool:
        """With ``key_by_ip``: the node resolved ``lease.host`` to ``ip`` just before sending. True: go
        ahead (the IP is now held by this lease). False: the lease is withdrawn, the IP is busy or not
        yet allowed, and the host waits for it; send nothing."""
        host = lease.host
        if self._ipkeys.held_by(host) == ip:
            return True
        self._wake_ip_waiters(*self._ipkeys.release(host))
        self._hosts[host].ip = ip  # lease() checks it from now on, before handing out the host
        if self._ip_ready(host, ip, now):
            self._ipkeys.take(host, ip)
            return True
        self._leases.pop(host, None)
        self._hosts[host].in_flight = False
        self.budget.refund(lease.kind, host)
        return False

    def _ip_ready(self, host: str, ip: str, now: float) -> bool:
        """Whether ``host`` may use ``ip`` now; if not, it is scheduled for when it may, or waits for the
        IP's current request to end."""
        at = self._ipkeys.wait_time(host, ip, now)
        if at is None:
            return True
        if at != math.inf:
            self._schedule(host, at)
        return False

    def _wake_ip_waiters(self, waiters: set[str], ip_next_allowed: float) -> None:
        for waiter in waiters:
            ws = self._hosts[waiter]
            if not ws.in_flight and ws.queued > 0 and waiter not in self._scheduled:
                self._schedule(waiter, max(ws.next_allowed, ip_next_allowed))

    def _lease_from(self, host: str, st: HostState, now: float) -> Lease | None:
        """First allowed URL of ``host`` as a lease (or a robots.txt lease); None to skip the host now."""
        prefix = queue_prefix(host)
        txn = self._db.txn
        with txn.cursor(db=self._db.queue) as cur:
            for _ in range(ROBOTS_SKIPS_PER_LEASE):
                if not cur.set_range(prefix) or not bytes(cur.key()).startswith(prefix):
                    self._queued -= st.queued  # repair a count that disagrees with the table
                    st.queued = 0
                    self._save_host(host, st)
                    return None
                key = bytes(cur.key())
                q = QueuedUrl.decode(cur.value())
                origin = origin_of(q.url)
                decision = self._robots.lookup(origin, now)
                if isinstance(decision, Fetch) or (isinstance(decision, Ready) and decision.refresh_due):
                    if not self.budget.allows("robots", host):
                        return None  # out of the run's budget: left queued for a later run
                    return Lease(host, origin + "/robots.txt", "robots", not_before=st.next_allowed)
                if isinstance(decision, Closed):
                    st.next_allowed = max(st.next_allowed, decision.until)
                    self._save_host(host, st)
                    self._schedule(host, st.next_allowed)
                    return None
                if decision.rules.allowed(q.url):
                    if not self.budget.allows("page", host):
                        return None
                    prev = self.url_record(q.url)
                    return Lease(host, q.url, "page", q.depth, q.importance, q.attempts, key,
                                 prev.etag if prev else None, prev.last_modified if prev else None,
                                 not_before=st.next_allowed, hops=q.hops)
                self._finish(host, st, key, UrlRecord(q.url, "skipped", "robots"))
        self._schedule(host, now)
        return None

    def _rate(self, host: str) -> float:
        return self._throttle.get(host) or self._pol.rate

    # --- requests outside the queue: robots.txt redirect hops ---------------------------------------

    def hold(self, host: str, now: float) -> float | None:
        """Borrow ``host`` for one request that is not in its queue (a robots.txt redirect hop landing
        there). None: it is held now, under the same rules as a lease; call :meth:`release` when the
        request ends. Otherwise the time to ask again (while it is busy, its end time is unknown)."""
        st = self._hosts.get(host)
        if st is None:
            st = self._hosts[host] = HostState()
        if st.in_flight:
            return now + HOLD_RETRY
        if st.next_allowed > now:
            return st.next_allowed
        st.in_flight = True
        return None

    def release(self, host: str, attempt: Attempt) -> None:
        """Apply the politeness rules to an extra request to ``host``: frees a host borrowed with
        :meth:`hold`; for a leased host (a same-host redirect hop) only spaces its next request."""
        st = self._hosts[host]
        after_attempt(self._pol, self._rate(host), st, attempt, self._rng)
        self._save_host(host, st)
        if host not in self._leases:
            st.in_flight = False
            if st.queued > 0 and not st.parked and host not in self._scheduled:
                self._schedule(host, st.next_allowed)

    def _record_robots(self, origin: str, got: RobotsOutcome | None, now: float) -> None:
        """Feed a robots.txt outcome to the policy and keep a usable answer with the frontier
        (polecat/frontier/robots_state.py): a restart or an adopting frontier applies it."""
        if got is None:
            return
        if got.error is not None:
            self._robots.record_failure(origin, now, got.error)
            return
        self._robots.record_response(origin, got.status, got.body, now, retry_after=got.retry_after)
        rec = encode_robots(got.status, now, got.body, self._cfg.robots.max_bytes)
        if rec is not None:
            self._db.txn.put(robots_key(origin), rec, db=self._db.robots)

    def robots_answer(self, origin: str) -> tuple[int, float, bytes] | None:
        """The stored robots.txt answer of ``origin``: status, fetch time, body; None if none."""
        raw = self._db.txn.get(robots_key(origin), db=self._db.robots)
        return decode_robots(raw) if raw is not None else None

    def next_allowed(self, host: str) -> float:
        st = self._hosts.get(host)
        return st.next_allowed if st is not None else 0.0

    # --- completing ------------------------------------------------------------------------------

    def complete(self, lease: Lease, result: Completion, now: float) -> None:
        """Record how a leased request ended; schedules the host's next request per the politeness rules."""
        host = lease.host
        st = self._hosts[host]
        self._leases.pop(host, None)
        st.in_flight = False
        if result.ip:
            st.ip = result.ip
        if lease.kind == "robots":
            self._record_robots(origin_of(lease.url), result.robots, now)
            decision = self._robots.lookup(origin_of(lease.url), now)
            if isinstance(decision, Ready):
                st.crawl_delay = decision.rules.crawl_delay or 0.0
        rate = self._rate(host)
        after_attempt(self._pol, rate, st, result.attempt, self._rng)
        if result.park:
            st.parked = True
        if st.parked and host not in self._parked:
            self._parked[host] = result.park or _park_reason(self._pol, st, result)
        if self._ipkeys.held_by(host) is not None:
            self._wake_ip_waiters(*self._ipkeys.release(host, result.attempt, interval(self._pol, rate, st)))
        if lease.kind == "page":
            self._complete_page(lease, st, result, now)
        else:
            self._save_host(host, st)
        if st.queued > 0 and not st.parked and host not in self._scheduled:
            self._schedule(host, st.next_allowed)

    def _complete_page(self, lease: Lease, st: HostState, result: Completion, now: float) -> None:
        if result.outcome == "retry" and lease.attempts + 1 < self._pol.max_url_attempts:
            # Re-queue behind the host's other URLs (halved importance) so one bad URL cannot pin a host.
            self._db.txn.delete(lease.key, db=self._db.queue)
            self._count_band(lease.key, -1)
            self._qseq += 1
            retry = QueuedUrl(lease.url, lease.depth, lease.importance / 2, lease.attempts + 1, lease.hops)
            key = queue_key(lease.host, retry.importance, retry.depth, self._qseq)
            self._db.txn.put(key, retry.encode(), db=self._db.queue)
            self._count_band(key, 1)
            self._save_host(lease.host, st)
            self._count_done("retried")
            return
        outcome = "failed" if result.outcome == "retry" else result.outcome
        prev_raw = self._db.txn.get(url_key(lease.url, lease.host), db=self._db.urls)
        rec = UrlRecord.decode(prev_raw) if prev_raw is not None else UrlRecord(
            lease.url, outcome, depth=lease.depth, importance=lease.importance)
        rec.outcome, rec.reason, rec.fetched_at = outcome, result.reason, result.attempt.started
        changed = result.changed and outcome == "fetched"
        if result.content_hash is not None:
            changed = changed and rec.content_hash != result.content_hash.hex()
            if rec.content_hash and changed:
                rec.changes += 1
            rec.content_hash = result.content_hash.hex()
        if outcome == "not_modified" or (outcome == "fetched" and result.reason.startswith("2")):
            raw_prior = self._db.txn.get(url_key(lease.url, lease.host), db=self._db.priors)
            prior = Prior.decode(raw_prior) if raw_prior is not None else None
            rec.history, rec.due = self._refresh.after_visit(lease.host, rec.history, result.attempt.started,
                                                             changed, st.next_allowed, prior)
        rec.etag = result.etag or rec.etag
        rec.last_modified = result.last_modified or rec.last_modified
        rec.fetches += 1
        st.fetched += 1
        self._finish(lease.host, st, lease.key, rec)

    def _finish(self, host: str, st: HostState, key: bytes, rec: UrlRecord) -> None:
        """Move a queued URL to done, atomically in the open transaction."""
        txn = self._db.txn
        if txn.delete(key, db=self._db.queue):
            st.queued -= 1
            self._queued -= 1
            self._count_band(key, -1)
        txn.put(url_key(rec.url, host), rec.encode(), db=self._db.urls)
        self._save_host(host, st)
        self._count_done(rec.outcome if rec.outcome != "skipped" else f"skipped:{rec.reason}")

    def _count_done(self, label: str) -> None:
        self._done[label] += 1
        self._done_total[label] += 1

    # --- slices: ownership and hand-over (polecat/frontier/handover.py) ------------------------------

    def set_owned(self, slices: Iterable[int], now: float) -> None:
        """Lease only hosts of ``slices`` (the ones the ring gives this member); the others keep their
        state here until :meth:`release_slices`. Every slice is owned until this is called."""
        self._fenced = frozenset(range(SLICES)) - check_slices(slices)
        for host, st in self._hosts.items():
            if slice_of(host) in self._fenced:
                self._scheduled.pop(host, None)
            elif st.queued > 0 and not st.in_flight and not st.parked and host not in self._scheduled:
                self._schedule(host, max(st.next_allowed, now))

    def export_slices(self, slices: Iterable[int]) -> SliceBundle:
        """Everything this frontier holds about ``slices`` (queues, host records, robots answers, URL
        records, seen entries, operator controls) as a :class:`SliceBundle`: a snapshot of the open
        transaction. URLs leased there stay queued, so a slice that moves for good is exported after
        its leases complete (:meth:`in_flight_in`)."""
        self._flush_hosts()
        return export_ranges(self._db.txn, self._db.sliced, check_slices(slices))

    def in_flight_in(self, slices: Iterable[int]) -> int:
        """Leases in flight on hosts of ``slices``."""
        ids = check_slices(slices)
        return sum(1 for host in self._leases if slice_of(host) in ids)

    def adopt(self, bundle: SliceBundle, now: float) -> AdoptReport:
        """Take over the slices of ``bundle``, merged with what is here. Each adopted host waits one full
        interval from ``now`` (the exporter's last request may have just started); a queued URL this
        frontier has already seen is not queued twice. Applies in the open transaction (durable at
        the next commit)."""
        txn, db = self._db.txn, self._db
        adopted: dict[str, HostState] = {}
        counts: Counter[str] = Counter()
        duplicates = seen_new = 0
        for table, key, value in bundle.records():
            if table == "ops":
                txn.put(key, value, db=db.ops)
                self._load_op(key, value)
            elif table == "robots":
                txn.put(key, value, db=db.robots)
                restore_robots(self._robots, key, value)
            elif table == "hosts":
                adopted[host_of_row(key)] = decode_host(value)
            elif table == "urls":
                txn.put(key, value, db=db.urls)
            elif table == "queue":
                host = host_of_queue_key(key)
                if self._seen.add_if_new(txn, url_key(QueuedUrl.decode(value).url, host)):
                    self._qseq += 1
                    new_key = requeue_key(key, self._qseq)
                    txn.put(new_key, value, db=db.queue)
                    self._count_band(new_key, 1)
                    counts[host] += 1
                else:
                    duplicates += 1
            elif table == "seen":
                seen_new += self._seen.add_if_new(txn, key)
            elif table == "priors":
                txn.put(key, value, db=db.priors)
            else:
                raise BundleError(f"slice bundle table {table!r} is unknown to this polecat")
        for host in adopted.keys() | counts.keys():
            self._adopt_host(host, adopted.get(host), counts[host], now)
        self._apply_refetches(now)
        self._db.pending += 1
        return AdoptReport(len(bundle.ids), len(adopted), sum(counts.values()), duplicates, seen_new)

    def _adopt_host(self, host: str, got: HostState | None, queued: int, now: float) -> None:
        st = self._hosts.get(host)
        if st is None:
            st = self._hosts[host] = HostState()
        if got is not None:
            st.next_allowed = max(st.next_allowed, got.next_allowed)
            st.rate_factor = min(st.rate_factor, got.rate_factor)
            st.crawl_delay = max(st.crawl_delay, got.crawl_delay)
            st.failures = max(st.failures, got.failures)
            st.fetched += got.fetched
            st.ip = st.ip or got.ip
        # The restart-spacing rule (politeness.py rule 2 across a hand-over).
        st.next_allowed = max(st.next_allowed, now + interval(self._pol, self._rate(host), st))
        st.queued += queued
        self._queued += queued
        self._save_host(host, st)
        if st.queued > 0 and not st.in_flight and not st.parked and host not in self._scheduled:
            self._schedule(host, st.next_allowed)

    def release_slices(self, slices: Iterable[int]) -> int:
        """Drop everything about ``slices`` from this frontier (after their new owner adopted them).
        FrontierError while a lease is in flight there. Returns the records deleted."""
        ids = check_slices(slices)
        busy = self.in_flight_in(ids)
        if busy:
            raise FrontierError(f"cannot release slices with {busy} leases in flight")
        for host in [h for h in self._hosts if slice_of(h) in ids]:
            st = self._hosts.pop(host)
            self._queued -= st.queued
            self._scheduled.pop(host, None)
            self._dirty.discard(host)
            self._parked.pop(host, None)
        self._recent.clear()
        self._bands = None
        self._db.pending += 1
        return delete_ranges(self._db.txn, self._db.sliced, ids)

    # --- operator controls -----------------------------------------------------------------------

    def set_throttle(self, pattern: str, rate: float) -> None:
        """Override the request rate of hosts matching ``pattern`` (persisted)."""
        self._throttle.set(pattern, rate)
        self._db.txn.put(op_key("throttle", pattern.lower()), repr(rate).encode(), db=self._db.ops)

    def block(self, pattern: str) -> int:
        """Block hosts matching ``pattern``: drop their queues (recorded done, reason ``blocked``) and
        refuse their URLs from now on (persisted). Returns the number of URLs dropped."""
        self._blocked.set(pattern, True)
        self._db.txn.put(op_key("block", pattern.lower()), b"", db=self._db.ops)
        dropped = 0
        for host, st in self._hosts.items():
            if st.queued and host in self._blocked:
                dropped += self._drop_queue(host, st)
        self._dropped_blocked += dropped
        return dropped

    def throttle_now(self, pattern: str, rate: float, now: float) -> None:
        """:meth:`set_throttle` for a running crawl: hosts it matches that wait for their next request
        wait at least one new interval from ``now``, so a slower rate applies from the next request."""
        self.set_throttle(pattern, rate)
        matcher: HostPatternMap[bool] = HostPatternMap([(pattern, True)])
        for host, st in self._hosts.items():
            if host in matcher and not st.in_flight:
                st.next_allowed = max(st.next_allowed, now + interval(self._pol, self._rate(host), st))
                self._save_host(host, st)
                if host in self._scheduled:
                    self._schedule(host, st.next_allowed)

    def set_paused(self, paused: bool) -> None:
        """Pause or resume leasing (persisted); see :attr:`paused`."""
        self.paused = paused
        if paused:
            self._db.txn.put(op_key("paused", ""), b"", db=self._db.ops)
        else:
            self._db.txn.delete(op_key("paused", ""), db=self._db.ops)

    def unthrottle(self, pattern: str) -> bool:
        """Remove a rate override (persisted); hosts it matched return to the default rate from their
        next request. False when no such override existed."""
        key = op_key("throttle", pattern.lower())
        self._throttle.remove(pattern)
        return bool(self._db.txn.delete(key, db=self._db.ops))

    def unblock(self, pattern: str) -> bool:
        """Lift a block (persisted): the hosts' URLs are accepted again. URLs dropped by the block stay
        done (``skipped:blocked``); add them again as seeds to fetch them. False when not blocked."""
        key = op_key("block", pattern.lower())
        self._blocked.remove(pattern)
        return bool(self._db.txn.delete(key, db=self._db.ops))

    def throttles(self) -> list[tuple[str, float]]:
        """Rate overrides in force, ``(pattern, req_per_s)``."""
        return sorted(self._throttle.items())

    def blocks(self) -> list[str]:
        """Block patterns in force."""
        return sorted(p for p, _ in self._blocked.items())

    def is_blocked(self, host: str) -> bool:
        return host in self._blocked

    def busiest(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` hosts with the longest queues, longest first."""
        queued = ((h, st.queued) for h, st in self._hosts.items() if st.queued > 0)
        return heapq.nlargest(n, queued, key=lambda hq: (hq[1], hq[0]))

    def host_rate(self, host: str) -> float:
        """The configured request rate of ``host`` (its throttle, else the default), before AIMD."""
        return self._rate(host)

    def _drop_queue(self, host: str, st: HostState) -> int:
        prefix = queue_prefix(host)
        txn = self._db.txn
        keys: list[tuple[bytes, str]] = []
        with txn.cursor(db=self._db.queue) as cur:
            if cur.set_range(prefix):
                for k, v in cur:
                    if not bytes(k).startswith(prefix):
                        break
                    keys.append((bytes(k), QueuedUrl.decode(v).url))
        lease = self._leases.get(host)
        in_flight_key = lease.key if lease is not None else None
        dropped = 0
        for key, url in keys:
            if key != in_flight_key:  # the in-flight URL is finished by its completion
                self._finish(host, st, key, UrlRecord(url, "skipped", "blocked"))
                dropped += 1
        self._scheduled.pop(host, None)
        return dropped

    # --- refresh ---------------------------------------------------------------------------------

    def requeue_due(self, now: float, limit: int = 100_000,
                    window: float | None = None) -> tuple[int, Freshness]:
        """Queue again (at most ``limit``) fetched URLs whose refresh is due at ``now``, with priority
        importance x staleness, each host's share kept for its new URLs over ``window`` seconds
        (polecat/frontier/refresh.py rules 7 and 8); returns how many, and the freshness SLO as the
        same pass saw it. One pass over the finished URLs (O(URLs done): a node calls it every
        ``refresh.scan_interval`` seconds, not per lease)."""
        txn, urls = self._db.txn, self._db.urls
        due: dict[str, list[tuple[float, bytes, UrlRecord]]] = {}
        fresh, found = Freshness(), 0
        with txn.cursor(db=urls) as cur:
            for key, raw in cur:
                rec = UrlRecord.decode(raw)
                if not rec.history:
                    continue
                host = host_key(rec.url)
                self._refresh.tally(fresh, host, rec.url, rec.history, rec.importance, now)
                if rec.due is not None and rec.due <= now and found < limit:
                    found += 1
                    priority = self._refresh.due_priority(host, rec.history, rec.importance, now)
                    due.setdefault(host, []).append((-1.0 if priority is None else priority, bytes(key), rec))
        queued = 0
        for host, items in due.items():
            st = self._hosts.get(host)
            gap = interval(self._pol, self._rate(host), st or HostState())
            slots = refresh_slots(self._cfg.refresh.refresh_share, window, gap, bool(st and st.queued))
            items.sort(key=lambda item: -item[0])
            for n, (priority, key, rec) in enumerate(items):
                refresh = priority >= 0 and host not in self._blocked
                if refresh and slots is not None and n >= slots:
                    break  # stays due: the next scan queues it
                rec.due = None  # queued (or no longer refreshed): the completion schedules the next visit
                txn.put(key, rec.encode(), db=urls)
                if refresh:
                    self._enqueue(rec.url, host, rec.depth, priority, now, new=False)
                    queued += 1
        return queued, fresh

    def set_prior(self, url: str, prior: Prior) -> None:
        """Keep what a sitemap said of ``url`` (lastmod, changefreq, priority) as its refresh prior
        (refresh rule 4), whether or not the URL is new."""
        self._db.txn.put(url_key(url), prior.encode(), db=self._db.priors)

    def freshness(self, now: float) -> Freshness:
        """The freshness SLO over the finished URLs (refresh rule 9)."""
        count = Freshness()
        for _, raw in self._db.txn.cursor(db=self._db.urls):
            rec = UrlRecord.decode(raw)
            self._refresh.tally(count, host_key(rec.url), rec.url, rec.history, rec.importance, now)
        return count

    # --- observation -----------------------------------------------------------------------------

    def url_record(self, url: str) -> UrlRecord | None:
        raw = self._db.txn.get(url_key(url), db=self._db.urls)
        return UrlRecord.decode(raw) if raw is not None else None

    def host_state(self, host: str) -> HostState | None:
        return self._hosts.get(host)

    def parked_hosts(self) -> dict[str, str]:
        """Hosts parked in this run, with the reason (reported by the node)."""
        return dict(self._parked)

    def queue_bands(self) -> dict[str, int]:
        """Queued URLs by priority band (:data:`PRIORITY_BANDS`). The first call counts the queue table."""
        if self._bands is None:
            bands: Counter[str] = Counter()
            with self._db.txn.cursor(db=self._db.queue) as cur:
                for key in cur.iternext(keys=True, values=False):
                    bands[priority_band(bytes(key))] += 1
            self._bands = bands
        return {name: self._bands[name] for name in (*(n for n, _ in PRIORITY_BANDS), "low")}

    def _count_band(self, key: bytes, delta: int) -> None:
        if self._bands is not None:
            self._bands[priority_band(key)] += delta

    def quarantined_hosts(self) -> int:
        """Hosts backing off after failures (not parked)."""
        return sum(1 for st in self._hosts.values() if st.failures > 0 and not st.parked)

    @property
    def queued(self) -> int:
        return self._queued

    def stats(self, now: float) -> FrontierStats:
        ready = backoff = 0
        next_at = math.inf
        for h, at in self._scheduled.items():
            st = self._hosts[h]
            if st.parked:
                continue
            if at <= now:
                ready += 1
            else:
                next_at = min(next_at, at)
                backoff += bool(st.failures or st.strikes)
        parked = len(self._parked)
        return FrontierStats(
            hosts=len(self._hosts), hosts_ready=ready, hosts_waiting=len(self._scheduled) - ready,
            hosts_parked=parked, queued=self._queued, in_flight=len(self._leases),
            accepted=self._accepted, seen=self._seen_count, rejected=tuple(sorted(self._rejected.items())),
            done=tuple(sorted(self._done.items())), dropped_blocked=self._dropped_blocked,
            done_total=tuple(sorted(self._done_total.items())), hosts_backoff=backoff,
            next_ready_at=next_at if next_at != math.inf else 0.0,
        )


def _park_reason(pol: PolitenessConfig, st: HostState, result: Completion) -> str:
    detail = result.detail or result.reason
    if gave_up(pol, st):
        return f"gave up after {st.strikes} attempts ({detail})"
    return f"{st.failures} consecutive failures ({detail})"
