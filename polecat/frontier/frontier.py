"""The frontier: what is fetched next, when, and what became of every accepted URL.

It is a synchronous object driven by the node on the event-loop thread: ``add`` URLs, ``lease`` the next
request (or learn how long to wait), ``complete`` the lease with what happened. Every call that changes
state is a decision: it returns the LMDB writes that record it and the node applies them
(polecat/writes.py, its rules 1-4). Time comes in as
``now`` (wall-clock seconds, so next-allowed times survive restarts). State lives in LMDB (per-host queues,
host records with next-allowed times, the seen-set, finished-URL records, operator controls; all keyed
slice-first, see polecat/frontier/keys.py) through one
batched write transaction; only the ready heap and in-flight leases are rebuilt in memory on open.

The class is split by job: this module adds, leases and completes; polecat/frontier/state.py holds the
fields and shared bookkeeping, controls.py the operator controls, handover.py the slice hand-over,
hops.py the robots.txt redirect hops and observe.py the read-only views.

Invariant: an accepted URL is queued (its key is in ``queue``), in flight (leased, key still in ``queue``),
or done (key deleted and a record in ``urls``, in the same transaction). A crash therefore replays the
in-flight and uncommitted work and drops nothing.
"""

from __future__ import annotations

import heapq
import math
import random
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice

from polecat.config import Config, PolitenessConfig
from polecat.dedup.seen import SeenSet
from polecat.frontier.budgets import admit_reason
from polecat.frontier.controls import OperatorControls
from polecat.frontier.handover import SliceHandover
from polecat.frontier.hops import RobotsHops
from polecat.frontier.keys import (
    op_key,
    queue_key,
    queue_prefix,
    robots_key,
    url_key,
    url_key_at,
)
from polecat.frontier.observe import FrontierObservation
from polecat.frontier.politeness import HostState, after_attempt, gave_up, interval
from polecat.frontier.records import (
    Completion,
    Idle,
    Lease,
    QueuedUrl,
    RobotsOutcome,
    UrlRecord,
    Wait,
    origin_of,
)
from polecat.frontier.refresh import Freshness, History, Prior, refresh_slots
from polecat.frontier.robots import Closed, Fetch, Ready, RobotsPolicy
from polecat.frontier.robots_state import decode_robots, encode_robots, restore_robots
from polecat.frontier.routing import Admission, Routing
from polecat.frontier.tables import FrontierTables
from polecat.frontier.traps import url_trap
from polecat.hosts import host_key
from polecat.writes import Decided, Delete, Put, Write

ROBOTS_SKIPS_PER_LEASE = 256
"""Robots-disallowed URLs retired per lease call for one host before yielding to other hosts."""

RECENT_URLS = 131_072
"""Bound of the memo of URLs already in the seen-set: sites link the same URLs (navigation, footers)
from every page, and a memo hit skips fingerprinting, the Bloom filter and LMDB (~10 MB at most)."""

ACCEPTED = "accepted"
SEEN = "seen"


class Frontier(SliceHandover, OperatorControls, FrontierObservation, RobotsHops):
    """Per-host queues, the ready heap and the done records; see the module docstring."""

    def __init__(self, db: FrontierTables, cfg: Config, robots: RobotsPolicy, seen: SeenSet, now: float,
                 *, rng: random.Random | None = None) -> None:
        super().__init__(db, cfg, robots, seen, rng)
        for key, raw in db.items("ops"):
            self._load_op(key, raw)
        for key, raw in db.items("robots"):
            restore_robots(robots, key, raw)
        self._load_hosts(now)
        opening = self._refetch_writes(now)
        for pattern, rate in self._pol.throttle:
            opening += self.set_throttle(pattern, rate)
        for pattern in cfg.scope.block:
            opening += self.block(pattern).writes
        db.apply(opening)  # writes.py rule 4

    # --- adding URLs -----------------------------------------------------------------------------

    def add_seed(self, url: str, now: float, importance: float = 1.0) -> Decided[str]:
        """Queue a canonical seed URL; its host joins the crawl scope (persisted). Answers the decision."""
        host = host_key(url)
        out = self.add_scope_host(host)
        return self._add(url, host, 0, importance, now, out, seed=True)

    def add_scope_host(self, host: str) -> list[Write]:
        """Let ``host`` into the crawl scope like a seed's host (persisted) without queueing anything:
        a member of a multi-process crawl learns every seed host, whichever member queues the seed."""
        self._scope.add_seed_host(host)
        return [Put("ops", op_key("seedhost", host), b"")]

    def add(self, url: str, depth: int, importance: float, now: float, *, hops: int = 0) -> Decided[str]:
        """Queue a canonical discovered URL if it is in scope and new; answers ``"accepted"``,
        ``"seen"`` or the reason it was refused. ``hops``: redirects followed to reach it."""
        return self._add(url, host_key(url), depth, importance, now, [], seed=False, hops=hops)

    def set_routing(self, routing: Routing | None) -> None:
        """Judge only the URLs ``routing`` says this frontier owns (frontier/routing.py); None: all."""
        self._routing = routing

    def owns(self, url: str) -> bool:
        """Whether this frontier judges the canonical ``url`` (routing rule 1)."""
        return self._routing is None or self._routing.owns(url)

    def admit(self, urls: Iterable[str], depth: int, importance: float, now: float, *,
              hops: int = 0) -> Decided[Admission]:
        """Route discovered canonical URLs before dedup (polecat/frontier/routing.py): the owned ones are
        added (seen-set test, queue), the others come back per owner, unmarked. ``hops``: redirects
        followed to reach them (a redirect target)."""
        routing = self._routing
        mine: Iterable[str] = urls
        outbox: dict[str, list[str]] = {}
        if routing is not None and not routing.single:
            mine, outbox = routing.split(urls)
        if hops:
            out: list[Write] = []
            accepted = sum(self._add(u, host_key(u), depth, importance, now, out, seed=False, hops=hops).value
                           == ACCEPTED for u in dict.fromkeys(mine))
            return Decided(Admission(accepted, outbox), out)
        added = self.add_many(mine, depth, importance, now)
        return Decided(Admission(added.value, outbox), added.writes)

    def add_many(self, urls: Iterable[str], depth: int, importance: float, now: float) -> Decided[int]:
        """Add the outlinks of one page in one batch (one vectorised Bloom pass); answers how many were
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
        out: list[Write] = []
        if not candidates:
            return Decided(0, out)
        keys = [url_key(u, h) for u, h in candidates]
        fresh = self._seen.mark_many(self._db.getter("seen"), keys)
        accepted = 0
        if len(recent) + len(candidates) > RECENT_URLS:
            recent.clear()
        for (url, host), key, new in zip(candidates, keys, fresh, strict=True):
            recent[url] = None
            if new:
                out.append(Put("seen", key, b""))
                self._enqueue(url, host, depth, importance, now, out)
                accepted += 1
        self._seen_count += len(candidates) - accepted
        return Decided(accepted, out)

    def _add(self, url: str, host: str, depth: int, importance: float, now: float, out: list[Write], *,
             seed: bool, hops: int = 0) -> Decided[str]:
        """Add one URL; its writes are appended to ``out``, which comes back in the decision."""
        reason = self._refuse(url, host, depth, seed)
        if reason is not None:
            self._rejected[reason] += 1
            return Decided(reason, out)
        key = url_key(url, host)
        if not self._seen.mark(self._db.getter("seen"), key):
            self._seen_count += 1
            return Decided(SEEN, out)
        out.append(Put("seen", key, b""))
        self._enqueue(url, host, depth, importance, now, out, hops)
        return Decided(ACCEPTED, out)

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
                reason = url_trap(url) or ("trap:shape" if self._shapes.refuses(host, url) else None)
                if reason is not None:
                    self.count_trap(host, reason)
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

    def lease(self, now: float) -> Decided[Lease | Wait | Idle]:
        """The next request to make, or how long nothing is ready. Never returns two leases for one host
        (or, with key_by_ip, one IP) at once, nor one before the host's next-allowed time. The writes
        retire the robots-disallowed URLs it skipped on the way."""
        heap = self._heap
        out: list[Write] = []
        while heap:
            at, host = heap[0]
            if self._scheduled.get(host) != at:
                heapq.heappop(heap)
                continue
            if at > now:
                return Decided(Wait(at), out)
            heapq.heappop(heap)
            del self._scheduled[host]
            st = self._hosts[host]
            if st.parked or st.in_flight or st.queued <= 0:
                continue
            if st.next_allowed > now:  # spaced again after it was scheduled: a robots hop held it (rule 8)
                self._schedule(host, st.next_allowed)
                continue
            if self._pol.key_by_ip and st.ip and not self._ip_ready(host, st.ip, now):
                continue
            before = len(out)
            got = self._lease_from(host, st, now, out)
            if got is None and len(out) > before and self._scheduled.get(host) == now:
                # Its skips ran out (ROBOTS_SKIPS_PER_LEASE): its retired URLs stay in the table until
                # these writes are applied, so it is not read again in this call (writes.py rule 3).
                return Decided(Wait(now), out)
            if got is not None:
                self.budget.charge(got.kind, host)
                self._leases[host] = got
                st.in_flight = True
                if self._pol.key_by_ip and st.ip:
                    self._ipkeys.take(host, st.ip)
                return Decided(got, out)
        return Decided(Wait(None) if self._leases else Idle(), out)

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

    def _lease_from(self, host: str, st: HostState, now: float, out: list[Write]) -> Lease | None:
        """First allowed URL of ``host`` as a lease (or a robots.txt lease); None to skip the host now.
        The robots-disallowed URLs before it are retired: their writes go to ``out``."""
        skipped = 0
        # The retired keys are deleted only when ``out`` is applied: the range reads on past them.
        for key, raw in islice(self._db.items("queue", queue_prefix(host)), ROBOTS_SKIPS_PER_LEASE):
            q = QueuedUrl.decode(raw)
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
                prev = self.url_record(q.url, url_key_at(key, q.url))
                return Lease(host, q.url, "page", q.depth, q.importance, q.attempts, key,
                             prev.etag if prev else None, prev.last_modified if prev else None,
                             not_before=st.next_allowed, hops=q.hops)
            out += self._finish_writes(host, st, key, UrlRecord(q.url, "skipped", "robots"))
            skipped += 1
        if skipped == ROBOTS_SKIPS_PER_LEASE:
            self._schedule(host, now)
        else:
            self._queued -= st.queued  # repair a count that disagrees with the table
            st.queued = 0
            self._save_host(host, st)
        return None

    # --- robots.txt answers ---------------------------------------------------------------------

    def _record_robots(self, origin: str, got: RobotsOutcome | None, now: float) -> list[Write]:
        """Feed a robots.txt outcome to the policy and keep a usable answer with the frontier
        (polecat/frontier/robots_state.py): a restart or an adopting frontier applies it."""
        if got is None:
            return []
        if got.error is not None:
            self._robots.record_failure(origin, now, got.error)
            return []
        self._robots.record_response(origin, got.status, got.body, now, retry_after=got.retry_after)
        rec = encode_robots(got.status, now, got.body, self._cfg.robots.max_bytes)
        return [] if rec is None else [Put("robots", robots_key(origin), rec)]

    def robots_answer(self, origin: str) -> tuple[int, float, bytes] | None:
        """The stored robots.txt answer of ``origin``: status, fetch time, body; None if none."""
        raw = self._db.get("robots", robots_key(origin))
        return decode_robots(raw) if raw is not None else None

    # --- completing ------------------------------------------------------------------------------

    def complete(self, lease: Lease, result: Completion, now: float) -> list[Write]:
        """Decide how a leased request ended: schedules the host's next request per the politeness rules
        and returns the writes that record it (polecat/writes.py; the caller applies them
        with :meth:`FrontierDB.apply` before the frontier's next call)."""
        host = lease.host
        st = self._hosts[host]
        self._leases.pop(host, None)
        st.in_flight = False
        if result.ip:
            st.ip = result.ip
        writes: list[Write] = []
        if lease.kind == "robots":
            writes = self._record_robots(origin_of(lease.url), result.robots, now)
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
            writes = self._complete_page(lease, st, result)
        else:
            self._save_host(host, st)
        if st.queued > 0 and not st.parked and host not in self._scheduled:
            self._schedule(host, st.next_allowed)
        return writes

    def _complete_page(self, lease: Lease, st: HostState, result: Completion) -> list[Write]:
        if result.outcome == "retry" and lease.attempts + 1 < self._pol.max_url_attempts:
            # Re-queue behind the host's other URLs (halved importance) so one bad URL cannot pin a host.
            self._count_band(lease.key, -1)
            self._qseq += 1
            retry = QueuedUrl(lease.url, lease.depth, lease.importance / 2, lease.attempts + 1, lease.hops)
            key = queue_key(lease.host, retry.importance, retry.depth, self._qseq)
            self._count_band(key, 1)
            self._save_host(lease.host, st)
            self._count_done("retried")
            return [Delete("queue", lease.key), Put("queue", key, retry.encode())]
        outcome = "failed" if result.outcome == "retry" else result.outcome
        ukey = url_key_at(lease.key, lease.url)  # one fingerprint, no host hashing, for every key below
        prev_raw = self._db.get("urls", ukey)
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
            raw_prior = self._db.get("priors", ukey) if self._has_priors else None
            prior = Prior.decode(raw_prior) if raw_prior is not None else None
            rec.history, rec.due = self._refresh.after_visit(lease.host, rec.history, result.attempt.started,
                                                             changed, st.next_allowed, prior)
        rec.etag = result.etag or rec.etag
        rec.last_modified = result.last_modified or rec.last_modified
        rec.fetches += 1
        st.fetched += 1
        return self._finish_writes(lease.host, st, lease.key, rec, ukey)

    # --- refresh ---------------------------------------------------------------------------------

    def requeue_due(self, now: float, limit: int = 100_000,
                    window: float | None = None) -> Decided[tuple[int, Freshness]]:
        """Queue again (at most ``limit``) fetched URLs whose refresh is due at ``now``: within each
        host's refresh budget, by priority importance x staleness, its share kept for other URLs over
        ``window`` seconds (polecat/frontier/refresh.py rules 3, 7 and 8). Answers how many, and the
        freshness SLO as the same pass saw it. One pass over the finished URLs (O(URLs done): a node
        calls it every ``refresh.scan_interval`` seconds, not per lease)."""
        hosts: dict[str, HostScan] = {}
        fresh, found = Freshness(), 0
        for key, raw in self._db.items("urls"):
            rec = UrlRecord.decode(raw)
            if not rec.history:
                continue
            host = host_key(rec.url)
            h = History.from_hex(rec.history)
            self._refresh.tally(fresh, host, rec.url, h, rec.importance, now)
            scan = hosts.get(host)
            if scan is None:
                scan = hosts[host] = HostScan()
            index = scan.add(self._refresh.rate(h, None, h.last_visit), rec.importance)
            if rec.due is not None and rec.due <= now and found < limit:
                found += 1
                scan.due.append((index, h, key, rec))
        out: list[Write] = []
        queued = sum(self._requeue_host(host, scan, now, window, out)
                     for host, scan in hosts.items() if scan.due)
        return Decided((queued, fresh), out)

    def _requeue_host(self, host: str, scan: HostScan, now: float, window: float | None,
                      out: list[Write]) -> int:
        st = self._hosts.get(host)
        gap = interval(self._pol, self._rate(host), st or HostState())
        waiting = bool(st and st.queued)
        share = self._cfg.refresh.refresh_share
        plan = self._refresh.budget_plan(host, scan.rates, scan.weights, (share if waiting else 1.0) / gap)
        slots = refresh_slots(share, window, gap, waiting)
        items: list[tuple[float, bytes, UrlRecord]] = []
        for index, h, key, rec in scan.due:
            every = None if plan is None else float(plan[index])
            if every is not None and h.last_visit + every > now:
                continue  # the host's budget spaces this URL further (rule 3): it stays due
            priority = self._refresh.due_priority(host, h, rec.importance, now, every)
            items.append((-1.0 if priority is None else priority, key, rec))
        items.sort(key=lambda item: -item[0])
        queued = 0
        for n, (priority, key, rec) in enumerate(items):
            refresh = priority >= 0 and host not in self._blocked
            if refresh and slots is not None and n >= slots:
                break  # stays due: the next scan queues it
            rec.due = None  # queued (or no longer refreshed): the completion schedules the next visit
            out.append(Put("urls", key, rec.encode()))
            if refresh:
                self._enqueue(rec.url, host, rec.depth, priority, now, out, new=False)
                queued += 1
        return queued

    def set_prior(self, url: str, prior: Prior) -> list[Write]:
        """Keep what a sitemap said of ``url`` (lastmod, changefreq, priority) as its refresh prior
        (refresh rule 4), whether or not the URL is new."""
        self._has_priors = True
        return [Put("priors", url_key(url), prior.encode())]

    def freshness(self, now: float) -> Freshness:
        """The freshness SLO over the finished URLs (refresh rule 9)."""
        count = Freshness()
        for _, raw in self._db.items("urls"):
            rec = UrlRecord.decode(raw)
            h = History.from_hex(rec.history)
            self._refresh.tally(count, host_key(rec.url), rec.url, h, rec.importance, now)
        return count


def _park_reason(pol: PolitenessConfig, st: HostState, result: Completion) -> str:
    detail = result.detail or result.reason
    if gave_up(pol, st):
        return f"gave up after {st.strikes} attempts ({detail})"
    return f"{st.failures} consecutive failures ({detail})"


@dataclass(slots=True)
class HostScan:
    """One host's finished URLs as a refresh scan saw them: believed change rates and importances (its
    budget plan, refresh rule 3) and the URLs found due, each with its index in those arrays."""

    rates: array[float] = field(default_factory=lambda: array("d"))
    weights: array[float] = field(default_factory=lambda: array("d"))
    due: list[tuple[int, History, bytes, UrlRecord]] = field(default_factory=list)

    def add(self, rate: float, weight: float) -> int:
        self.rates.append(rate)
        self.weights.append(weight)
        return len(self.rates) - 1
