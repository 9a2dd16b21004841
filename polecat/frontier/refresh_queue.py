"""Refresh in the frontier: each fetched URL's next due time, the scan that queues due URLs again, the
freshness figures and the sitemap and feed priors they start from (with the first response's
Last-Modified, refresh rule 4).

The refresh rules are polecat/frontier/refresh.py's (the :class:`RefreshPolicy` decides; this part
applies its answers to the frontier's records): a page fetched (2xx) or not modified gets a history and a
due time (refresh rules 1-2, 4), the scan queues due URLs within each host's refresh budget and by
priority (refresh rules 3, 7, 8), and the freshness SLO (refresh rule 9) is counted as records change.
Both read the indexes of polecat/frontier/refresh_index.py, kept with every write of a URL record, never
every finished URL.

Rules:
1. A refresh scan runs in steps (:class:`DueScan`, :meth:`RefreshQueue.scan_step`), each reading at most
   ``rows`` index rows (:data:`SCAN_ROWS`) and planning at most ``hosts`` hosts (:data:`SCAN_HOSTS`), so
   a node's event loop is held for one step however many URLs are due: in one call, 1,000 URLs due over
   1,000 hosts cost 206 ms of CPU at 1M URLs and 244 ms at 50M (benchmarks/README.md "At 50M URLs over
   1M hosts: the jobs, run to the end"), and a scan may take 100,000. First the ``due`` rows up to the
   scan's ``now`` are read in time order (at most ``limit``), each URL filed under its host; then host by
   host, in the order first met, the host's ``refresh`` rows are read (its budget plan; over several
   steps for a host with more rows than a step reads), and its due URLs planned and queued in one
   decision; last, the freshness figures at the step's ``now`` (refresh_index.py rule 3, in steps too).
2. Between two steps the frontier commits and changes. A step goes on after the last row the previous
   one read (``items_after``), and a URL is queued only if its ``due`` row is still there when its host
   is planned, its record read then: a URL completed, queued again, given another due time or released
   meanwhile is left to its new state (a new due time up to ``now`` comes later in the rows, and is met
   there). Run without a step in between (:meth:`RefreshQueue.requeue_due`), the steps are the one pass
   the scan always was.
"""

from __future__ import annotations

import sys
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

SCAN_ROWS = 2_000
"""Index rows one step of a refresh scan reads at most (rule 1): a few microseconds each."""
SCAN_HOSTS = 32
"""Hosts one step of a refresh scan plans at most (rule 1): a host's budget plan and queueing cost ~0.2 ms
of CPU whatever its size (1,000 hosts of 51 rows: 206-244 ms)."""


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
        history and next due time (refresh rules 1-2, from its prior by refresh rule 4). ``ukey``: its key;
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
        (refresh_index.py rules 1-2), not every finished URL. In one call: a node scans in steps
        (:meth:`scan_step`, rule 1)."""
        scan = DueScan(now, window, limit)
        step = self.scan_step(scan, now, rows=sys.maxsize, hosts=sys.maxsize)
        assert step.value is not None, "a step without bounds is the whole scan"
        return Decided((scan.queued, step.value), step.writes)

    def scan_step(self, scan: DueScan, now: float, *, rows: int = SCAN_ROWS,
                  hosts: int = SCAN_HOSTS) -> Decided[Freshness | None]:
        """One step of ``scan`` (rules 1, 2), reading at most about ``rows`` index rows and planning at most
        ``hosts`` hosts; answers the freshness SLO at ``now`` once the scan is over (None: more steps to
        go). ``scan.queued`` counts the URLs queued so far."""
        index = self.index
        stop = index.reads + rows
        out: list[Write] = []
        if not scan.collected:
            self._collect(scan, stop)
        planned = 0
        while scan.collected and (scan.host or scan.found) and index.reads < stop and planned < hosts:
            if not scan.host:
                scan.host = next(iter(scan.found))
            if self._read_plan(scan, stop):
                scan.queued += self._plan_host(scan, out)
                planned += 1
        fresh = None
        if scan.collected and not scan.host and not scan.found and index.reads < stop:
            fresh = index.freshness_step(now, stop - index.reads)
        return Decided(fresh, out)

    def _collect(self, scan: DueScan, stop: int) -> None:
        """Rule 1's first part: file the due URLs under their hosts, until ``stop`` reads."""
        index, urls, leaving = self.index, self._db.getter("urls"), self._table.leaving
        for row, ukey in index.due(scan.now, scan.after):
            if scan.taken >= scan.limit:
                break
            scan.after = row
            scan.taken += 1
            if not (leaving and prefix_slice(ukey) in leaving):  # else its release deletes it (handover 7)
                raw = urls(ukey)
                assert raw is not None, "a due row outlived its URL record (refresh_index.py rule 4)"
                scan.found.setdefault(host_key(UrlRecord.decode(raw).url), []).append((row, ukey))
            if index.reads >= stop:
                return
        scan.collected = True

    def _read_plan(self, scan: DueScan, stop: int) -> bool:
        """Read the ``refresh`` rows of the host being planned, until ``stop`` reads; whether all are read."""
        plan, at = scan.plan, scan.at
        for row, ukey, values in self.index.host_rows(scan.host, scan.plan_after):
            scan.plan_after = row
            at[ukey] = plan.add(values.rate, values.weight)
            if self.index.reads >= stop:
                return False
        return True

    def _plan_host(self, scan: DueScan, out: list[Write]) -> int:
        """Queue the due URLs of the host whose rows are read (rule 2: those still due), and start afresh."""
        host, at = scan.host, scan.at
        urls, due_row, leaving = self._db.getter("urls"), self._db.getter("due"), self._table.leaving
        due: list[tuple[bytes, UrlRecord]] = []
        for row, ukey in scan.found.pop(host):
            if ukey not in at or due_row(row) is None or (leaving and prefix_slice(ukey) in leaving):
                continue  # changed since it was read (rule 2)
            raw = urls(ukey)
            if raw is not None:
                due.append((ukey, UrlRecord.decode(raw)))
        plan = scan.plan
        # In key order, as a pass over the ``urls`` table met them: equal priorities keep that order.
        plan.due = [(at[ukey], History.from_hex(rec.history), ukey, rec) for ukey, rec in sorted(due)]
        queued = self._requeue_host(host, plan, scan.now, scan.window, out) if plan.due else 0
        scan.host, scan.plan, scan.at, scan.plan_after = "", HostScan(), {}, b""
        return queued

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
                continue  # the host's budget spaces this URL further (refresh rule 3): it stays due
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


@dataclass(slots=True)
class DueScan:
    """One refresh scan at ``now`` (rule 1), made in steps by :meth:`RefreshQueue.scan_step`."""

    now: float
    window: float | None = None
    """Seconds over which each host keeps its share of requests for other URLs (refresh rule 8)."""
    limit: int = 100_000
    """Due URLs taken at most, the earliest first."""
    queued: int = 0
    """URLs queued again so far."""
    after: bytes = b""
    """The last ``due`` row read (b"": none yet)."""
    taken: int = 0
    collected: bool = False
    """Every due row up to ``now`` (or ``limit`` of them) is read."""
    found: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    """The hosts not yet planned, in the order first met, with their due rows and URL keys."""
    host: str = ""
    """The host whose ``refresh`` rows are being read ("": none)."""
    plan: HostScan = field(default_factory=HostScan)
    at: dict[bytes, int] = field(default_factory=dict)
    """Each URL key of :attr:`host` read so far, with its place in :attr:`plan`."""
    plan_after: bytes = b""
    """The last ``refresh`` row of :attr:`host` read (b"": none yet)."""
