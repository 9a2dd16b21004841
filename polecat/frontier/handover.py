"""Slices moving between frontiers: which slices are leased here, export, adopt, release.

Rules:
1. A frontier leases hosts of the slices it owns only (:meth:`SliceHandover.set_owned`).
2. An export is a snapshot of every slice-keyed record of the slices (polecat/frontier/handover_ranges.py)
   as a :class:`~polecat.frontier.bundle.SliceBundle`.
3. Adoption merges a bundle in (a URL already seen here is not queued twice; a URL queued here that the
   exporter had finished is dropped: its owner fetched it) and makes every adopted host wait one full
   interval from the adoption (the exporter's last request may have just started).
4. Release drops the slices, and is refused while a lease there is in flight.
5. Release is refused while a URL was queued in one of the slices since its last export here (a hand-off
   batch taken in, a link admitted, a bundle adopted while the hand-over was on the wire): the bundle
   sent does not hold it and the release would delete it, losing it for good.
   :meth:`SliceHandover.queued_since_export` counts them; the hand-over exports those slices again and
   sends them once more (adoption merges: polecat/cluster/chunks.py rule 3), then releases. A slice
   never exported here is released as asked.
6. Adoption and release are decisions: they return their writes (polecat/writes.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from polecat.dedup.seen import SeenSet
from polecat.errors import FrontierError
from polecat.frontier.bundle import BundleError, Fence, SliceBundle
from polecat.frontier.handover_ranges import CommittedSnapshot, export_ranges
from polecat.frontier.host_table import HostTable, quarantined
from polecat.frontier.intake import Intake
from polecat.frontier.keys import (
    host_of_row,
    parse_wire_queue_key,
    queue_key_at,
    queue_key_seq,
    queue_prefix,
    url_key,
)
from polecat.frontier.politeness import HostState, wait_one_interval
from polecat.frontier.records import (
    PAGE_OUTCOMES,
    AdoptReport,
    QueuedUrl,
    UrlRecord,
    decode_host,
    decode_host_v4,
)
from polecat.frontier.refresh_queue import RefreshQueue
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.robots_state import restore_robots
from polecat.frontier.slices import SLICES, check_slices, slice_of, slice_prefix
from polecat.hosts import host_key
from polecat.writes import Decided, Delete, DeleteSlices, Put, Write


class SliceHandover:
    """Ownership of slices and their export, adoption and release. An adopted slice brings records of
    every part: ``load_op`` reinstates each operator op in the part it belongs to."""

    def __init__(self, table: HostTable, seen: SeenSet, robots: RobotsPolicy, intake: Intake,
                 refresh: RefreshQueue, load_op: Callable[[bytes, bytes], None]) -> None:
        self._table = table
        self._hosts = table.hosts
        self._db = table.db
        self._seen = seen
        self._robots = robots
        self._intake = intake
        self._refresh = refresh
        self._load_op = load_op
        self._exported: dict[int, int] = {}
        """Slice -> this frontier's queue sequence (``HostTable.qseq``) at its last export (rule 5)."""

    def set_owned(self, slices: Iterable[int], now: float, *, wait_from: float | None = None) -> None:
        """Lease only hosts of ``slices`` (the ones the ring gives this member); the others keep their
        state here until :meth:`release_slices`. Every slice is owned until this is called. With
        ``wait_from``, the hosts of slices owned now and not before wait one full interval from then
        (another node may have had a request to them under way: polecat/cluster/ownership.py rule 11)."""
        table = self._table
        was = table.fenced
        table.fenced = fenced = frozenset(range(SLICES)) - check_slices(slices)
        newly = fenced - was  # counted afresh (host_table rule 9); the others count_queued kept current
        counts = table.queued_in
        for s in newly:
            counts[s] = 0
        for host, st in self._hosts.items():
            s = slice_of(host)
            if s in fenced:
                if s in newly:
                    counts[s] += st.queued
                table.unschedule(host)
                continue
            if wait_from is not None and s in was:
                wait_one_interval(table.pol, table.rate(host), st, max(now, wait_from))
                table.unschedule(host)  # due at its new next-allowed time
            table.wake(host, st, max(st.next_allowed, now))
        for s in newly:  # the records out of memory (host_table rules 6, 9): read by slice, not all hosts
            for key, raw in self._db.items("hosts", slice_prefix(s)):
                if host_of_row(key) not in self._hosts:
                    counts[s] += decode_host(raw).queued

    def export_slices(self, slices: Iterable[int], now: float, fence: Fence | None = None, *,
                      books: bool = True) -> SliceBundle:
        """Everything this frontier holds about ``slices`` (queues, host records, robots answers, URL
        records, seen entries, operator controls) as a :class:`SliceBundle` stamped ``now``: a snapshot of
        the open transaction. URLs leased there stay queued, so a slice that moves for good is exported after
        its leases complete (:meth:`in_flight_in`). ``fence``: the sender's token, carried in the header;
        ``books`` False: without the content claim books (a receiver of wire 2)."""
        ids = check_slices(slices)
        bundle = export_ranges(self._db, ids, created=now, hosts=self._table.unsaved(), fence=fence,
                               books=books)
        qseq = self._table.qseq
        for s in ids:
            self._exported[s] = qseq
        return bundle

    def queued_since_export(self, slices: Iterable[int]) -> int:
        """URLs queued in ``slices`` since their last export here (rule 5): in no bundle exported, so
        releasing those slices would lose them. Reads no row while nothing was queued anywhere since; a
        slice found with none is as if exported now (its mark moves up), so the release that follows
        reads its rows no more."""
        qseq = self._table.qseq
        late = 0
        for s in check_slices(slices):
            mark = self._exported.get(s)
            if mark is not None and mark < qseq:  # queue keys end with their qseq (keys.py rule 1)
                since = sum(1 for key, _ in self._db.items("queue", slice_prefix(s))
                            if queue_key_seq(key) > mark)
                if not since:
                    self._exported[s] = qseq
                late += since
        return late

    def snapshot(self) -> CommittedSnapshot:
        """The last commit, held in a read transaction of its own until closed: exports from it see
        that commit whatever the loop writes meanwhile (slice checkpoints export group by group)."""
        return CommittedSnapshot(self._db.snapshot())

    def in_flight_in(self, slices: Iterable[int]) -> int:
        """Leases in flight on hosts of ``slices``, the released ones waiting for their records too
        (leasing.py rule 7)."""
        ids = check_slices(slices)
        table = self._table
        return (sum(1 for host in table.leases if slice_of(host) in ids)
                + sum(len(keys) for host, keys in table.finishing.items() if slice_of(host) in ids))

    def unowned_queued(self) -> Counter[int]:
        """URLs queued here in slices this frontier does not lease (:meth:`set_owned`), by slice: the
        strays the cluster ships to their owners. Read from the per-slice counts (host_table rule 9): a
        look at the fenced slices, not a pass over the hosts."""
        counts = self._table.queued_in
        return Counter({s: counts[s] for s in self._table.fenced if counts[s] > 0})

    def adopt(self, bundle: SliceBundle, now: float, *,
              wait_from: float | None = None) -> Decided[AdoptReport]:
        """Take over the slices of ``bundle``, merged with what is here. Each adopted host waits one full
        interval from ``now`` (the exporter's last request may have just started), or from ``wait_from``
        when later (a restore from a member that may still be aborting its requests: ownership rule 11);
        a queued URL this frontier has already seen is not queued twice, and a URL queued here that the
        exporter had finished (a config seed queued by a node that joins after its owner fetched it) is
        dropped."""
        stored = self._db.getter("seen")
        out: list[Write] = []
        adopted: dict[str, HostState] = {}
        counts: Counter[str] = Counter()
        finished: set[bytes] = set()
        queued_there: set[bytes] = set()
        marked: set[bytes] = set()
        """Seen keys this adoption writes (writes.py rule 3: not in the transaction until applied)."""
        duplicates = seen_new = paged = 0
        for table, key, value in bundle.records():
            if table == "ops":
                out.append(Put("ops", key, value))
                self._load_op(key, value)
            elif table == "robots":
                out.append(Put("robots", key, value))
                restore_robots(self._robots, key, value)
            elif table == "hosts":
                adopted[host_of_row(key)] = decode_host_v4(value)  # the bundle's form (handover_ranges.py)
            elif table == "urls":
                rec = UrlRecord.decode(value)  # the bundle's form (handover_ranges.py), stored compact
                out.append(Put("urls", key, rec.encode()))
                finished.add(bytes(key))
                self._refresh.url_written(host_key(rec.url), bytes(key), rec, out)
                paged += rec.outcome in PAGE_OUTCOMES
            elif table == "queue":
                host, r, depth, _ = parse_wire_queue_key(key)  # the bundle's form (handover_ranges.py)
                queued = QueuedUrl.decode_v3(value)
                ukey = url_key(queued.url, host)
                queued_there.add(ukey)  # finished and queued again there (a refresh): stays queued
                if ukey not in marked and self._seen.mark(stored, ukey):
                    marked.add(ukey)
                    out.append(Put("seen", ukey, b""))
                    self._table.qseq += 1
                    # Its number here (host_table.py rule 14), and this frontier's FIFO order.
                    prefix = queue_prefix(host, self._table.state(host).num)
                    new_key = queue_key_at(prefix, r, depth, self._table.qseq)
                    out.append(Put("queue", new_key, queued.encode(host)))
                    self._table.count_band(new_key, 1)
                    counts[host] += 1
                else:
                    duplicates += 1
            elif table == "seen":
                if bytes(key) not in marked and self._seen.mark(stored, key):
                    marked.add(bytes(key))
                    out.append(Put("seen", key, b""))
                    seen_new += 1
            elif table == "priors":
                out.append(Put("priors", key, value))
                self._refresh.has_priors = True
            elif table == "claims":  # the content slice's claim book (claims rule 8), loaded by the member
                out.append(Put("claims", key, value))
            else:
                raise BundleError(f"slice bundle table {table!r} is unknown to this polecat")
        if finished:
            duplicates += self._drop_finished(adopted.keys(), finished - queued_there, out)
        waits = now if wait_from is None else max(now, wait_from)
        for host in adopted.keys() | counts.keys():
            self._adopt_host(host, adopted.get(host), counts[host], waits)
        out += self._intake.refetch_writes(now, finished)
        self._db.pending += 1
        return Decided(AdoptReport(len(bundle.ids), len(adopted), sum(counts.values()), duplicates, seen_new,
                                   paged), out)

    def _drop_finished(self, hosts: Iterable[str], finished: set[bytes], out: list[Write]) -> int:
        """Delete the URLs of ``finished`` (URL keys) from the queues of ``hosts`` held here before the
        adoption; returns how many. Only hosts that had URLs queued here are read."""
        dropped = 0
        for host in hosts:
            peeked = self._table.peek(host)
            if peeked is None or peeked.queued <= 0:
                continue
            st = self._table.state(host)
            doomed = [key for key, value in self._db.items("queue", queue_prefix(host, st.num))
                      if url_key(QueuedUrl.decode(value, key, host).url, host) in finished]
            for key in doomed:
                out.append(Delete("queue", key))
                self._table.count_band(key, -1)
            self._table.count_queued(host, st, -len(doomed))
            dropped += len(doomed)
        return dropped

    def _adopt_host(self, host: str, got: HostState | None, queued: int, now: float) -> None:
        table = self._table
        st = table.state(host)
        if got is not None:
            was = quarantined(st)
            st.next_allowed = max(st.next_allowed, got.next_allowed)
            st.rate_factor = min(st.rate_factor, got.rate_factor)
            st.crawl_delay = max(st.crawl_delay, got.crawl_delay)
            st.failures = max(st.failures, got.failures)
            table.health(st, was)  # host_table rule 16
            table.count_fetched(st, got.fetched)
            st.ip = st.ip or got.ip
        wait_one_interval(table.pol, table.rate(host), st, now)
        table.count_queued(host, st, queued)
        table.save(host)
        table.wake(host, st, st.next_allowed)

    def release_slices(self, slices: Iterable[int]) -> list[Write]:
        """Drop everything about ``slices`` from this frontier (after their new owner adopted them).
        FrontierError while a lease is in flight there."""
        ids = check_slices(slices)
        busy = self.in_flight_in(ids)
        if busy:
            raise FrontierError(f"cannot release slices with {busy} leases in flight")
        late = self.queued_since_export(ids)
        if late:  # rule 5
            raise FrontierError(f"cannot release slices with {late} URLs queued since their export: "
                                "export and send them again first")
        for s in ids:
            self._exported.pop(s, None)
        table = self._table
        for s in ids:  # the records out of memory (host_table.py rule 6): their queued URLs go too
            for key, raw in self._db.items("hosts", slice_prefix(s)):
                if host_of_row(key) not in self._hosts:
                    table.forget_record(decode_host(raw))
        if table.bands is not None:  # their queued URLs leave the bands (kept across restarts)
            for s in ids:
                for key, _ in self._db.items("queue", slice_prefix(s)):
                    table.count_band(key, -1)
        table.forget([h for h in self._hosts if slice_of(h) in ids])
        for s in ids:  # nothing is queued here in them any more (host_table rule 9)
            table.queued_in[s] = 0
        self._intake.forget_recent()
        self._db.pending += 1
        out: list[Write] = []
        self._refresh.index.release(ids, out)
        out.append(DeleteSlices(ids))
        return out
