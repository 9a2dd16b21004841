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
5. Its containers (:attr:`hosts`, :attr:`scheduled`, :attr:`leases`, :attr:`parked`, the pattern maps,
   rule 17's sets and heap) are never replaced, so a part may keep a reference to one.
6. A bounded working set: :attr:`hosts` holds the records of the hosts in rotation; the others live in
   the ``hosts`` table only. At a commit, past ``frontier.working_hosts`` records, the table writes and
   drops the records that will be leased last (no URL queued first, then the latest due) down to three
   quarters of the bound, each filed at its turn in the heap. Never dropped: a host in flight or leased,
   with a request released before its record (leasing.py rule 7), with strikes (politeness rule 6 counts
   them in memory only; unless it is parked), or of a fenced slice. A record read back (:meth:`state`,
   :meth:`peek`, :meth:`refill`) waits one interval from the open (politeness rule 7) and from any
   throttle changed since (:attr:`rethrottled`), so dropping it loses no politeness state. A host parked
   in this run is dropped first (rule 11).
7. A host out of memory with URLs queued has one row in ``ready`` at its record's next-allowed time
   (keys.py rule 6): when no host in memory is due, the ready scan (:meth:`refill`) reads the rows due in
   time order into memory, as many as it has room for (the hosts in rotation are finished first). A row
   is stale, and dropped when read, when its host is in memory, has no record (a released slice) or a
   record of another time.
8. Each host in memory has a ``resident`` row from the first commit it is in memory at, until it is
   dropped: a restart reads those (never the whole ``hosts`` table) and the ``ready`` rows bring back the
   rest. Data written before the index (0.2.0) has no ``ready`` rows: the open builds them once
   (:meth:`load`, marked by :data:`READY_INDEX` in ``meta``).
9. While some slice is fenced (a member of a cluster), :attr:`queued_in` counts the URLs queued in each
   slice, kept with every change of a host's count (:meth:`count_queued`); a slice newly fenced is
   counted afresh by :meth:`SliceHandover.set_owned` (the hosts in memory, which it reads then anyway,
   and that slice's records out of memory, read by its prefix), and a slice released is 0. The strays
   the cluster looks for every few seconds are read from it without a pass over the hosts, and a change
   of the fenced set reads the records of the slices it fences, not of every fenced slice again.
10. A seed of a host new to the table, while memory holds the hosts a full working set is cut down to
   (rule 6: three quarters of the bound) or more, is filed cold (:meth:`enqueue_cold`): its record and
   its ``ready`` row (due at the seed's admission) are written at once and it never enters memory, as
   if taken in and dropped at the next commit, which rule 6 would do to it (the hosts already in
   rotation are leased first). A seeds file of a million hosts thus never fills memory to be cut down
   again every few thousand seeds. Not a host of a fenced slice (rule 3 keeps those in memory). A batch's
   cold ``ready``, ``queue`` and ``hosts`` rows are one write a table (polecat/writes.py rule 5).
11. A parked host (:attr:`parked`) is skipped for the rest of the run and tried again by the next at its
   record's own next-allowed time (a user who fixed what made a crawl give up resumes it at once). Its
   record is the first rule 6 drops: then it gets no ``ready`` row (nothing leases it in this run) and
   its ``resident`` row holds its reason instead of nothing; a URL queued for it later in the run reads
   that row and takes it back parked (:meth:`held`). The next open (:meth:`load`) turns each such row
   into a ``ready`` row at the record's next-allowed time. Memory thus holds the parked hosts of the
   working set only, whatever a run gives up (a seeds file of dead hosts parks them by the million);
   :attr:`parked_out` counts the others.
12. Host counters: :attr:`known_hosts`, :attr:`with_queue` (hosts with URLs queued), :attr:`queued` and
   :attr:`fetched` (pages fetched, over every host record) follow every change of a record they count
   (:meth:`count_queued`, :meth:`enqueue`, :meth:`count_fetched`, a host new to the table) and are written
   to ``meta`` (:data:`HOST_COUNTS`) with each commit, in the transaction of the records they count:
   ``polecat status`` reads four numbers, not every host record. A released slice's records are
   subtracted as they are read (polecat/frontier/handover.py), an adopted host's added as it merges. Data
   written before them is counted once, at the first open (:meth:`load`).
13. A host key with a port (``host:port``) in memory is listed under its host name (:attr:`ported`, kept
   as records enter and leave memory): an operator control naming one host (polecat/frontier/controls.py)
   finds the records in memory it matches by :meth:`named`, not by a pass over memory.
14. Each host record has a number (``HostState.num``, in its record: keys.py rule 1), which its ``queue``
   keys hold instead of its name: a host new to the table takes the next of :attr:`HostTable.hseq` (one
   counter for every slice, kept in ``meta`` with each commit beside ``qseq``, so a number is never
   given twice, even to a host whose slice left and came back). The upgrade from schema 4 numbers the
   hosts in key order (polecat/frontier/migrate.py).
15. Each host key in memory is listed under every parent domain of its name of two labels or more
   (:attr:`parents`: ``a.b.example.com`` under ``b.example.com`` and ``example.com``), kept as records
   enter and leave memory with rule 13's list: a ``*.`` control (polecat/frontier/controls.py) finds the
   records in memory it matches by :meth:`under`, in O(hosts matching), not by a pass over memory. A
   pattern of one label (``*.com``) is the exception: its hosts are not listed (each name would be, once
   more), and it walks memory.
16. :attr:`HostTable.quarantined` counts the hosts in memory backing off after failures, not parked
   (:func:`quarantined`), kept as records enter and leave memory and at each change of a record's
   failures or parked flag (:meth:`HostTable.health`: politeness's rules change them after an attempt,
   polecat/frontier/leasing.py and hops.py, and a hand-over merges them, handover.py): ``/metrics``
   reads one number, not every host in memory.
17. The scheduled hosts (:attr:`HostTable.scheduled`, not parked) are counted ready (due) or waiting, and
   the waiting ones backing off after a failure or strike, as they change: each is scheduled and
   unscheduled through :meth:`HostTable.schedule` and :meth:`HostTable.unschedule`, and :meth:`advance`
   moves the hosts that fell due since it last ran from waiting to ready, in time order (their own heap,
   :attr:`HostTable.due_heap`; a lease and a scrape advance it). ``/metrics`` and the stats read counts
   and one heap head (the next waiting host's time), no host record. Ready counts the hosts due at the
   latest time advanced to. One call pops at most :data:`ADVANCE_STEP` entries: after an open the hosts of
   the working set fall due together (each waits one interval from the open, rule 6), and one lease call
   moved 32,048 of them in 57 ms of CPU at 1M hosts (benchmarks/README.md "Issue 39: pop+complete after a
   cold open, at equal hosts"). Stopped short, it has advanced to just before the earliest entry left,
   and the next call (a lease or a scrape) goes on from there: meanwhile the hosts not reached count as
   waiting, and the next waiting time may be past.
18. Rule 6's cut is made :data:`CUT_BATCH` records a commit at most: once memory is full, each commit
   drops up to that many until three quarters of the bound are left (more only where memory went past
   the bound itself, to get back under it). The heap entries of the records dropped are stale (rule 2):
   the heaps are rebuilt when they are a quarter of the ready heap or more, else left to be popped as time
   passes (leasing.py rule 9 bounds the pops of one lease call) or to rule 20's bound. One cut of 12,500
   records at once (their writes, the ranking of 50,000, three heaps rebuilt) held the event loop 150-230
   ms in a 100,000-host breadth crawl (benchmarks/README.md "Issue 39: loop stalls, second pass").
19. A host scheduled is one ``(at, host)`` entry, the same tuple in each heap it goes into (the ready heap,
   the warm heap, the due heap), and a rebuild of the heaps (rule 18) makes one entry a host: each tuple
   is an object the garbage collector's young pass traverses until it finds it holds only a float and a
   string (three a schedule made ~25,000 of the ~98,000 objects of a young pass of 67 ms in a 1M-host
   breadth crawl: benchmarks/README.md "Issue 39: the loop in the 1M-host breadth crawl").
20. The heaps' stale entries are bounded whatever pops them: at every commit, once a heap holds more than
   twice the scheduled hosts and :data:`HEAP_SLACK` entries, the three heaps are rebuilt from
   :attr:`HostTable.scheduled` (after the cut of rule 18), so a rebuild, O(scheduled), comes after as many
   stale entries as live ones at least. Stale entries are popped only by leases (as their time comes,
   leasing.py rule 9) and :meth:`HostTable.advance`; a feed faster than the leases (a seeds file, URLs
   pushed into a frontier that leases nothing) takes a host dropped by rule 6 back into memory and
   schedules it again, an entry each time: ~0.5 per URL in each heap pushing 10M URLs over 100,000 hosts
   through a working set of 50,000, ~1 GB of the process's anonymous memory at 10M URLs
   (benchmarks/README.md, "Issue 39: anonymous memory at 10M URLs").
21. Rule 13's lists of host keys are tuples of strings, made anew at each change (a host name has one
   key or a few): the collector untracks a tuple of untracked items at the first pass that meets it,
   where a list stays tracked for its life, one object a host with a port in memory for every pass to
   traverse (~37,500 of the 180,000-250,000 tracked objects outside the frozen ones in a 1M-host
   breadth crawl; benchmarks/README.md "Issue 39: the collector's full passes").
22. Rule 18's ranking can be made in steps before a commit (:meth:`HostTable.rank_step`; the node's
   periodic commit does, polecat/node/commits.py rule 11): a pass over a copy of the keys in memory, at
   most so many records a step, keeping the best candidates for the cut (a quarter more than it drops,
   for those that change meanwhile). The commit's cut then ranks those alone, each checked again and
   ranked by what it is at the commit (one leased or made busy meanwhile is kept; one taken into memory
   after the copy was made waits for the next cut). A commit without a finished ranking (on the loop:
   the stop, tests) ranks memory at once, as before. One ranking of the 50,000 records of a 1M-host
   breadth crawl, with the commit's writes, held its loop 45-68 ms (benchmarks/README.md "Issue 39: a
   million pages of a 1M-host breadth crawl").
23. A node's periodic commit makes the rebuilds of rules 18 and 20 in steps (:meth:`HostTable.heaps_step`,
   polecat/node/commits.py rule 12), one heap a step: the ready heap from :attr:`HostTable.scheduled`,
   then the due heap and the warm heap from the ready heap's live entries (rule 19's tuples). Each heap
   is whole after each step (it holds every host it must; stale entries only wait to be popped, rule 2),
   so frontier calls go on between the steps. A commit on the loop (the stop, tools, tests) rebuilds all
   three at once. All three in one step at the working-set bound of 50,000 scheduled hosts:
   benchmarks/README.md "Issue 39: page work a loop turn".
24. The queue bands' count (:attr:`HostTable.bands`) follows every queue change once it exists. A data
   dir opened with nothing queued and no count starts with a count of nothing, so a crawl's count is
   never made by a pass. One opened with URLs queued and no count (0.3.0's, or written by another
   path) is counted in steps of at most :data:`BAND_STEP` queue keys (:meth:`HostTable.band_step`, one
   a ``/metrics`` scrape), each going on after the last key counted: a key put or deleted at or before
   that key changes the count at once, one after it is met by a later step. Until the last step the
   bands are not reported and the count is not written to ``meta``. In one call, the first count held
   the loop 597 ms at 50M URLs (benchmarks/README.md "At 50M URLs over 1M hosts: the jobs, run to the
   end").
25. A host that leasing.py rule 11 holds back (due, cold, its lease a TLS connection while the
   connections are full) stays scheduled, due at its time, with its entry (rule 19's tuple) moved from
   the ready heap to :attr:`HostTable.held_heap` (:meth:`HostTable.hold`), so the leases that look for a
   host to go past it read it once, not at each call. Rule 2 holds there too (a host rescheduled, leased,
   dropped or fenced since leaves a stale entry), :meth:`HostTable.next_due` counts its head, and rule
   20's bound counts it: rule 23's rebuild of the ready heap from :attr:`scheduled` drops the held heap's
   stale entries and leaves its hosts out of the ready heap (put back, each would be read again by the
   next leases while full).
26. A seed's host whose record does not take the seed mark with a queued seed (polecat/frontier/intake.py
   rule 9) is marked by :meth:`HostTable.mark_seed`: in memory, saved with the next commit (rule 1); out of
   memory, its row written at once; with no record (its seed refused or seen, or another member's), by a
   ``seedhost`` row of ``ops`` as in schema 5 (polecat/frontier/keys.py rule 4), written once: a record
   made for it would count as a host this frontier knows (rule 12: ``scope.max_hosts``, ``polecat
   status``), in every worker of a ``--workers N`` crawl for each seed host of the others. So the scope
   asks the record, then that row (:meth:`HostTable.is_seed`).
27. A host whose count falls to nothing (or below) as a URL moves to done has its queue read at the next
   commit (:meth:`HostTable.host_writes`, when every decision's writes are applied; one seek, the usual
   case): a count that is not its rows' is made theirs, a warning logged, and the host scheduled. A
   record that counted fewer URLs than its queue held was never leased again once its count was spent,
   its other URLs left queued for good: what a kill -9 left before polecat/node/commits.py rule 16 (data
   dirs of 0.3.0 may hold such records). Leasing repairs a count past the rows as it finds the queue
   empty (leasing.py's ``_lease_from``). The queue bands' count (rule 24) is left as it is: it cannot
   tell the rows it missed.
28. A commit is whole whatever is decided while the node readies it (polecat/node/commits.py rule 16):
   :meth:`HostTable.late_writes`, taken in the same step of the loop as the commit begins, writes what
   changed since its :meth:`HostTable.host_writes`: a decision's queue rows never go into one commit and
   its host's record, its ``resident`` row or the counters (the queue's sequence among them: a number
   given twice is a queued URL overwritten) into the next.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain, islice, repeat

from polecat.config import PolitenessConfig
from polecat.errors import FrontierError
from polecat.frontier.keys import (
    MAX_HOST_NUM,
    SEED_HOST,
    host_of_row,
    host_row,
    op_key,
    priority_band,
    queue_key,
    queue_prefix,
    ready_key,
    ready_row,
    seed_queue_keys,
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
    encode_new_hosts,
    rank,
)
from polecat.frontier.slices import PREFIX_LEN, SLICES, slice_of
from polecat.frontier.tables import FrontierTables
from polecat.frontier.traps import ShapeBudget
from polecat.hosts import HostPatternMap, hostname
from polecat.writes import Delete, Put, PutRows, Write

log = logging.getLogger("polecat.frontier")

UrlWritten = Callable[[str, bytes, UrlRecord | None, list[Write]], None]
"""The hook :attr:`HostTable.url_written`."""


def _no_index(host: str, ukey: bytes, rec: UrlRecord | None, out: list[Write]) -> None:
    """:attr:`HostTable.url_written` of a table with no refresh part (tests of the table alone)."""


BANDS = b"bands"
"""Meta key: the queue bands' counts (:attr:`HostTable.bands`), once counted."""
READY_INDEX = b"ready_index"
"""Meta key: the ``ready`` and ``resident`` rows are kept (rule 8); absent in data written before them."""
HOST_COUNTS = b"host_counts"
"""Meta key: the host counters of rule 12 (JSON); absent in data written before them."""
HOST_SEQ = b"hseq"
"""Meta key: the last host number given (rule 14)."""
QSEQ = b"qseq"
"""Meta key: the queue sequence (:attr:`HostTable.qseq`) at the commit."""
BAND_STEP = 20_000
"""Queue keys one step of a queue bands' count reads at most (rule 24): ~1 us each."""
REFILL_ROWS = 256
"""``ready`` rows read per :meth:`HostTable.refill` at most: a lease call's work stays bounded."""
COLD_RETRY = 0.05
"""Seconds before a lease asks again when ``ready`` rows are due but memory is full (rule 7)."""
CutKey = tuple[float, bool, str]
"""How rule 6 ranks a record it may drop: the largest first (no URL queued or parked, then the latest due;
parked first among the former)."""


@dataclass(slots=True)
class CutRanking:
    """Rule 22: a ranking for the cut made in steps over ``keys`` (the keys in memory when it began)."""

    keys: list[str]
    want: int
    """Candidates kept: the cut and a quarter more."""
    at: int = 0
    """Keys ranked so far."""
    best: list[CutKey] = field(default_factory=list)
    """The ``want`` largest keys so far, a min-heap."""

    @property
    def done(self) -> bool:
        return self.at >= len(self.keys)


CUT_BATCH = 1024
"""Host records rule 6's cut drops at one commit at most (rule 18): ~16 us each (their writes applied)."""
ADVANCE_STEP = 2048
"""Due-heap entries one :meth:`HostTable.advance` pops at most (rule 17): ~2 us each with the counting, a few
ms a call."""
HEAP_SLACK = 4096
"""Heap entries past twice the scheduled hosts that rule 20 leaves to be popped."""


def quarantined(st: HostState) -> bool:
    """Whether the host of ``st`` backs off after failures and is not parked (rule 16)."""
    return st.failures > 0 and not st.parked


def parent_domains(name: str) -> list[str]:
    """The parent domains of ``name`` of two labels or more, nearest first (rule 15)."""
    out: list[str] = []
    dot = name.find(".")
    while dot >= 0:
        name = name[dot + 1:]
        dot = name.find(".")
        if dot < 0:
            return out
        out.append(name)
    return out


class HostTable:
    """Host records, the ready heap, leases and queue counts (see the module docstring)."""

    def __init__(self, db: FrontierTables, pol: PolitenessConfig, shapes: ShapeBudget,
                 working_hosts: int = 50_000) -> None:
        self.db = db
        self.working_hosts = working_hosts
        """Host records kept in memory at a commit at most (rule 6)."""
        self.pol = pol
        self.shapes = shapes
        """URLs queued per host and shape this run (traps rule 2): counted here, judged by the intake."""
        self.hosts: dict[str, HostState] = {}
        self.heap: list[tuple[float, str]] = []
        self.scheduled: dict[str, float] = {}
        """When each host in the ready heap is due (rule 2); changed through :meth:`schedule` and
        :meth:`unschedule` only (rule 17)."""
        self.due: set[str] = set()
        """The scheduled hosts, not parked, due at the time :meth:`advance` last ran (rule 17)."""
        self.backing_off: set[str] = set()
        """The scheduled hosts, not parked and not yet due, with failures or strikes (rule 17)."""
        self.due_heap: list[tuple[float, str]] = []
        """``(at, host)`` of the scheduled hosts not yet in :attr:`due` (stale ones too, as rule 2 says)."""
        self.advanced_to = -math.inf
        """The latest time :meth:`advance` ran at (rule 17)."""
        self.leases: dict[str, Lease] = {}
        """The lease in flight of each host that has one."""
        self.finishing: dict[str, set[bytes]] = {}
        """The queue keys of each host whose requests ended and were released before their URLs are
        recorded done (leasing.py rule 7): still queued, never leased again meanwhile."""
        self.parked: dict[str, str] = {}
        """Hosts in memory parked in this run, with the reason (rule 11)."""
        self.parked_out = 0
        """Hosts parked in this run whose records were dropped from memory since (rule 11)."""
        self.fenced: frozenset[int] = frozenset()
        """Slices whose hosts are not leased here (rule 3; polecat/frontier/handover.py sets them)."""
        self.leaving: frozenset[int] = frozenset()
        """Slices whose release is under way (polecat/frontier/handover.py rule 7): nothing is queued in
        them (:meth:`refuse_leaving`)."""
        self.queued_in: list[int] = [0] * SLICES
        """URLs queued per slice, while :attr:`fenced` is not empty (rule 9)."""
        self.throttle: HostPatternMap[float] = HostPatternMap()
        """Rate overrides and blocks by host pattern (polecat/frontier/controls.py sets them)."""
        self.blocked: HostPatternMap[bool] = HostPatternMap()
        self.queued = 0
        self.with_queue = 0
        """Hosts with URLs queued, in memory or not (rule 12)."""
        self.fetched = 0
        """Pages fetched, summed over every host record (rule 12)."""
        self.accepted = 0
        """URLs accepted into the queues in this run."""
        self.qseq = int(db.get("meta", QSEQ) or b"0")
        """The FIFO sequence number of the last queue key (persisted in ``meta``)."""
        self.hseq = int(db.get("meta", HOST_SEQ) or b"0")
        """The last host number given (rule 14; persisted in ``meta``)."""
        stored_bands = db.get("meta", BANDS)
        self.bands: Counter[str] | None = (Counter(json.loads(stored_bands)) if stored_bands
                                           else Counter() if db.count("queue") == 0 else None)
        """Queued URLs by priority band (rule 24), kept across restarts too (in ``meta`` with each
        commit): ``/metrics`` never counts the queue again. None: not counted yet."""
        self.band_cursor: bytes | None = None
        """While the count is made in steps (rule 24): the last queue key counted (b"": none yet)."""
        self.done: Counter[str] = Counter()
        """Outcomes in this run; ``done_total`` (persisted in ``meta``) counts them over all runs."""
        self.done_total: Counter[str] = Counter(json.loads(db.get("meta", b"done") or b"{}"))
        self._dirty: set[str] = set()
        self.dropped_blocked = 0
        """Queued URLs dropped by blocks in this run (:meth:`drop_queue`)."""
        self.opened_at = 0.0
        """When this frontier opened: every record read waits one interval from then (rule 6)."""
        self.rethrottled: HostPatternMap[float] = HostPatternMap()
        """When each throttle pattern changed in this run (rule 6; polecat/frontier/controls.py sets it)."""
        self.cold_head: float | None = None
        """No ``ready`` row is due before this (None: there is none); may be early, never late (rule 7)."""
        self._arrived: set[str] = set()
        """Hosts taken into memory since the last commit: their ``resident`` rows are due (rule 8)."""
        self.known_hosts = 0
        """Hosts this frontier knows, in memory or not (kept as they come and go: a figure the status
        asks for while a commit may be in flight, when the tables cannot be read)."""
        self.cold_rows = 0
        """``ready`` rows, about (rows found stale are counted until read)."""
        self._cutting = False
        """Rule 6's cut is under way, :data:`CUT_BATCH` records a commit (rule 18)."""
        self._ranking: CutRanking | None = None
        """The next cut's ranking made in steps (rule 22), if one was begun since the last commit."""
        self._heaps_due = 0
        """Heaps left to rebuild (rule 23): 3, the ready heap first, then the due and warm heaps."""
        self.heaps_in_steps = False
        """Whether the heaps' rebuilds are made in steps (rule 23): set by the node's periodic commit."""
        self.ported: dict[str, tuple[str, ...]] = {}
        """The host keys in memory with a port, by host name (rule 13)."""
        self.parents: dict[str, str | set[str]] = {}
        """The host keys in memory by parent domain of their name (rule 15): one key as itself, more as a
        set (most domains have one host in memory: a set each would cost ~200 B a host)."""
        self.quarantined = 0
        """Hosts in memory backing off after failures, not parked (rule 16)."""
        self.warm: dict[str, float] = {}
        """When the last request of each host in memory ended (leasing.py rule 6)."""
        self.warm_heap: list[tuple[float, str]] = []
        """The entries of :attr:`heap` of the hosts in :attr:`warm` (stale ones too, as rule 2 says)."""
        self.held_heap: list[tuple[float, str]] = []
        """The entries of the hosts leasing.py rule 11 holds back, out of :attr:`heap` (rule 25)."""
        self._emptied: set[str] = set()
        """Hosts whose count ran out since the last commit (rule 27)."""
        self._pending: list[Write] = []
        """Row writes of records read back by :meth:`state`, for the next commit (rules 7-8)."""
        self.url_written: UrlWritten = _no_index
        """Called with every write of a URL record (host, its key, the record or None: deleted, the
        decision's writes): the refresh indexes follow them (polecat/frontier/refresh_index.py rule 4)."""

    def load(self, now: float) -> list[Write]:
        """Open: the hosts in memory at the last commit come back (rule 8), the others stay in the
        ``ready`` index (built here once for data written before it). A request may have been in flight
        when the previous process died, uncommitted: every host therefore waits one interval from
        ``now``, so a restart never sends a burst (the dead process's requests all started before it)."""
        self.opened_at = now
        db = self.db
        out: list[Write] = []
        first = next(db.items("ready"), None)
        self.cold_head = ready_row(first[0])[0] if first is not None else None
        built: list[tuple[float, str]] = []
        if db.get("meta", READY_INDEX) is None:
            built = [(st.next_allowed, host_of_row(key))
                     for key, raw in db.items("hosts") if (st := decode_host(raw)).queued > 0]
            out += [Put("ready", ready_key(due, host), b"") for due, host in built]
            out.append(Put("meta", READY_INDEX, b"1"))
            self.cold_head = min((due for due, _ in built), default=None)
        parked_rows = 0
        for key, value in db.items("resident"):
            host = key.decode()
            raw = db.get("hosts", host_row(host))
            if raw is None or value:  # its slice was released, or it was parked out of memory (rule 11)
                out.append(Delete("resident", key))
                if raw is not None and (st := decode_host(raw)).queued > 0:
                    out.append(Put("ready", ready_key(st.next_allowed, host), b""))
                    parked_rows += 1
                    if self.cold_head is None or st.next_allowed < self.cold_head:
                        self.cold_head = st.next_allowed
                continue
            self._take(host, decode_host(raw))
        self._arrived.clear()  # their rows are there
        self.queued = db.count("queue")
        self.known_hosts = db.count("hosts")
        self._load_counts()
        self.cold_rows = db.count("ready") + parked_rows + (len(built) if built else 0)
        return out

    def _load_counts(self) -> None:
        """The counters of rule 12 as the last commit wrote them, or counted once from every record (data
        written before them)."""
        stored = self.db.get("meta", HOST_COUNTS)
        if stored is not None:
            counts = json.loads(stored)
            self.with_queue, self.fetched = counts["with_queue"], counts["fetched"]
            return
        self.with_queue = self.fetched = 0
        for _, raw in self.db.items("hosts"):
            st = decode_host(raw)
            self.with_queue += st.queued > 0
            self.fetched += st.fetched

    def _take(self, host: str, st: HostState) -> HostState:
        """Keep the record ``st`` read from the table in memory, waiting as rule 6 says, and schedule it."""
        rate = self.rate(host)
        wait_one_interval(self.pol, rate, st, self.opened_at)
        since = self.rethrottled.get(host)
        if since is not None:
            wait_one_interval(self.pol, rate, st, since)
        st.parked = host in self.parked
        self.hosts[host] = st
        self._list(host, st)
        self._arrived.add(host)
        self.wake(host, st, st.next_allowed)
        return st

    def _list(self, host: str, st: HostState) -> None:
        """``host``, whose record ``st`` enters memory, listed and counted (rules 13, 15 and 16)."""
        self.quarantined += quarantined(st)
        name = hostname(host)
        if name != host:  # rule 13
            self.ported[name] = (*self.ported.get(name, ()), host)  # rule 21: a tuple, untracked
        parents = self.parents
        for parent in parent_domains(name):  # rule 15
            had = parents.get(parent)
            if had is None:
                parents[parent] = host
            elif isinstance(had, str):
                parents[parent] = {had, host}
            else:
                had.add(host)

    def _unlist(self, host: str, st: HostState) -> None:
        """``host``, whose record ``st`` leaves memory, unlisted and counted no more (rules 13, 15, 16)."""
        self.quarantined -= quarantined(st)
        name = hostname(host)
        if name != host:
            keys = tuple(key for key in self.ported[name] if key != host)
            if keys:
                self.ported[name] = keys
            else:
                del self.ported[name]
        parents = self.parents
        for parent in parent_domains(name):
            had = parents[parent]
            if isinstance(had, str):
                del parents[parent]
            else:
                had.discard(host)
                if len(had) == 1:
                    parents[parent] = had.pop()

    def named(self, name: str) -> list[str]:
        """The host keys in memory of the host ``name`` (``name`` itself, and with any port: rule 13)."""
        return [*([name] if name in self.hosts else []), *self.ported.get(name, ())]

    def under(self, domain: str) -> list[str] | None:
        """The host keys in memory of ``domain`` and its subdomains (rule 15), None: ``domain`` has one
        label, whose hosts are not listed (the caller walks memory)."""
        if "." not in domain:
            return None
        below = self.parents.get(domain)
        return self.named(domain) + ([below] if isinstance(below, str) else list(below or ()))

    def peek(self, host: str) -> HostState | None:
        """The record of ``host`` (None: unknown), read from the table when it is not in memory, without
        taking it into memory: a reader that changes it must use :meth:`state`."""
        st = self.hosts.get(host)
        if st is None:
            raw = self.db.get("hosts", host_row(host))
            if raw is not None:
                st = decode_host(raw)
        return st

    def health(self, st: HostState, was: bool) -> None:
        """The failures or parked flag of ``st``, in memory, changed; :func:`quarantined` answered
        ``was`` before (rule 16)."""
        self.quarantined += quarantined(st) - was

    def rate(self, host: str) -> float:
        """The configured request rate of ``host`` (its throttle, else the default), before AIMD."""
        return self.throttle.get(host) or self.pol.rate

    def state(self, host: str) -> HostState:
        """The record of ``host`` in memory: read back from the table (rule 6), or a new one."""
        st = self.hosts.get(host)
        if st is None:
            st = self.held(host, self.peek(host))
        return st

    def held(self, host: str, peeked: HostState | None) -> HostState:
        """:meth:`state` of ``host`` when :meth:`peek` answered ``peeked`` since (no second read)."""
        st = self.hosts.get(host)
        if st is not None:
            return st
        if peeked is None:
            st = self.hosts[host] = HostState(num=self.new_num())
            self._list(host, st)
            self.known_hosts += 1
            self._arrived.add(host)
            return st
        reason = self.db.get("resident", host.encode())
        if reason:  # parked in this run, out of memory (rule 11): it comes back parked, with no ready row
            self.parked[host] = reason.decode()
            self.parked_out = max(0, self.parked_out - 1)
        elif peeked.queued > 0:
            self._pending.append(Delete("ready", ready_key(peeked.next_allowed, host)))
            self.cold_rows = max(0, self.cold_rows - 1)
        return self._take(host, peeked)

    def mark_seed(self, host: str, stored: HostState | None, row: bytes, out: list[Write]) -> None:
        """Mark ``host`` a seed's host (rule 26): ``stored``, its record as read out of memory (None: it
        has none, or it is in memory), ``row`` its ``hosts`` key; the writes go to ``out``."""
        st = self.hosts.get(host)
        if st is not None:
            if not st.seed:
                st.seed = True
                self.save(host)
            return
        if stored is None:
            key = op_key(SEED_HOST, host)
            if self.db.get("ops", key) is None:
                out.append(Put("ops", key, b""))
                self.db.pending += 1
            return
        if stored.seed:
            return
        stored.seed = True
        out.append(Put("hosts", row, encode_host(stored)))
        self.db.pending += 1

    def is_seed(self, host: str) -> bool:
        """Whether ``host`` is a seed's host (rule 26): its record's mark, else its ``seedhost`` row."""
        st = self.peek(host)
        if st is not None and st.seed:
            return True
        return self.db.get("ops", op_key(SEED_HOST, host)) is not None

    def new_num(self, count: int = 1) -> int:
        """The number of a host new to the table (rule 14); of ``count`` hosts: the last of theirs."""
        if self.hseq + count > MAX_HOST_NUM:
            raise FrontierError(f"this frontier has numbered {self.hseq} hosts: {count} more pass the "
                                f"{MAX_HOST_NUM} its queue keys hold (polecat/frontier/keys.py rule 1)")
        self.hseq += count
        return self.hseq

    def cold_ready(self, now: float) -> bool:
        """Whether :meth:`refill` would take a host now: a ``ready`` row may be due, and memory has room
        (rule 7; the caller asks when no host in memory is due)."""
        head = self.cold_head
        return head is not None and head <= now and len(self.hosts) < self.working_hosts

    def next_ask(self, now: float) -> float | None:
        """When a lease may next find a host, no host in memory being due now: the heap's first time, or
        the ``ready`` index's (at once when rows are due and memory has room for them, else after
        :data:`COLD_RETRY`, by when a commit has made room). None: nothing is queued."""
        at = self.heap[0][0] if self.heap else None
        head = self.cold_head
        if head is not None and head <= now:
            head = now if len(self.hosts) < self.working_hosts else now + COLD_RETRY
        if head is None or (at is not None and at < head):
            return at
        return head

    def refill(self, now: float, out: list[Write]) -> None:
        """Take the hosts of the earliest ``ready`` rows due at ``now`` into memory and the heap, at most
        :data:`REFILL_ROWS` and as many as memory has room for (rule 7); the rows' deletes, and the
        queues of blocked hosts, go to ``out``."""
        db = self.db
        self.cold_head = None
        rows = max(1, min(REFILL_ROWS, self.working_hosts - len(self.hosts)))
        for n, (key, _) in enumerate(islice(db.items("ready"), rows + 1)):
            due, host = ready_row(key)
            if due > now or n == rows:
                self.cold_head = due
                return
            out.append(Delete("ready", key))
            self.cold_rows = max(0, self.cold_rows - 1)
            if host in self.hosts:
                continue
            raw = db.get("hosts", host_row(host))
            if raw is None:
                continue
            st = decode_host(raw)
            if st.queued <= 0 or ready_key(st.next_allowed, host) != key:
                continue
            self._take(host, st)
            if host in self.blocked:  # blocked while out of memory (controls.py)
                self.drop_queue(host, st, out)

    def drop_queue(self, host: str, st: HostState, out: list[Write]) -> int:
        """Record the URLs queued for ``host`` done as ``skipped:blocked`` (its writes to ``out``), but
        the ones in flight or released (their completions finish them); answers how many."""
        lease = self.leases.get(host)
        busy = self.finishing.get(host, set()) | ({lease.key} if lease is not None else set())
        keys = [(key, QueuedUrl.decode(raw, key, host).url)
                for key, raw in self.db.items("queue", queue_prefix(host, st.num))]
        dropped = 0
        for key, url in keys:
            if key not in busy:
                out += self.finish_writes(host, st, key, UrlRecord(url, "skipped", "blocked"))
                dropped += 1
        self.unschedule(host)
        self.dropped_blocked += dropped
        return dropped

    def schedule(self, host: str, at: float) -> None:
        """Put ``host`` in the ready heap, due at ``at`` (rules 2 and 3)."""
        if self.fenced and slice_of(host) in self.fenced:
            return
        scheduled = self.scheduled
        if host in scheduled:  # unschedule() inline: this runs for every lease
            self.due.discard(host)
            self.backing_off.discard(host)
        scheduled[host] = at
        entry = (at, host)  # rule 19: one tuple in every heap
        heapq.heappush(self.heap, entry)
        if host in self.warm:
            heapq.heappush(self.warm_heap, entry)
        if host in self.parked:  # rule 17
            return
        if at <= self.advanced_to:
            self.due.add(host)
        else:
            heapq.heappush(self.due_heap, entry)
            st = self.hosts.get(host)
            if st is not None and (st.failures or st.strikes):
                self.backing_off.add(host)

    def hold(self, entry: tuple[float, str]) -> None:
        """Rule 25: the host of ``entry``, just popped from the ready heap and unscheduled, due at its time
        and found held back by leasing.py rule 11: scheduled again at that time, in the held heap."""
        at, host = entry
        self.scheduled[host] = at
        self.due.add(host)  # rule 17: ready as it was (leased at or after the time advanced to, not parked)
        heapq.heappush(self.held_heap, entry)

    def unschedule(self, host: str) -> float | None:
        """Take ``host`` out of the ready heap (its entries there are stale: rule 2); answers when it was
        due (None: it was not scheduled). Rule 17 counts it no more."""
        at = self.scheduled.pop(host, None)
        if at is not None:
            self.due.discard(host)
            self.backing_off.discard(host)
        return at

    def advance(self, now: float) -> None:
        """Count the scheduled hosts due by ``now`` ready (rule 17), at most :data:`ADVANCE_STEP` entries of
        the due heap a call."""
        if now <= self.advanced_to:
            return
        heap, scheduled, due, parked = self.due_heap, self.scheduled, self.due, self.parked
        for _ in range(ADVANCE_STEP):
            if not heap or heap[0][0] > now:
                self.advanced_to = now
                return
            at, host = heapq.heappop(heap)
            if scheduled.get(host) == at and host not in parked:
                due.add(host)
                self.backing_off.discard(host)
        # Stopped short, or done: every entry at or before the time advanced to is popped, none after it.
        self.advanced_to = now if not heap or heap[0][0] > now else math.nextafter(heap[0][0], -math.inf)

    def next_waiting(self) -> float | None:
        """When the first scheduled host not yet due is (rule 17; None: none waits)."""
        heap, scheduled = self.due_heap, self.scheduled
        while heap and (scheduled.get(heap[0][1]) != heap[0][0] or heap[0][1] in self.due):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def wake(self, host: str, st: HostState, at: float) -> None:
        """Schedule ``host`` at ``at`` if it has URLs queued, besides those released (leasing.py rule 7),
        and nothing holds it back (a request in flight, parked, already scheduled)."""
        if (st.queued > self.releasing(host) and not st.in_flight and not st.parked
                and host not in self.scheduled):
            self.schedule(host, at)

    def releasing(self, host: str) -> int:
        """URLs of ``host`` whose requests were released before their records (leasing.py rule 7)."""
        finishing = self.finishing
        return len(finishing[host]) if finishing and host in finishing else 0

    def next_due(self) -> float | None:
        """No host is due before this time (None: none is scheduled). It may be earlier than the first
        host a lease would hand out (rules 2, 7 and 25), never later: a caller that sleeps until then misses
        no host."""
        at = self.heap[0][0] if self.heap else None
        held = self.held_heap
        if held and (at is None or held[0][0] < at):
            at = held[0][0]
        head = self.cold_head
        return head if head is not None and (at is None or head < at) else at

    def save(self, host: str) -> None:
        """Mark the record of ``host`` changed (rule 1); each change counts towards the next commit."""
        self._dirty.add(host)
        self.db.pending += 1

    def host_writes(self) -> list[Write]:
        """The host records changed since the last commit (rule 1), the records dropped from memory past
        the working-set bound (rule 6) and the rows of the ``ready`` and ``resident`` index (rules 7-8)."""
        hosts = self.hosts
        if self._emptied:
            self._recount_emptied()
        out = self._records()
        if len(hosts) >= self.working_hosts:  # full: a refill has room again after this commit
            self._cutting = True
        cut = self._cut_due()
        if cut:  # the cut goes on at the next commit unless this one found fewer it may drop (rule 18)
            self._cutting = self._evict(len(hosts) - cut, out) == cut
        else:
            self._cutting = False
        self._ranking = None
        out += self._resident_rows()
        longest = max(len(self.heap), len(self.due_heap), len(self.warm_heap), len(self.held_heap))
        if longest > 2 * len(self.scheduled) + HEAP_SLACK:
            self._rebuild_heaps()  # rule 20
        return out

    def late_writes(self) -> list[Write]:
        """Rule 28: the records changed since :meth:`host_writes`, the index rows due since and the
        counters, for the commit it was called for; nothing when nothing changed. No cut (rule 6's is
        once a commit)."""
        if not (self._dirty or self._pending or self._arrived):
            return []
        return self._records() + self._resident_rows() + self.counter_writes()

    def _records(self) -> list[Write]:
        """The host records changed since the last call and the rows of records read back (rules 1, 7
        and 8), the changed ones marked unchanged."""
        hosts = self.hosts
        out, self._pending = self._pending, []
        out += [Put("hosts", host_row(host), encode_host(hosts[host])) for host in self._dirty]
        self._dirty.clear()
        return out

    def _resident_rows(self) -> list[Write]:
        """The ``resident`` rows of the hosts taken into memory since the last call and still there
        (rule 8)."""
        hosts = self.hosts
        out: list[Write] = [Put("resident", host.encode(), b"") for host in self._arrived if host in hosts]
        self._arrived.clear()
        return out

    def _cut_due(self) -> int:
        """Records rule 18's cut drops at the next commit: a batch, or what gets memory back under the
        bound, whichever is more; 0 when no cut is under way or due."""
        n, keep = len(self.hosts), self.working_hosts * 3 // 4
        if not (self._cutting or n >= self.working_hosts) or n <= keep:
            return 0
        return max(min(CUT_BATCH, n - keep), n - self.working_hosts + 1)

    def _cut_key(self, host: str, st: HostState) -> CutKey | None:
        """Rule 6's rank of ``host``'s record, None when it is never dropped. Parked hosts first (rule 11:
        never leased again in this run), then as the module docstring says."""
        parked = self.parked
        if (st.in_flight or (st.strikes and host not in parked) or host in self.leases
                or host in self.finishing or (self.fenced and slice_of(host) in self.fenced)):
            return None
        return (math.inf if st.queued <= 0 or host in parked else self.scheduled.get(host, st.next_allowed),
                host in parked, host)

    def rank_step(self, most: int) -> bool:
        """Rank up to ``most`` more records for the next commit's cut (rule 22); whether the ranking is
        done (or none is due)."""
        want = self._cut_due()
        if not want:
            self._ranking = None
            return True
        ranking = self._ranking
        if ranking is None:
            ranking = self._ranking = CutRanking(list(self.hosts), want + want // 4)
        hosts, best, key = self.hosts, ranking.best, self._cut_key
        end = min(ranking.at + most, len(ranking.keys))
        for host in islice(ranking.keys, ranking.at, end):
            st = hosts.get(host)
            rank = key(host, st) if st is not None else None
            if rank is None:
                continue
            if len(best) < ranking.want:
                heapq.heappush(best, rank)
            elif rank > best[0]:
                heapq.heapreplace(best, rank)
        ranking.at = end
        return ranking.done

    def _ranked(self, n: int) -> list[CutKey]:
        """The ``n`` records rule 6 drops first: from a finished ranking of rule 22, each ranked again
        now, else from a pass over memory."""
        hosts, key, ranking = self.hosts, self._cut_key, self._ranking
        if ranking is not None and ranking.done:
            now = (key(host, st) for _, _, host in ranking.best if (st := hosts.get(host)) is not None)
        else:
            now = (key(host, st) for host, st in hosts.items())
        return heapq.nlargest(n, filter(None, now))

    def _evict(self, keep: int, out: list[Write]) -> int:
        """Write and drop the records of rule 6 until ``keep`` are left (or only those it never drops);
        answers how many it dropped."""
        hosts, parked = self.hosts, self.parked
        dropped = self._ranked(len(hosts) - keep)
        for _, _, host in dropped:
            st = hosts.pop(host)
            self._unlist(host, st)
            self.warm.pop(host, None)
            # Filed at its turn in the heap (never before its next-allowed time): the order it had here.
            st.next_allowed = max(st.next_allowed, self.unschedule(host) or 0.0)
            out.append(Put("hosts", host_row(host), encode_host(st)))
            reason = parked.pop(host, None)
            if reason is not None:
                self.parked_out += 1
                out.append(Put("resident", host.encode(), reason.encode() or b"parked"))
                continue
            if st.queued > 0:
                out.append(Put("ready", ready_key(st.next_allowed, host), b""))
                self.cold_rows += 1
                if self.cold_head is None or st.next_allowed < self.cold_head:
                    self.cold_head = st.next_allowed
            if host not in self._arrived:  # else it has no row yet
                out.append(Delete("resident", host.encode()))
        if len(dropped) * 4 >= len(self.heap):  # rule 18: else their entries are popped as time passes
            self._rebuild_heaps()
        return len(dropped)

    def _rebuild_heaps(self) -> None:
        """The three heaps are due for a rebuild (rules 18 and 20): made now, or in the steps of
        :meth:`heaps_step` when :attr:`heaps_in_steps` (rule 23)."""
        self._heaps_due = 3
        if not self.heaps_in_steps:
            while not self.heaps_step():
                pass

    def heaps_step(self) -> bool:
        """Rebuild the next heap due (rule 23): the ready heap from :attr:`scheduled`, then the due heap
        and the warm heap from the ready heap's live entries (its tuples: rule 19), their stale entries
        (rule 2) gone; whether none is left to rebuild."""
        left = self._heaps_due
        if not left:
            return True
        if left == 3:
            scheduled, held = self.scheduled, self.held_heap
            held[:] = [e for e in held if scheduled.get(e[1]) == e[0]]  # rule 25: still held, not read again
            heapq.heapify(held)
            holding = {host for _, host in held}
            self.heap[:] = [(at, host) for host, at in scheduled.items()  # rule 19: one tuple a host
                            if host not in holding]
            heapq.heapify(self.heap)
        else:  # the ready heap holds a live entry of every host scheduled, those of since the last step too
            get, heap = self.scheduled.get, self.heap
            if left == 2:
                due, parked = self.due, self.parked
                self.due_heap[:] = [e for e in heap if get(e[1]) == e[0] and e[1] not in due
                                    and e[1] not in parked]
                heapq.heapify(self.due_heap)
            else:
                warm = self.warm
                self.warm_heap[:] = [e for e in heap if e[1] in warm and get(e[1]) == e[0]]
                heapq.heapify(self.warm_heap)
        self._heaps_due = left - 1
        return left == 1

    def unsaved(self) -> dict[bytes, bytes]:
        """The ``hosts`` rows of the records changed since the last commit, newer than the table's."""
        return {host_row(h): encode_host(self.hosts[h]) for h in self._dirty}

    def counter_writes(self) -> list[Write]:
        """The counters kept in ``meta``: the queue sequence, the outcomes over all runs, the queue
        bands once counted."""
        out: list[Write] = [Put("meta", QSEQ, str(self.qseq).encode()),
                            Put("meta", HOST_SEQ, str(self.hseq).encode()),
                            Put("meta", b"done", json.dumps(self.done_total).encode())]
        if self.bands is not None and self.band_cursor is None:  # rule 24: a whole count only
            out.append(Put("meta", BANDS, json.dumps(self.bands).encode()))
        out.append(Put("meta", HOST_COUNTS, json.dumps(
            {"hosts": self.known_hosts, "with_queue": self.with_queue, "queued": self.queued,
             "fetched": self.fetched}).encode()))
        return out

    def count_queued(self, host: str, st: HostState, n: int) -> None:
        """``n`` more URLs (fewer, when negative) queued for ``host`` (rules 4, 9 and 12)."""
        had = st.queued > 0
        st.queued += n
        self.with_queue += (st.queued > 0) - had
        self.queued += n
        if self.fenced:
            self.queued_in[slice_of(host)] += n

    def forget(self, hosts: Iterable[str]) -> None:
        """Drop ``hosts`` from memory (their slices were released: their records go with them)."""
        for host in hosts:
            st = self.hosts.pop(host)
            self._unlist(host, st)
            self.count_queued(host, st, -st.queued)
            self.fetched -= st.fetched
            self.unschedule(host)
            self._dirty.discard(host)
            self.warm.pop(host, None)
            self.known_hosts -= 1
            self.parked.pop(host, None)
            if host not in self._arrived:
                self._pending.append(Delete("resident", host.encode()))
            self._arrived.discard(host)

    def enqueue(self, url: str, host: str, depth: int, importance: float, now: float, out: list[Write],
                hops: int = 0, *, new: bool = True, st: HostState | None = None, shape: bool = True) -> None:
        """Queue ``url`` (rule 4): its write goes to ``out``. ``new``: it counts as accepted. ``st``: the
        host's record in memory, when the caller holds it. ``shape``: it counts towards its host's shape
        budget (traps rule 2 counts discovered URLs; a seed does not)."""
        # wake() inline: this runs for every URL accepted.
        st = st or self.hosts.get(host) or self.state(host)
        self.qseq += 1
        if shape:
            self.shapes.count(host, url)
        key = queue_key(host, st.num, importance, depth, self.qseq)
        out.append(Put("queue", key, QueuedUrl(url, depth, importance, 0, hops).encode(host)))
        self.count_band(key, 1)
        self.with_queue += st.queued <= 0
        st.queued += 1  # count_queued() inline (this runs for every URL accepted)
        self.queued += 1
        if self.fenced:
            self.queued_in[slice_of(host)] += 1
        self.accepted += new
        self.save(host)
        if not st.in_flight and not st.parked and host not in self.scheduled:
            self.schedule(host, max(st.next_allowed, now))

    def has_room(self, host: str) -> bool:
        """Whether a host new to the table joins memory (else it is filed cold, rule 10)."""
        if self._free() > 0:
            return True
        return bool(self.fenced) and slice_of(host) in self.fenced

    def room(self) -> int | None:
        """How many hosts new to the table join memory, one after the other, before the next is filed cold
        (rule 10): :meth:`has_room` asked once for a seeds batch. None while a slice is fenced (then the
        answer is each host's own)."""
        if self.fenced:
            return None
        return max(0, self._free())

    def _free(self) -> int:
        """Places for new hosts in memory before rule 10 files them cold: three quarters of the working
        set, less the hosts held."""
        return self.working_hosts * 3 // 4 - len(self.hosts)

    def enqueue_cold(self, cold: dict[str, tuple[bytes, list[str]]], importance: float, now: float,
                     out: list[Write]) -> None:
        """Queue the seeds of each host of ``cold`` (host -> its ``hosts`` key and its seed URLs), hosts new
        to the table, without taking them into memory (rule 10): their queue writes, ``ready`` rows and
        records (each with the host's number, rule 14) go to ``out``. One batch of a seeds file is one
        call: the counters of rule 12 move once for it, the keys' and values' parts common to the batch
        (the rank, the due time, the importance's field) are made once."""
        hosts = len(cold)
        first = self.new_num(hosts) - hosts + 1
        nums = range(first, first + hosts)
        rows = [row for row, _ in cold.values()]
        counts = [len(urls) for _, urls in cold.values()]
        seeds = [url for _, urls in cold.values() for url in urls]
        one_each = len(seeds) == hosts  # a seeds file's usual batch: nothing to repeat a seed of a host
        due = ready_key(now, "")  # its record's next-allowed time (rule 7), then the host
        ready = [due + row[PREFIX_LEN:] for row in rows]
        # Each host's row and number once a seed of it, the seeds numbered on from qseq.
        queue = seed_queue_keys(rows if one_each else chain.from_iterable(map(repeat, rows, counts)),
                                nums if one_each else chain.from_iterable(map(repeat, nums, counts)),
                                rank(importance), self.qseq + 1)
        if self.fenced:
            for host, n in zip(cold, counts, strict=True):
                self.queued_in[slice_of(host)] += n
        values = QueuedUrl.encode_seeds(
            seeds, cold if one_each else [host for host, (_, urls) in cold.items() for _ in urls], importance)
        out += [PutRows("ready", ready, [b""] * hosts), PutRows("queue", queue, values),
                PutRows("hosts", rows, encode_new_hosts(now, counts, nums))]  # (polecat/writes.py rule 5)
        queued = len(queue)
        self.qseq += queued
        if queued and self.bands is not None:  # one band for all: the same importance, depth 0
            cursor = self.band_cursor  # rule 24: while counting, the keys counted already only
            self.bands[priority_band(queue[-1])] += (
                queued if cursor is None else sum(1 for key in queue if key <= cursor))
        self.known_hosts += hosts  # count_queued() of each, once for the batch (rule 12)
        self.with_queue += hosts
        self.queued += queued
        self.accepted += queued
        self.db.pending += queued
        self.cold_rows += hosts
        if self.cold_head is None or now < self.cold_head:
            self.cold_head = now

    def finish_writes(self, host: str, st: HostState, key: bytes, rec: UrlRecord,
                      ukey: bytes | None = None) -> list[Write]:
        """The writes that move the queued URL ``key`` to done, as ``rec`` (rule 4: one decision);
        ``ukey``: its ``urls`` key, when the caller has it."""
        if self.db.get("queue", key) is not None:
            self.count_queued(host, st, -1)
            self.count_band(key, -1)
            if st.queued <= 0:
                self._emptied.add(host)  # rule 27
        self.save(host)
        self.count_done(rec.outcome if rec.outcome != "skipped" else f"skipped:{rec.reason}")
        ukey = ukey or url_key_at(key, rec.url)
        out: list[Write] = [Delete("queue", key), Put("urls", ukey, rec.encode())]
        self.url_written(host, ukey, rec, out)
        return out

    def _recount_emptied(self) -> None:
        """Rule 27: each host whose count ran out since the last commit, and counts none still, has its
        queue read; a count that is not its rows' is made theirs and the host scheduled."""
        hosts, emptied, db = self.hosts, self._emptied, self.db
        for host in emptied:
            st = hosts.get(host)
            if st is None or st.queued > 0:
                continue
            rows = sum(1 for _ in db.items("queue", queue_prefix(host, st.num)))
            if rows == st.queued:
                continue
            log.warning("frontier: %s counted %d queued URLs, its queue holds %d; counted again",
                        host, st.queued, rows)
            self.count_queued(host, st, rows - st.queued)
            self.save(host)
            self.wake(host, st, st.next_allowed)
        emptied.clear()

    def count_fetched(self, st: HostState, n: int) -> None:
        """``n`` more pages fetched from the host of ``st`` (rule 12)."""
        st.fetched += n
        self.fetched += n

    def in_leaving_slice(self, host: str) -> bool:
        """Whether the slice of ``host`` is being released (handover.py rule 7)."""
        return bool(self.leaving) and slice_of(host) in self.leaving

    def refuse_leaving(self, host: str) -> None:
        """FrontierError when the slice of ``host`` is being released (handover.py rule 7): a decision asks
        before it changes anything, and its caller tries again once the release is done."""
        if self.in_leaving_slice(host):
            raise FrontierError(f"the slice of {host} is being released here: nothing is queued in it "
                                "until that is done; try again")

    def forget_record(self, st: HostState) -> None:
        """The record ``st``, out of memory, leaves with its slice (released): the counters drop it
        (rule 12)."""
        self.queued -= st.queued
        self.known_hosts -= 1
        self.with_queue -= st.queued > 0
        self.fetched -= st.fetched

    def count_done(self, label: str) -> None:
        self.done[label] += 1
        self.done_total[label] += 1

    def count_band(self, key: bytes, delta: int) -> None:
        if self.bands is not None and (self.band_cursor is None or key <= self.band_cursor):  # rule 24
            self.bands[priority_band(key)] += delta

    def band_step(self, rows: int = 0) -> bool:
        """Rule 24: count at most ``rows`` (0: :data:`BAND_STEP`) more queue keys if the count is not
        whole; whether it is."""
        if self.bands is None:
            self.bands, self.band_cursor = Counter(), b""
        cursor = self.band_cursor
        if cursor is None:
            return True
        bands, budget = self.bands, rows or BAND_STEP
        for n, (key, _) in enumerate(self.db.items_after("queue", cursor) if cursor
                                     else self.db.items("queue"), 1):
            bands[priority_band(key)] += 1
            if n >= budget:
                self.band_cursor = key
                return False
        self.band_cursor = None
        return True

    def url_record(self, url: str, key: bytes | None = None) -> UrlRecord | None:
        """What is recorded of the finished ``url`` (``key``: its ``urls`` key, when known)."""
        raw = self.db.get("urls", key or url_key(url))
        return UrlRecord.decode(raw) if raw is not None else None
