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
7. A release is done in steps (:class:`SliceRelease`; issue 39: in one step, a chunk of ~100,000 URLs
   held the event loop ~1 s). :meth:`SliceHandover.begin_release` checks rules 4 and 5, marks the slices
   *releasing* (:attr:`HostTable.leaving`) and writes the ``meta`` row :data:`RELEASING` naming them;
   each :meth:`SliceRelease.step` then deletes at most ``budget`` rows (:data:`RELEASE_STEP` by
   default), slice by slice: the ``refresh`` rows with their ``due`` and ``fresh`` rows first (a ``due``
   row never outlives its URL record), then the queue (its priority bands), the host records (each with
   its counters, host_table rule 12, or its state in memory: a commit holds both or neither), the other
   slice-keyed tables, and a slice emptied so ends with its ``DeleteSlices`` (its seen keys; its hosts in
   memory never saved). The last step deletes the ``meta`` row. A releasing slice takes no URL: a
   decision that would queue one raises a :class:`~polecat.errors.FrontierError` before it changes
   anything (a hand-off batch is then sent again), a bundle of it is not adopted, and the refresh scan
   leaves its due URLs due. The open that finds the ``meta`` row finishes the release
   (:meth:`SliceHandover.resume`) before anything is queued: its new owner holds every record it deletes
   (rule 5), so a release cut between any two steps loses nothing; a refetch request that open found in
   such a slice is written again once the release is done (polecat/frontier/intake.py rule 5).
8. On a node's event loop a chunk is exported in steps (:class:`SliceExport`; issue 39: in one call,
   ~12 us a URL, a chunk of 64 slices at 1M URLs held the loop ~165 ms, one of 4 MB at 50M ~0.9 s).
   :meth:`SliceHandover.begin_export` reads a
   :class:`~polecat.frontier.handover_ranges.CommittedSnapshot` taken right after a commit (an LMDB
   commit, made off the loop: the snapshot then reads the LMDB alone, polecat/node/commits.py rule 9),
   and each :meth:`SliceExport.step` reads at most ``budget`` rows of it (:data:`EXPORT_STEP` by
   default), the loop given a turn between two: the snapshot stays that commit's whatever the loop writes
   meanwhile, where a cursor of the open transaction would not (a commit may begin another). The bundle is
   the one-call export of the same snapshot byte for byte (one generator, which the one call drains:
   handover_ranges.py ``export_steps``). Rule 5's mark is the queue sequence *of the snapshot's commit*
   (its ``meta`` row), not the one when the last step ends: a URL queued in those slices after that
   commit, before or during the steps, is in no bundle, is counted, and goes again. That export loses
   nothing a point-in-time export at the commit would have carried: the slices are fenced (rule 1: no
   lease, so no completion, robots answer or fetch outcome changes them), what the loop may still put
   there is what rule 5 counts (a hand-off batch, a link admitted, a bundle adopted: each a queue row,
   with its seen key; the finished URL records a bundle adopted meanwhile brings are not counted, as
   while a bundle is on the wire), and the host records kept in memory are in the commit (it writes
   them). The node turns the bundle into bytes (its frames read again for the digest) in a thread. The
   one-call :meth:`SliceHandover.export_slices` of the open transaction stays for what runs without a
   loop to share (polecat/cluster/resize.py, tests).
9. On a node's event loop a chunk is adopted in steps too (:class:`SliceAdoption`; issue 39: in one
   call, ~50 us a URL, a chunk of 64 slices at 1M URLs held the loop ~0.8 s; its read and checksums are
   off the loop already, polecat/processes/machine.py). :meth:`SliceHandover.begin_adopt` checks rule 7;
   each :meth:`SliceAdoption.step` takes in at most ``budget`` records (:data:`ADOPT_STEP` by default) in
   the bundle's order, its writes applied before the next step and with everything they change in memory
   (a host's record merged when its row comes, with its wait of rule 3; a URL queued with its seen key, its
   band and its host's count; a URL record with its refresh rows), so a commit between two steps holds
   a part of the bundle that stands on its own; then, a host at a time, the URLs queued here before that
   the exporter had finished are dropped (rule 3, once every record is read), and the last step queues
   the refetches (intake rule 5). The node acknowledges the chunk only after the last step and a commit
   (polecat/cluster/chunks.py rule 3): until then the sender holds all of it, and a crash or a cut
   between two steps is an adoption whose acknowledgement was lost: the chunk comes again and merges (its
   URLs already seen here are not queued twice). A slice being adopted is not released meanwhile
   (:meth:`SliceHandover.begin_release` refuses it); the one-call :meth:`SliceHandover.adopt` is one step
   with no budget (polecat/cluster/resize.py, tools, tests). A restore from a checkpoint adopts in steps
   as well, with its ``wait_from`` (polecat/cluster/failover.py rule 6): a cut there is a restore done
   again, which merges the same way.
10. An adoption keeps in memory only the URL keys that rule 3's drop and the refetches need, not every
   URL record of the bundle (issue 39: at 50M URLs a restore of 64 slices brought 778,750 of them; the
   set's growth and the difference rule 3 took of it held the loop ~110 ms in one step): the finished
   and queued keys of hosts that had URLs queued here before it (the only queues rule 3 reads; a host
   whose record comes later is asked the same way, when its first row comes), and the keys of URLs that
   a refetch request held here names (intake rule 5), plus a step's own URL records for the refetches of
   its last step (its writes are not applied yet: writes.py rule 3).
11. A bundle carries a seed host's mark as 0.3.0's ``seedhost`` row of ``ops`` (keys.py rule 4;
   polecat/frontier/handover_ranges.py writes it just before the host's record), and an adoption turns it into
   the mark of the host's record here (polecat/frontier/db.py rule 18), writing no ``ops`` row: at once
   for a host in memory (its record merged, or held here), at its record's merge for one whose record
   comes later (a sender of 0.3.0 writes its ``ops`` first), and after the bundle's last record for the
   others (:meth:`HostTable.mark_seed`: its record out of memory, or, for a host with no record anywhere,
   a seed refused there, the row itself, host_table.py rule 26).
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Callable, Generator, Iterable

from polecat.dedup.seen import SeenSet
from polecat.errors import FrontierError
from polecat.frontier.bundle import BundleError, Fence, SliceBundle
from polecat.frontier.handover_ranges import CommittedSnapshot, export_ranges, export_step
from polecat.frontier.host_table import QSEQ, HostTable, quarantined
from polecat.frontier.intake import Intake
from polecat.frontier.keys import (
    SEED_HOST,
    host_of_row,
    host_row,
    parse_op_key,
    parse_wire_queue_key,
    queue_key_at,
    queue_key_seq,
    queue_prefix,
    queue_prefix_of_row,
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
    encode_host,
)
from polecat.frontier.refresh_queue import RefreshQueue
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.robots_state import restore_robots
from polecat.frontier.slices import SLICES, check_slices, slice_of, slice_prefix
from polecat.hosts import host_key
from polecat.writes import Decided, Delete, DeleteSlices, Put, Table, Write

log = logging.getLogger("polecat")


RELEASING = b"releasing"
"""Meta key of the slices a release under way drops (rule 7): their numbers, comma-separated."""
RELEASE_STEP = 2_000
"""Rows a release step deletes at most (rule 7): ~11 us a row here, ~20 ms a step."""
_AFTER_HOSTS: tuple[Table, ...] = ("queue", "urls", "priors", "robots", "ops", "claims")
"""The slice-keyed tables a step deletes row by row after the refresh rows and the hosts with their queues
(rule 7; a queue row left then has no host); ``seen`` goes with the slice's ``DeleteSlices``."""
_HELD, _ROWS = 1, 2
"""Phases of a slice after its refresh rows (0): its hosts in memory, its host records out of memory;
then :data:`_AFTER_HOSTS`'s tables."""


EXPORT_STEP = 2_000
"""Rows an export step reads at most (rule 8): ~5 us a row here (a URL is ~2 rows: its record and its
seen key), ~10 ms a step, with a frame's compression every ~1 MB."""


class SliceExport:
    """An export under way (rule 8): :meth:`step` until it answers the bundle."""

    def __init__(self, handover: SliceHandover, ids: frozenset[int],
                 steps: Generator[int, None, SliceBundle], mark: int) -> None:
        self.slices = ids
        self._handover = handover
        self._steps = steps
        self._mark = mark
        """The queue sequence of the snapshot's commit (rule 8)."""

    def step(self) -> SliceBundle | None:
        """Read at most the budget's rows more; the bundle once every row is read (the slices then
        marked exported as of the snapshot's commit, rule 5), else None."""
        bundle = export_step(self._steps)
        if bundle is not None:
            for s in self.slices:
                self._handover._exported[s] = self._mark
        return bundle


class SliceRelease:
    """A release under way (rule 7): :meth:`step` until it answers True, each step's writes applied
    before the next (each reads what is left of its slices)."""

    def __init__(self, handover: SliceHandover, ids: frozenset[int], held: dict[int, list[str]]) -> None:
        self.slices = ids
        self._handover = handover
        self._held = held
        """The slices' hosts in memory at the begin, by slice (none comes in meanwhile: rule 7)."""
        self._todo = sorted(ids)
        self._phase = 0
        self._gone: set[bytes] = set()
        """``hosts`` and ``queue`` keys this step deleted: read again before its writes are applied."""

    def step(self, budget: int | None = None) -> Decided[bool]:
        """Delete at most ``budget`` rows (at least 3; :data:`RELEASE_STEP` by default) of the slices;
        answers whether the release is done (its writes then end it)."""
        budget = RELEASE_STEP if budget is None else budget
        if budget < 3:
            raise ValueError(f"a release step deletes at least 3 rows (a URL's refresh rows), not {budget}")
        handover = self._handover
        table, db = handover._table, handover._db
        out: list[Write] = []
        self._gone.clear()
        n = 0
        while self._todo and n < budget:
            s = self._todo[0]
            if self._phase == 0:
                room = budget - n
                got = handover._refresh.index.release_rows(s, room, out)
                n += got
                if room - got < 3:  # perhaps cut by the budget: the next step reads on
                    break
            elif self._phase == _HELD:
                held = self._held.get(s, [])
                while held and n < budget:
                    st = table.hosts.get(held[-1])
                    if st is not None:
                        got, done = self._drop_host(held[-1], st, host_row(held[-1]), True, budget - n, out)
                        n += got
                        if not done:
                            break
                    held.pop()
                if held:
                    break
            elif self._phase == _ROWS:
                cut = False
                for key, raw in db.items("hosts", slice_prefix(s)):
                    if n >= budget:
                        cut = True
                        break
                    if bytes(key) in self._gone:
                        continue
                    host = host_of_row(key)
                    st = table.hosts.get(host)  # taken in since the begin (an open that resumes it)
                    got, done = self._drop_host(host, st or decode_host(raw), bytes(key), st is not None,
                                                budget - n, out)
                    n += got
                    if not done:
                        cut = True
                        break
                if cut:
                    break
            else:
                name = _AFTER_HOSTS[self._phase - 3]
                cut = False
                for key, _ in db.items(name, slice_prefix(s)):
                    if n >= budget:
                        cut = True
                        break
                    if name == "queue":
                        if bytes(key) in self._gone:
                            continue
                        table.count_band(key, -1)
                    out.append(Delete(name, key))
                    n += 1
                if cut:
                    break
            self._phase += 1
            if self._phase == 3 + len(_AFTER_HOSTS):  # its hosts in memory never saved go too
                table.forget([h for h in self._held.pop(s, ()) if h in table.hosts])
                table.queued_in[s] = 0  # nothing is queued here in it any more (host_table rule 9)
                out.append(DeleteSlices(frozenset((s,))))
                self._todo.pop(0)
                self._phase = 0
        if self._todo:
            return Decided(False, out)
        out += handover._released(self.slices)
        return Decided(True, out)

    def _drop_host(self, host: str, st: HostState, row: bytes, in_memory: bool, room: int,
                   out: list[Write]) -> tuple[int, bool]:
        """Delete the queue rows of ``host`` (record ``st``, ``hosts`` key ``row``) and then its record, at
        most ``room`` rows; answers how many, and whether the record went. Its counters follow each row
        (host_table rule 12: the open counts the queue rows), so a commit between two steps holds a host
        whose record counts the URLs left in its queue."""
        table, db = self._handover._table, self._handover._db
        n = 0
        done = True
        for key, _ in db.items("queue", queue_prefix_of_row(row, st.num)):
            if n + 1 >= room:  # one row left for the record
                done = False
                break
            table.count_band(key, -1)
            out.append(Delete("queue", key))
            self._gone.add(bytes(key))
            n += 1
        table.count_queued(host, st, -n)
        if not done:
            if in_memory:
                table.save(host)
            else:
                out.append(Put("hosts", row, encode_host(st)))
            return n, False
        if in_memory:
            table.forget((host,))
        else:
            table.forget_record(st)
        out.append(Delete("hosts", row))
        self._gone.add(row)
        return n + 1, True


ADOPT_STEP = 500
"""Records of a bundle an adoption step takes in at most (rule 9): ~20 us a record on average here (a URL
is ~2: its record and its seen key), up to ~35 us for URL records (their refresh rows), ~18 ms a step."""


class SliceAdoption:
    """An adoption under way (rule 9): :meth:`step` until its value is the report, each step's writes
    applied before the next (each reads what the ones before wrote)."""

    def __init__(self, handover: SliceHandover, bundle: SliceBundle, now: float, waits: float) -> None:
        self.slices = bundle.ids
        self._handover = handover
        self._records = bundle.records()
        self._now = now
        self._waits = waits
        self._merged: set[str] = set()
        """Hosts whose records this adoption merged (rule 3), each once."""
        self._had: list[str] = []
        """Of them, those with URLs queued here before: their finished ones are dropped at the end."""
        self._had_here: dict[str, bool] = {}
        """Hosts asked whether they had URLs queued here before (rule 10), with the answer."""
        self._finished: set[bytes] = set()
        self._queued_there: set[bytes] = set()
        """URL keys finished there, and queued there, of the hosts that had URLs queued here (rule 10)."""
        self._doomed: set[bytes] | None = None
        """URL keys finished there and not queued there again, once every record is read."""
        self._named = handover._intake.refetch_url_keys()
        self._refetched: set[bytes] = set()
        """The URL records brought of URLs that a refetch request held here names (rule 10)."""
        self._hosts = self._queued = self._duplicates = self._seen_new = self._paged = 0
        self._closed = False
        self._seeds: set[str] = set()
        """Seed hosts the bundle marks, not yet marked here (rule 11)."""

    def step(self, budget: int | None = None) -> Decided[AdoptReport | None]:
        """Take in at most ``budget`` records of the bundle (:data:`ADOPT_STEP` by default), then the queues
        of at most that many hosts held here before; the report once done (its writes then end it)."""
        budget = ADOPT_STEP if budget is None else budget
        if budget < 1:
            raise ValueError(f"an adoption step takes in at least one record, not {budget}")
        handover = self._handover
        table = handover._table
        out: list[Write] = []
        touched: set[str] = set()
        taken: set[bytes] = set()
        n = 0
        if self._doomed is None:
            n = self._take(budget, out, touched, taken)
            if n < budget:
                self._doomed = self._finished - self._queued_there
                self._queued_there.clear()
                for host in self._seeds:  # rule 11: no record of theirs merged in memory
                    table.mark_seed(host, table.peek(host), host_row(host), out)
                self._seeds.clear()
        for host in touched:  # the URLs counted with their rows, and the host due once its wait is over
            st = table.state(host)
            table.save(host)
            table.wake(host, st, st.next_allowed)
        handover._db.pending += 1
        if self._doomed is None:
            return Decided(None, out)
        while self._had and n < budget:
            host = self._had.pop()
            n += 1
            self._duplicates += handover._drop_finished((host,), self._doomed, out)
        if self._had:
            return Decided(None, out)
        out += handover._intake.refetch_writes(self._now, self._refetched | taken)
        self.close()
        return Decided(AdoptReport(len(self.slices), self._hosts, self._queued, self._duplicates,
                                   self._seen_new, self._paged), out)

    def close(self) -> None:
        """The adoption is over, done or given up: its slices may be released again (rule 9)."""
        if not self._closed:
            self._closed = True
            adopting = self._handover._adopting
            for s in self.slices:
                adopting[s] -= 1
                if adopting[s] <= 0:
                    del adopting[s]

    def _take(self, budget: int, out: list[Write], touched: set[str], taken: set[bytes]) -> int:
        """Up to ``budget`` records of the bundle taken in (rule 3); how many. ``taken``: the keys of the
        URL records among them (rule 10)."""
        handover = self._handover
        table, seen = handover._table, handover._seen
        stored = handover._db.getter("seen")
        marked: set[bytes] = set()
        """Seen keys this step writes (writes.py rule 3: not in the transaction until applied)."""
        n = 0
        for name, key, value in itertools.islice(self._records, budget):
            n += 1
            if name == "ops":
                handover._load_op(key, value)
                kind, host = parse_op_key(key)
                if kind != SEED_HOST:
                    out.append(Put("ops", key, value))
                elif host in table.hosts:  # rule 11
                    table.mark_seed(host, None, host_row(host), out)
                else:
                    self._seeds.add(host)
            elif name == "robots":
                out.append(Put("robots", key, value))
                restore_robots(handover._robots, key, value)
            elif name == "hosts":
                self._hosts += 1
                self._merge(host_of_row(key), decode_host_v4(value))  # the bundle's form (handover_ranges.py)
            elif name == "urls":
                rec = UrlRecord.decode(value)  # the bundle's form (handover_ranges.py), stored compact
                ukey, host = bytes(key), host_key(rec.url)
                out.append(Put("urls", ukey, rec.encode()))
                taken.add(ukey)
                if self._had_before(host):  # rule 10
                    self._finished.add(ukey)
                if ukey in self._named:
                    self._refetched.add(ukey)
                handover._refresh.url_written(host, ukey, rec, out)
                self._paged += rec.outcome in PAGE_OUTCOMES
            elif name == "queue":
                host, r, depth, _ = parse_wire_queue_key(key)  # the bundle's form (handover_ranges.py)
                queued = QueuedUrl.decode_v3(value)
                ukey = url_key(queued.url, host)
                if host not in self._merged:  # a queue row of a host whose record the bundle lacks
                    self._merge(host, None)
                if self._had_before(host):  # finished and queued again there (a refresh): stays queued
                    self._queued_there.add(ukey)
                if ukey not in marked and seen.mark(stored, ukey):
                    marked.add(ukey)
                    out.append(Put("seen", ukey, b""))
                    table.qseq += 1
                    # Its number here (host_table.py rule 14), and this frontier's FIFO order.
                    st = table.state(host)
                    new_key = queue_key_at(queue_prefix(host, st.num), r, depth, table.qseq)
                    out.append(Put("queue", new_key, queued.encode(host)))
                    table.count_band(new_key, 1)
                    table.count_queued(host, st, 1)
                    touched.add(host)
                    self._queued += 1
                else:
                    self._duplicates += 1
            elif name == "seen":
                if bytes(key) not in marked and seen.mark(stored, key):
                    marked.add(bytes(key))
                    out.append(Put("seen", key, b""))
                    self._seen_new += 1
            elif name == "priors":
                out.append(Put("priors", key, value))
                handover._refresh.has_priors = True
            elif name == "claims":  # the content slice's claim book (claims rule 8), loaded by the member
                out.append(Put("claims", key, value))
            else:
                raise BundleError(f"slice bundle table {name!r} is unknown to this polecat")
        return n

    def _merge(self, host: str, got: HostState | None) -> None:
        """The bundle's record of ``host`` (None: it has none) merged into this frontier's (rule 3)."""
        if self._had_before(host):
            self._had.append(host)
        self._merged.add(host)
        self._handover._adopt_host(host, got, 0, self._waits)
        if host in self._seeds:  # rule 11: in memory now, so saved with the next commit, no write here
            self._seeds.discard(host)
            self._handover._table.mark_seed(host, None, host_row(host), [])

    def _had_before(self, host: str) -> bool:
        """Whether ``host`` had URLs queued here before this adoption (rule 10), asked once: at its record's
        merge, or at its first URL record when that comes first (a host whose record the bundle lacks)."""
        had = self._had_here.get(host)
        if had is None:
            peeked = self._handover._table.peek(host)
            had = self._had_here[host] = peeked is not None and peeked.queued > 0
        return had


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
        self._adopting: Counter[int] = Counter()
        """Slices of the adoptions under way (rule 9): not released meanwhile."""

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

    def begin_export(self, snapshot: CommittedSnapshot, slices: Iterable[int], now: float,
                     fence: Fence | None = None, *, books: bool = True,
                     budget: int | None = None) -> SliceExport:
        """:meth:`export_slices` of ``snapshot``, taken right after a commit, in steps of at most
        ``budget`` rows (:data:`EXPORT_STEP` by default; rule 8); close the snapshot once the export is
        done."""
        budget = EXPORT_STEP if budget is None else budget
        if budget < 1:
            raise ValueError(f"an export step reads at least one row, not {budget}")
        ids = check_slices(slices)
        mark = int(snapshot.get("meta", QSEQ) or b"0")
        steps = snapshot.export_steps(ids, now, fence=fence, books=books, budget=budget)
        return SliceExport(self, ids, steps, mark)

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
        strays the cluster ships to their owners, with the refetch requests kept there for their owners
        (intake rule 5). Read from the per-slice counts (host_table rule 9): a look at the fenced slices,
        not a pass over the hosts."""
        counts, fenced = self._table.queued_in, self._table.fenced
        queued = Counter({s: counts[s] for s in fenced if counts[s] > 0})
        return queued + self._intake.pending_refetches(fenced)  # intake rule 5: they go as URLs do

    def begin_adopt(self, bundle: SliceBundle, now: float, *,
                    wait_from: float | None = None) -> SliceAdoption:
        """:meth:`adopt` in steps (rule 9): each :meth:`SliceAdoption.step`'s writes applied before the
        next; :meth:`SliceAdoption.close` once it ends or is given up. FrontierError while one of the
        slices is being released here (rule 7)."""
        leaving = self._table.leaving & bundle.ids
        if leaving:  # rule 7
            raise FrontierError(f"{len(leaving)} slices of this bundle are being released here: send it "
                                "again once they are")
        self._adopting.update(bundle.ids)
        return SliceAdoption(self, bundle, now, now if wait_from is None else max(now, wait_from))

    def adopt(self, bundle: SliceBundle, now: float, *,
              wait_from: float | None = None) -> Decided[AdoptReport]:
        """Take over the slices of ``bundle``, merged with what is here (rule 3), in one call (a tool, a
        test: :meth:`begin_adopt` on a node's loop, a restore's included). Each adopted host waits one full
        interval from ``now`` (the exporter's last request may have just started), or from ``wait_from``
        when later (a restore from a member that may still be aborting its requests: ownership rule 11); a
        queued URL this frontier has already seen is not queued twice, and a URL queued here that the
        exporter had finished (a config seed queued by a node that joins after its owner fetched it) is
        dropped."""
        adoption = self.begin_adopt(bundle, now, wait_from=wait_from)
        try:
            step = adoption.step(budget=1 << 62)  # one step: its writes are applied once it ends
        finally:
            adoption.close()
        if step.value is None:
            raise AssertionError("an adoption without a budget ends in one step")
        return Decided(step.value, step.writes)

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

    def begin_release(self, slices: Iterable[int]) -> Decided[SliceRelease]:
        """Begin dropping everything about ``slices`` from this frontier (after their new owner adopted
        them), in steps (rule 7). FrontierError while a lease is in flight there (rule 4), a URL was
        queued there since their export (rule 5) or an adoption of one of them is under way (rule 9)."""
        ids = check_slices(slices)
        busy = self.in_flight_in(ids)
        if busy:
            raise FrontierError(f"cannot release slices with {busy} leases in flight")
        late = self.queued_since_export(ids)
        if late:  # rule 5
            raise FrontierError(f"cannot release slices with {late} URLs queued since their export: "
                                "export and send them again first")
        again = len(ids & self._table.leaving)
        if again:
            raise FrontierError(f"{again} of these slices are being released already")
        adopting = len(ids & self._adopting.keys())
        if adopting:  # rule 9
            raise FrontierError(f"{adopting} of these slices are being adopted here: release them once "
                                "that is done")
        return Decided(self._releasing(ids), [Put("meta", RELEASING, _encode_slices(self._table.leaving))])

    def resume(self) -> SliceRelease | None:
        """The release a commit holds the beginning of (rule 7), begun again; None when there is none.
        Called at the open, before anything is queued."""
        raw = self._db.get("meta", RELEASING)
        if raw is None:
            return None
        ids = check_slices(int(s) for s in bytes(raw).decode().split(",") if s)
        log.info("frontier: finishing the release of %d slices a commit holds the beginning of", len(ids))
        return self._releasing(ids)

    def _releasing(self, ids: frozenset[int]) -> SliceRelease:
        """Rule 7: the slices marked releasing, their hosts in memory listed (one pass)."""
        for s in ids:
            self._exported.pop(s, None)
        self._table.leaving |= ids
        held: dict[int, list[str]] = {}
        for host in self._hosts:
            s = slice_of(host)
            if s in ids:
                held.setdefault(s, []).append(host)
        self._db.pending += 1
        return SliceRelease(self, ids, held)

    def _released(self, ids: frozenset[int]) -> list[Write]:
        """The end of the release of ``ids``: the ``meta`` row names the releases still under way, and
        the refetch requests held for it are written again (intake rule 5)."""
        table = self._table
        table.leaving -= ids
        self._intake.forget_recent()
        self._db.pending += 1
        return [Put("meta", RELEASING, _encode_slices(table.leaving)) if table.leaving else Delete(
            "meta", RELEASING), *self._intake.released(ids)]

    def release_slices(self, slices: Iterable[int]) -> list[Write]:
        """:meth:`begin_release` and every step at once (no loop to give a turn to: a tool, a test);
        FrontierError as :meth:`begin_release`."""
        begun = self.begin_release(slices)
        release, out = begun.value, list(begun.writes)
        while True:
            step = release.step(budget=1 << 62)
            out += step.writes
            if step.value:
                return out


def _encode_slices(ids: frozenset[int]) -> bytes:
    return ",".join(str(s) for s in sorted(ids)).encode()
