"""Which queue heads to read ahead of the leases, right after an open (issue 39).

A lease reads its host's queue head (polecat/frontier/leasing.py, ``_lease_from``): the first row of the
host's range of the ``queue`` table. Right after an open from a cold page cache that row's leaf is on
disk, one leaf a host in a big table (~4 GB of ``queue`` at 50M URLs), and every lease waited for it
(benchmarks/README.md "Issue 39: pop+complete right after an open, where the major faults are"). This
policy names the hosts the next leases will take; a reader (:class:`HeadReader`, the node runs one on a
thread of its own: polecat/frontier/head_reader.py) touches their heads first, so that the lease finds the
leaf in memory. It decides only which hosts and when; it reads nothing.

Rules:
1. The hosts handed out are those due at the call's ``now``, in the order the leases take them
   (leasing.py): first the hosts in memory, in the ready heap's order (host_table.py rule 2), from a copy
   of the heap taken when the last one ran out, popped a host at a time (an entry no longer scheduled at
   its time, stale, leased or rescheduled since, is passed over, and so is a host not in memory or one
   handed out and still ahead); then, as a lease refills memory from the ``ready`` index once no host in
   memory is due (host_table.py rule 7), the index's rows due, in its order, read after the last row
   handed, as many as memory has room for. A host of a row comes without its number: the reader reads
   its record first. A host due later is handed out once due: the node asks before each lease call, and
   after an open the hosts in memory fall due together (each waits one interval from the open,
   host_table.py rule 6). Where the leases' order differs (leasing.py rules 4, 6 and 11 pass hosts over
   or hold them back), a head read ahead and not leased next is a read wasted, not a wrong lease.
2. At most :attr:`ReadAhead.depth` hosts handed out are ahead of the leases: a host of the heap until
   it is no longer scheduled at the time it was handed at (leased, rescheduled or dropped), a host of a
   row until the row is gone (a refill read it, and took its host in or dropped it as stale); more are
   handed out once half of them are gone, in a batch. Each call looks at :data:`CHECKS` of those handed,
   the oldest first, and puts one still ahead back behind the others: a host the leases pass over for a
   while (a row due after the hosts in memory, a host held back) does not hold up the count of those
   behind it, and a call costs the same however many are ahead. So the reader needs at most ``depth``
   heads' leaves of memory and reads at most one head a lease, whatever the heap holds.
3. Nothing waits for the reader: the leases go on whether it read a head or not (a head not read yet is
   read by its lease, as without this policy), and handing out never blocks.
4. It runs from the open until the heads are found in memory: once :data:`WINDOW` heads read in a row
   took fewer than one major fault in :data:`WARM_SHARE` (the reader's own count, :meth:`ReadAhead.read`),
   it stops for the rest of the run (:attr:`ReadAhead.active` is False: no more copies, nothing handed
   out) and the node stops its reader. A warm open thus pays one window, and the steady state nothing.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from polecat.frontier.host_table import HostTable
from polecat.frontier.keys import ready_row

DEPTH = 256
"""Hosts handed out ahead of the leases at most (rule 2): ~1 MB of leaves, a few hundred ms of leases."""
CHECKS = 4
"""Hosts handed out that one call looks at (rule 2): more than the one lease a call makes, so the count
keeps up with the leases."""
WINDOW = 1024
"""Heads read by the reader over which rule 4 judges whether they were in memory."""
WARM_SHARE = 64
"""Rule 4: a window with fewer than one major fault in this many heads read counts as warm."""


@dataclass(frozen=True, slots=True)
class Head:
    """A host whose queue head is to be read ahead: its key and its number (the ``queue`` key's prefix,
    polecat/frontier/keys.py rule 1), or None: a host out of memory, whose record gives it (rule 1)."""

    host: str
    num: int | None


class HeadReader(Protocol):
    """What reads the heads ahead (the node's thread, polecat/frontier/head_reader.py; a fake in tests)."""

    def start(self) -> None:
        """Begin reading the heads handed to it."""

    def read(self, heads: list[Head]) -> None:
        """Read ``heads`` ahead, in order, after those handed before; returns at once (rule 3)."""

    def counts(self) -> tuple[int, int]:
        """Heads read so far and the major faults those reads took (rule 4)."""

    def stop(self) -> None:
        """Stop reading; once it returns, no thread of it runs and no read transaction of it is open."""


class ReadAhead:
    """The hosts whose queue heads a :class:`HeadReader` reads ahead of the leases (module rules)."""

    def __init__(self, table: HostTable, depth: int = DEPTH) -> None:
        self._table = table
        self.depth = depth
        """Hosts handed out ahead of the leases at most (rule 2)."""
        self.active = True
        """False once the heads were found in memory (rule 4): nothing more is handed out."""
        self._order: list[tuple[float, str]] = []
        """The copy of the ready heap handed out from (rule 1), a heap itself."""
        self._rows: deque[bytes] = deque()
        """``ready`` keys read and not handed out yet (rule 1), in the index's order."""
        self._after = b""
        """The last ``ready`` key read (b"": none yet)."""
        self._ahead: deque[tuple[float, str, bytes]] = deque()
        """The hosts handed out, oldest first, not yet seen leased (rule 2): due time, host and the
        ``ready`` key of a host from a row (b"": from the heap)."""
        self._handed: set[str] = set()
        """The hosts in :attr:`_ahead`: a copy of the heap taken while some are ahead hands them out once."""
        self._rows_ahead = 0
        """Those of them from ``ready`` rows: memory's room goes to them first (rule 1)."""
        self._window_from = (0, 0)
        """The reader's counts when the current window began (rule 4)."""

    def next_heads(self, now: float) -> list[Head]:
        """The hosts to read ahead at ``now``, in the order their leases will come (rule 1), or none:
        inactive, or enough handed out already (rule 2)."""
        if not self.active:
            return []
        table = self._table
        scheduled, hosts = table.scheduled, table.hosts
        ahead = self._ahead
        for _ in range(min(CHECKS, len(ahead))):
            entry = ahead.popleft()
            if not self._gone(*entry):
                ahead.append(entry)
                continue
            self._handed.discard(entry[1])
            if entry[2]:
                self._rows_ahead -= 1
        room = self.depth - len(ahead)
        if 2 * room < self.depth:
            return []
        order, rows = self._order, self._rows
        if not order:
            order.extend(table.heap)  # a heap's copy is a heap
        if not rows:
            self._read_rows(min(room, table.working_hosts - len(hosts) - self._rows_ahead))
        out: list[Head] = []
        while len(out) < room:
            if order and order[0][0] <= now:
                at, host = heapq.heappop(order)
                if scheduled.get(host) != at:
                    continue
                st = hosts.get(host)
                if st is None or host in self._handed:
                    continue
                self._handed.add(host)
                ahead.append((at, host, b""))
                out.append(Head(host, st.num))
            elif rows and ready_row(rows[0])[0] <= now:
                key = rows.popleft()
                at, host = ready_row(key)
                if host in hosts or host in self._handed:  # taken in since: a host of the heap
                    continue
                self._handed.add(host)
                ahead.append((at, host, key))
                self._rows_ahead += 1
                out.append(Head(host, None))
            else:
                break
        return out

    def _gone(self, at: float, host: str, row: bytes) -> bool:
        """Whether a host handed out no longer counts ahead of the leases (rule 2)."""
        table = self._table
        if not row:
            return table.scheduled.get(host) != at
        return table.db.get("ready", row) is None

    def _read_rows(self, most: int) -> None:
        """Read up to ``most`` ``ready`` rows after the last one read (rule 1: those the refills take in,
        memory's room for them)."""
        if most <= 0 or self._table.cold_head is None:
            return
        db = self._table.db
        found = db.items_after("ready", self._after) if self._after else db.items("ready")
        for key, _ in islice(found, most):
            self._rows.append(key)
            self._after = key

    def read(self, heads: int, faults: int) -> None:
        """The reader's counts (:meth:`HeadReader.counts`): heads read and their major faults so far.
        Rule 4: a window read warm stops the read-ahead."""
        read0, faults0 = self._window_from
        if heads - read0 < WINDOW:
            return
        if (faults - faults0) * WARM_SHARE < heads - read0:
            self.active = False
            self._order.clear()
            self._rows.clear()
            self._ahead.clear()
            self._handed.clear()
        self._window_from = (heads, faults)


class HeadsAhead:
    """A :class:`ReadAhead` and the :class:`HeadReader` that reads what it names, as the node runs them
    (polecat/node/leases.py rule 8): started with the lease loop, a step before each lease call, stopped
    once the policy stops (rule 4) or the loop ends."""

    def __init__(self, policy: ReadAhead, reader: HeadReader) -> None:
        self.policy = policy
        self.reader = reader
        self.running = False
        """Whether the reader was started and not stopped yet."""

    def start(self) -> None:
        """Start the reader, unless the policy stopped already (a second run of a warm frontier)."""
        if self.policy.active and not self.running:
            self.reader.start()
            self.running = True

    def step(self, now: float) -> None:
        """Before a lease call at ``now``: the reader's counts to the policy, the hosts due next to the
        reader; the reader is stopped once the policy stops (rule 4). Never waits for a read (rule 3)."""
        if not self.running:
            return
        policy, reader = self.policy, self.reader
        policy.read(*reader.counts())
        if not policy.active:
            self.stop()
            return
        heads = policy.next_heads(now)
        if heads:
            reader.read(heads)

    def stop(self) -> None:
        """Stop the reader (no thread of it left, no read transaction open)."""
        if self.running:
            self.running = False
            self.reader.stop()
