"""The frontier's in-memory index over its tables, shared by its parts (polecat/frontier/frontier.py).

:class:`HostTable` holds what the parts decide from: each host's record (:class:`HostState`: its queued
count, next-allowed time, backoff), the ready heap, the leases in flight, the parked hosts, the fenced
slices, the operator's host patterns, the queue's counters; and the bookkeeping that keeps them in step
with the writes decisions return: scheduling a host, saving its record, queueing a URL, moving one to done.

Rules:
1. Host records are written once per commit, however often they changed in between: :meth:`save` marks
   a record, :meth:`host_writes` writes the marked ones. Until then the table holds the newest copy.
2. The ready heap may hold stale entries: :attr:`HostTable.scheduled` says when each host is due, and an
   entry of a host rescheduled since is skipped when popped.
3. A host of a fenced slice is never scheduled (:meth:`schedule`): it is not leased here.
4. Queue bookkeeping follows the frontier's invariant (polecat/frontier/frontier.py): :meth:`enqueue`
   counts a URL in its host's ``queued`` with its queue write; :meth:`finish_writes` moves it to done.
5. Its containers (:attr:`hosts`, :attr:`scheduled`, :attr:`leases`, :attr:`parked`, the pattern maps)
   are never replaced, so a part may keep a reference to one.
6. While some slice is fenced (a member of a cluster), :attr:`queued_in` counts the URLs queued in each
   slice, kept with every change of a host's count (:meth:`count_queued`) and rebuilt whenever the
   fenced slices change (:meth:`SliceHandover.set_owned`, which reads every host then anyway): the
   strays the cluster looks for every few seconds are read from it without a pass over the hosts.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterable

from polecat.config import PolitenessConfig
from polecat.frontier.keys import host_of_row, host_row, priority_band, queue_key, url_key, url_key_at
from polecat.frontier.politeness import HostState, wait_one_interval
from polecat.frontier.records import Lease, QueuedUrl, UrlRecord, decode_host, encode_host
from polecat.frontier.slices import SLICES, slice_of
from polecat.frontier.tables import FrontierTables
from polecat.frontier.traps import ShapeBudget
from polecat.hosts import HostPatternMap
from polecat.writes import Delete, Put, Write


class HostTable:
    """Host records, the ready heap, leases and queue counts (see the module docstring)."""

    def __init__(self, db: FrontierTables, pol: PolitenessConfig, shapes: ShapeBudget) -> None:
        self.db = db
        self.pol = pol
        self.shapes = shapes
        """URLs queued per host and shape this run (traps rule 2): counted here, judged by the intake."""
        self.hosts: dict[str, HostState] = {}
        self.heap: list[tuple[float, str]] = []
        self.scheduled: dict[str, float] = {}
        """When each host in the ready heap is due (rule 2)."""
        self.leases: dict[str, Lease] = {}
        """The lease in flight of each host that has one."""
        self.parked: dict[str, str] = {}
        """Hosts parked in this run, with the reason."""
        self.fenced: frozenset[int] = frozenset()
        """Slices whose hosts are not leased here (rule 3; polecat/frontier/handover.py sets them)."""
        self.queued_in: list[int] = [0] * SLICES
        """URLs queued per slice, while :attr:`fenced` is not empty (rule 6)."""
        self.throttle: HostPatternMap[float] = HostPatternMap()
        """Rate overrides and blocks by host pattern (polecat/frontier/controls.py sets them)."""
        self.blocked: HostPatternMap[bool] = HostPatternMap()
        self.queued = 0
        self.accepted = 0
        """URLs accepted into the queues in this run."""
        self.qseq = int(db.get("meta", b"qseq") or b"0")
        """The FIFO sequence number of the last queue key (persisted in ``meta``)."""
        self.bands: Counter[str] | None = None
        """Queued URLs by priority band, counted once asked for (observe.py), then kept."""
        self.done: Counter[str] = Counter()
        """Outcomes in this run; ``done_total`` (persisted in ``meta``) counts them over all runs."""
        self.done_total: Counter[str] = Counter(json.loads(db.get("meta", b"done") or b"{}"))
        self._dirty: set[str] = set()

    def load(self, now: float) -> None:
        """Rebuild the records and the heap from the ``hosts`` table. A request may have been in flight
        when the previous process died, uncommitted: every host therefore waits one interval from
        ``now``, so a restart never sends a burst (the dead process's requests all started before it)."""
        for key, raw in self.db.items("hosts"):
            host = host_of_row(key)
            st = decode_host(raw)
            wait_one_interval(self.pol, self.rate(host), st, now)
            self.hosts[host] = st
            self.queued += st.queued
            if st.queued > 0:
                self.schedule(host, st.next_allowed)

    def rate(self, host: str) -> float:
        """The configured request rate of ``host`` (its throttle, else the default), before AIMD."""
        return self.throttle.get(host) or self.pol.rate

    def state(self, host: str) -> HostState:
        """The record of ``host``, a new one if it has none."""
        st = self.hosts.get(host)
        if st is None:
            st = self.hosts[host] = HostState()
        return st

    def schedule(self, host: str, at: float) -> None:
        """Put ``host`` in the ready heap, due at ``at`` (rules 2 and 3)."""
        if self.fenced and slice_of(host) in self.fenced:
            return
        self.scheduled[host] = at
        heapq.heappush(self.heap, (at, host))

    def wake(self, host: str, st: HostState, at: float) -> None:
        """Schedule ``host`` at ``at`` if it has URLs queued and nothing holds it back (a request in
        flight, parked, already scheduled)."""
        if st.queued > 0 and not st.in_flight and not st.parked and host not in self.scheduled:
            self.schedule(host, at)

    def next_due(self) -> float | None:
        """No host is due before this time (None: none is scheduled). It may be earlier than the first
        host a lease would hand out (rule 2), never later: a caller that sleeps until then misses no host."""
        return self.heap[0][0] if self.heap else None

    def save(self, host: str) -> None:
        """Mark the record of ``host`` changed (rule 1); each change counts towards the next commit."""
        self._dirty.add(host)
        self.db.pending += 1

    def host_writes(self) -> list[Write]:
        """The host records changed since the last commit (rule 1)."""
        hosts = self.hosts
        out: list[Write] = [Put("hosts", host_row(host), encode_host(hosts[host])) for host in self._dirty]
        self._dirty.clear()
        return out

    def unsaved(self) -> dict[bytes, bytes]:
        """The ``hosts`` rows of the records changed since the last commit, newer than the table's."""
        return {host_row(h): encode_host(self.hosts[h]) for h in self._dirty}

    def counter_writes(self) -> list[Write]:
        """The counters kept in ``meta``: the queue sequence and the outcomes over all runs."""
        return [Put("meta", b"qseq", str(self.qseq).encode()),
                Put("meta", b"done", json.dumps(self.done_total).encode())]

    def count_queued(self, host: str, st: HostState, n: int) -> None:
        """``n`` more URLs (fewer, when negative) queued for ``host`` (rules 4 and 6)."""
        st.queued += n
        self.queued += n
        if self.fenced:
            self.queued_in[slice_of(host)] += n

    def forget(self, hosts: Iterable[str]) -> None:
        """Drop ``hosts`` from memory (their slices were released: their records go with them)."""
        for host in hosts:
            st = self.hosts.pop(host)
            self.count_queued(host, st, -st.queued)
            self.scheduled.pop(host, None)
            self._dirty.discard(host)
            self.parked.pop(host, None)
        self.bands = None

    def enqueue(self, url: str, host: str, depth: int, importance: float, now: float, out: list[Write],
                hops: int = 0, *, new: bool = True) -> None:
        """Queue ``url`` (rule 4): its write goes to ``out``. ``new``: it counts as accepted."""
        # state() and wake() inline: this runs for every URL accepted.
        st = self.hosts.get(host)
        if st is None:
            st = self.hosts[host] = HostState()
        self.qseq += 1
        self.shapes.count(host, url)
        key = queue_key(host, importance, depth, self.qseq)
        out.append(Put("queue", key, QueuedUrl(url, depth, importance, 0, hops).encode()))
        self.count_band(key, 1)
        st.queued += 1  # count_queued() inline (this runs for every URL accepted)
        self.queued += 1
        if self.fenced:
            self.queued_in[slice_of(host)] += 1
        self.accepted += new
        self.save(host)
        if not st.in_flight and not st.parked and host not in self.scheduled:
            self.schedule(host, max(st.next_allowed, now))

    def finish_writes(self, host: str, st: HostState, key: bytes, rec: UrlRecord,
                      ukey: bytes | None = None) -> list[Write]:
        """The writes that move the queued URL ``key`` to done, as ``rec`` (rule 4: one decision);
        ``ukey``: its ``urls`` key, when the caller has it."""
        if self.db.get("queue", key) is not None:
            self.count_queued(host, st, -1)
            self.count_band(key, -1)
        self.save(host)
        self.count_done(rec.outcome if rec.outcome != "skipped" else f"skipped:{rec.reason}")
        return [Delete("queue", key), Put("urls", ukey or url_key_at(key, rec.url), rec.encode())]

    def count_done(self, label: str) -> None:
        self.done[label] += 1
        self.done_total[label] += 1

    def count_band(self, key: bytes, delta: int) -> None:
        if self.bands is not None:
            self.bands[priority_band(key)] += delta

    def url_record(self, url: str, key: bytes | None = None) -> UrlRecord | None:
        """What is recorded of the finished ``url`` (``key``: its ``urls`` key, when known)."""
        raw = self.db.get("urls", key or url_key(url))
        return UrlRecord.decode(raw) if raw is not None else None
