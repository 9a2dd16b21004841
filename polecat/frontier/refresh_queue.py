"""Refresh in the frontier: each fetched URL's next due time, the scan that queues due URLs again, the
freshness figures and the sitemap and feed priors they start from (with the first response's
Last-Modified, refresh rule 4).

The rules are polecat/frontier/refresh.py's (the :class:`RefreshPolicy` decides; this part applies its
answers to the frontier's records): a page fetched (2xx) or not modified gets a history and a due time
(rules 1-2, 4), the scan queues due URLs within each host's refresh budget and by priority (rules 3, 7,
8), and the freshness SLO (rule 9) is counted as records change. Both read the indexes of
polecat/frontier/refresh_index.py, kept with every write of a URL record, never every finished URL.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from polecat.config import RefreshConfig
from polecat.frontier.host_table import HostTable
from polecat.frontier.keys import url_key
from polecat.frontier.politeness import HostState, interval
from polecat.frontier.records import UrlRecord
from polecat.frontier.refresh import Freshness, History, Prior, RefreshPolicy, refresh_slots
from polecat.frontier.refresh_index import RefreshIndex
from polecat.frontier.slices import prefix_slice
from polecat.hosts import host_key
from polecat.parse.feed import parse_http_date
from polecat.writes import Decided, Put, Write


class RefreshQueue:
    """Due times, re-queueing and freshness over the ``urls`` table (see the module docstring)."""

    def __init__(self, table: HostTable, cfg: RefreshConfig) -> None:
        self._table = table
        self._db = table.db
        self._cfg = cfg
        self._policy = RefreshPolicy(cfg)
        self.index = RefreshIndex(self._db, self._policy)
        """The due index and the freshness counters (polecat/frontier/refresh_index.py)."""
        table.url_written = self.url_written
        self.has_priors = self._db.count("priors") > 0
        """Whether any sitemap prior is kept: a completion looks its URL's up only then."""

    def after_visit(self, host: str, rec: UrlRecord, ukey: bytes, changed: bool, next_allowed: float,
                    last_modified: str | None = None) -> None:
        """Give ``rec``, a page of ``host`` just fetched (or not modified) at ``rec.fetched_at``, its
        history and next due time (refresh rules 1-2, from its prior by rule 4). ``ukey``: its key;
        ``last_modified``: the response's header, if it had one."""
        raw = self._db.get("priors", ukey) if self.has_priors else None
        prior = Prior.decode(raw) if raw is not None else None
        rec.history, rec.due = self._policy.after_visit(host, rec.history, rec.fetched_at, changed,
                                                        next_allowed, prior, parse_http_date(last_modified))

    def set_prior(self, url: str, prior: Prior) -> list[Write]:
        """Keep what a sitemap or a feed said of ``url`` (lastmod, changefreq, priority, item gap) as its
        refresh prior (refresh rule 4), whether or not the URL is new."""
        self.has_priors = True
        return [Put("priors", url_key(url), prior.encode())]

    def requeue_due(self, now: float, limit: int = 100_000,
                    window: float | None = None) -> Decided[tuple[int, Freshness]]:
        """Queue again (at most ``limit``, the earliest due first) fetched URLs whose refresh is due at
        ``now``: within each host's refresh budget, by priority importance x staleness, its share kept for
        other URLs over ``window`` seconds (refresh rules 3, 7 and 8). Answers how many, and the
        freshness SLO at ``now``. Reads the due rows of the index and the ``refresh`` rows of their hosts
        (refresh_index.py rules 1-2), not every finished URL."""
        index, urls = self.index, self._db.getter("urls")
        found: dict[str, list[tuple[bytes, UrlRecord]]] = {}
        leaving = self._table.leaving
        for ukey in index.due(now, limit):
            if leaving and prefix_slice(ukey) in leaving:
                continue  # its release deletes it (handover rule 7)
            raw = urls(ukey)
            assert raw is not None, "a due row outlived its URL record (refresh_index.py rule 4)"
            rec = UrlRecord.decode(raw)
            found.setdefault(host_key(rec.url), []).append((ukey, rec))
        out: list[Write] = []
        queued = 0
        for host, due in found.items():
            scan = HostScan()
            at: dict[bytes, int] = {}
            for ukey, row in index.host_rows(host):
                at[ukey] = scan.add(row.rate, row.weight)
            # In key order, as a pass over the ``urls`` table met them: equal priorities keep that order.
            scan.due = [(at[ukey], History.from_hex(rec.history), ukey, rec) for ukey, rec in sorted(due)]
            queued += self._requeue_host(host, scan, now, window, out)
        return Decided((queued, index.freshness(now)), out)

    def _requeue_host(self, host: str, scan: HostScan, now: float, window: float | None,
                      out: list[Write]) -> int:
        table = self._table
        st = table.peek(host)
        gap = interval(table.pol, table.rate(host), st or HostState())
        waiting = bool(st and st.queued)
        share = self._cfg.refresh_share
        plan = self._policy.budget_plan(host, scan.rates, scan.weights, (share if waiting else 1.0) / gap)
        slots = refresh_slots(share, window, gap, waiting)
        items: list[tuple[float, bytes, UrlRecord]] = []
        for index, h, key, rec in scan.due:
            every = None if plan is None else float(plan[index])
            if every is not None and h.last_visit + every > now:
                continue  # the host's budget spaces this URL further (rule 3): it stays due
            priority = self._policy.due_priority(host, h, rec.importance, now, every)
            items.append((-1.0 if priority is None else priority, key, rec))
        items.sort(key=lambda item: -item[0])
        queued = 0
        for n, (priority, key, rec) in enumerate(items):
            refresh = priority >= 0 and host not in table.blocked
            if refresh and slots is not None and n >= slots:
                break  # stays due: the next scan queues it
            rec.due = None  # queued (or no longer refreshed): the completion schedules the next visit
            out.append(Put("urls", key, rec.encode()))
            self.index.update(host, key, rec, out)
            if refresh:
                table.enqueue(rec.url, host, rec.depth, priority, now, out, new=False)
                queued += 1
        return queued

    def freshness(self, now: float) -> Freshness:
        """The freshness SLO over the finished URLs (refresh rule 9), from the counters kept
        (refresh_index.py rule 3)."""
        return self.index.freshness(now)

    def url_written(self, host: str, ukey: bytes, rec: UrlRecord | None, out: list[Write]) -> None:
        """The URL record ``ukey`` of ``host`` is written as ``rec`` (None: deleted) by a decision whose
        writes go to ``out``: its index rows follow (refresh_index.py rule 4)."""
        self.index.update(host, ukey, rec, out)


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
