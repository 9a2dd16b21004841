"""The frontier's state and the bookkeeping every part of it shares (polecat/frontier/frontier.py).

:class:`FrontierState` holds the in-memory index of the frontier (host records, the ready heap, leases,
counters) over its LMDB tables, and the few operations every part uses: scheduling a host, saving a
host record, queueing and finishing a URL, committing. The public behaviour is split by job:
:mod:`polecat.frontier.frontier` (adding, leasing, completing), :mod:`polecat.frontier.controls`
(operator controls), :mod:`polecat.frontier.handover` (slices moving between frontiers) and
:mod:`polecat.frontier.observe` (reading it); :class:`~polecat.frontier.frontier.Frontier` is all four.
"""

from __future__ import annotations

import heapq
import json
import random
from collections import Counter

from polecat.config import Config
from polecat.dedup.seen import SeenSet
from polecat.frontier import refetch
from polecat.frontier.budgets import PageBudget
from polecat.frontier.ipkeys import IpKeys
from polecat.frontier.keys import (
    host_of_row,
    host_row,
    op_key,
    parse_op_key,
    priority_band,
    queue_key,
    url_key,
    url_key_at,
)
from polecat.frontier.politeness import HostState, wait_one_interval
from polecat.frontier.records import (
    Lease,
    QueuedUrl,
    UrlRecord,
    decode_host,
    encode_host,
)
from polecat.frontier.refresh import RefreshPolicy
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.routing import Routing
from polecat.frontier.scope import ScopeFilter
from polecat.frontier.slices import slice_of
from polecat.frontier.tables import FrontierTables
from polecat.frontier.traps import ShapeBudget, TrapCounts
from polecat.hosts import HostPatternMap, host_key
from polecat.writes import Delete, Put, Write


class FrontierState:
    """Fields and shared bookkeeping of a frontier (see the module docstring)."""

    def __init__(self, db: FrontierTables, cfg: Config, robots: RobotsPolicy, seen: SeenSet,
                 rng: random.Random | None) -> None:
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
        self._done_total: Counter[str] = Counter(json.loads(db.get("meta", b"done") or b"{}"))
        self._throttle: HostPatternMap[float] = HostPatternMap()
        self._blocked: HostPatternMap[bool] = HostPatternMap()
        self._scope = ScopeFilter(cfg.scope, ())
        self._refresh = RefreshPolicy(cfg.refresh)
        self._bands: Counter[str] | None = None
        """Queued URLs by priority band, counted once asked for (:meth:`queue_bands`), then kept."""
        self.paused = False
        """Set by the operator: the node leases nothing while it is (persisted)."""
        self._qseq = int(db.get("meta", b"qseq") or b"0")
        self._refetch: list[tuple[bytes, str]] = []
        self.budget = PageBudget(cfg.scope.max_pages)
        """This run's page budget, robots.txt reservations included (polecat/frontier/budgets.py)."""
        self._shapes = ShapeBudget(cfg.scope.max_urls_per_shape)
        self.traps = TrapCounts()
        """Per-host counts of trap rules that acted (polecat/frontier/traps.py), persisted in ``ops``."""
        self._traps_dirty: set[str] = set()
        self._routing: Routing | None = None
        """Who judges which discovered URL (:meth:`Frontier.admit`); None: this frontier judges all."""
        self._has_priors = db.count("priors") > 0
        """Whether any sitemap prior is kept: a completion looks its URL's up only then."""
        self._fenced: frozenset[int] = frozenset()
        """Slices whose hosts are not leased (another member owns them; :meth:`set_owned`)."""

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
        elif kind == "traps":
            self.traps.load(arg, raw)
        elif kind == refetch.KIND:
            self._refetch.append((key, raw.decode()))

    def _refetch_writes(self, now: float, adopted_urls: set[bytes] | None = None) -> list[Write]:
        """Queue again the URLs whose stored copy was lost (polecat/frontier/refetch.py, rule 2).
        ``adopted_urls``: URL records an adoption is writing in the same decision (writes.py rule 3)."""
        out: list[Write] = []
        for key, url in self._refetch:
            host = host_key(url)
            ukey = url_key(url, host)
            if ukey in (adopted_urls or ()) or self._db.get("urls", ukey) is not None:
                out.append(Delete("urls", ukey))  # else still queued: fetched anyway
                self._enqueue(url, host, 0, 1.0, now, out)
            out.append(Delete("ops", key))
        self._refetch.clear()
        return out

    def _load_hosts(self, now: float) -> None:
        """Rebuild the in-memory heap from the host table. A request may have been in flight when the
        previous process died, uncommitted: every host therefore waits one interval from ``now``, so a
        restart never sends a burst (the dead process's requests all started before ``now``)."""
        for key, raw in self._db.items("hosts"):
            host = host_of_row(key)
            st = decode_host(raw)
            wait_one_interval(self._pol, self._rate(host), st, now)
            self._hosts[host] = st
            self._queued += st.queued
            if st.queued > 0:
                self._schedule(host, st.next_allowed)

    def _save_host(self, host: str, st: HostState) -> None:
        # Host records are written once per commit, however often they changed in between.
        self._dirty.add(host)
        self._db.pending += 1

    def _host_writes(self) -> list[Write]:
        """The host records changed since the last commit (kept in memory until then)."""
        hosts = self._hosts
        out: list[Write] = [Put("hosts", host_row(host), encode_host(hosts[host])) for host in self._dirty]
        self._dirty.clear()
        return out

    def commit(self) -> int:
        """Checkpoint: make every change so far durable. The node calls it after flushing the store."""
        self._db.apply(self.prepare_commit())
        return self._db.commit()

    def prepare_commit(self) -> list[Write]:
        """The writes of what is kept in memory between commits (host records, trap counts, counters), so
        that a commit of the transaction, once they are applied, holds every change so far: :meth:`commit`
        does both; the node's periodic checkpoint commits on the writer thread instead
        (polecat/frontier/db.py rule 1)."""
        out = self._host_writes()
        out.extend(Put("ops", op_key("traps", host), self.traps.encode(host)) for host in self._traps_dirty)
        self._traps_dirty.clear()
        out.append(Put("meta", b"qseq", str(self._qseq).encode()))
        out.append(Put("meta", b"done", json.dumps(self._done_total).encode()))
        return out

    @property
    def pending_ops(self) -> int:
        return self._db.pending

    def next_due(self) -> float | None:
        """No host is due before this time (None: none is scheduled). It may be earlier than the first
        host :meth:`lease` would hand out (an entry of a host rescheduled since stays in the heap until
        popped), never later: a caller that sleeps until then misses no host."""
        return self._heap[0][0] if self._heap else None

    def _enqueue(self, url: str, host: str, depth: int, importance: float, now: float, out: list[Write],
                 hops: int = 0, *, new: bool = True) -> None:
        """Queue ``url``: its write goes to ``out``."""
        st = self._hosts.get(host)
        if st is None:
            st = self._hosts[host] = HostState()
        self._qseq += 1
        self._shapes.count(host, url)
        key = queue_key(host, importance, depth, self._qseq)
        out.append(Put("queue", key, QueuedUrl(url, depth, importance, 0, hops).encode()))
        self._count_band(key, 1)
        st.queued += 1
        self._queued += 1
        self._accepted += new
        self._save_host(host, st)
        if not st.in_flight and not st.parked and host not in self._scheduled:
            self._schedule(host, max(st.next_allowed, now))

    def count_trap(self, host: str, reason: str) -> None:
        """A trap rule acted on ``host`` (kept with the frontier at the next commit)."""
        self.traps.add(host, reason)
        self._traps_dirty.add(host)

    def _schedule(self, host: str, at: float) -> None:
        if self._fenced and slice_of(host) in self._fenced:
            return
        self._scheduled[host] = at
        heapq.heappush(self._heap, (at, host))

    def _rate(self, host: str) -> float:
        return self._throttle.get(host) or self._pol.rate

    def _finish_writes(self, host: str, st: HostState, key: bytes, rec: UrlRecord,
                       ukey: bytes | None = None) -> list[Write]:
        """The writes that move a queued URL to done (one transaction: the invariant of frontier.py);
        ``ukey``: its ``urls`` key, when the caller has it."""
        if self._db.get("queue", key) is not None:
            st.queued -= 1
            self._queued -= 1
            self._count_band(key, -1)
        self._save_host(host, st)
        self._count_done(rec.outcome if rec.outcome != "skipped" else f"skipped:{rec.reason}")
        return [Delete("queue", key), Put("urls", ukey or url_key_at(key, rec.url), rec.encode())]

    def _count_done(self, label: str) -> None:
        self._done[label] += 1
        self._done_total[label] += 1

    def _count_band(self, key: bytes, delta: int) -> None:
        if self._bands is not None:
            self._bands[priority_band(key)] += delta
