"""Reads the queue heads :class:`~polecat.frontier.read_ahead.ReadAhead` names, on a thread of its own.

The I/O half of the read-ahead (issue 39): a lease right after an open from a cold page cache waited for
its host's queue head to come off the disk; this thread touches the heads of the hosts due next first. py-lmdb
lets go of the GIL in its reads, so the thread's waits for the disk do not hold the event loop.

Rules:
1. One thread, begun by :meth:`ThreadHeadReader.start`, reads each head handed to it, in order, by
   positioning a cursor at the host's ``queue`` prefix (polecat/frontier/keys.py rule 1): the leaf the
   lease's range read starts at; a host out of memory (no number handed: read_ahead.py rule 1) has its
   ``hosts`` record read first, for its number (the refill that takes it in reads it too). It reads in
   a read transaction of its own, begun for the heads waiting when it wakes (at most
   :attr:`~ThreadHeadReader.depth`) and aborted after them: no snapshot outlives a batch, so LMDB's
   writer may reuse the pages freed after it and the map does not grow behind it.
2. At most ``depth`` heads wait: a head handed while as many wait pushes out the oldest (the leases have
   passed it by then; read now, it would be read behind them, for nothing).
3. :meth:`ThreadHeadReader.stop` ends the thread after the head it is reading (joined), its transaction
   aborted: LMDB's reader table holds no slot of it after, and the environment may be closed. The node
   stops it before it closes the frontier, and as soon as the read-ahead stops (read_ahead.py rule 4).
4. The major faults counted (:meth:`ThreadHeadReader.counts`) are the thread's own
   (``RUSAGE_THREAD``) around each read. A platform without a per-thread count reports none, and
   read_ahead.py rule 4 stops the read-ahead after its first window.
5. Before its first head the thread hands the leaves of ``queue`` (:data:`PREFETCH`), where the first
   leases' heads are, to the kernel's readahead (polecat/frontier/prefetch.py): the kernel reads them many
   at a time, the heads this thread then touches are found in memory, its window finds them warm and
   stops (read_ahead.py rule 4), and the GIL's hand-overs with the loop end with it. Not ``hosts``: its
   leaves are random by name (~20,000 runs of one page at 50M URLs), and so many reads queued at the disk
   ahead of the loop's own made round 1 slower (benchmarks/README.md, "Issue 39: queue leaves prefetched
   after a cold open"). A prefetch that fails (an I/O error) is logged and the reads go on without it;
   :meth:`ThreadHeadReader.stop` ends it between two runs of leaves (rule 3).
"""

from __future__ import annotations

import logging
import resource
import threading
from collections import deque
from pathlib import Path
from typing import Any

import lmdb

from polecat.frontier.keys import host_row, queue_prefix
from polecat.frontier.prefetch import Prefetched, prefetch
from polecat.frontier.read_ahead import DEPTH, Head
from polecat.frontier.records import decode_host

log = logging.getLogger(__name__)

PREFETCH = (b"queue",)
"""The tables whose leaves the thread hands to the kernel first (rule 5)."""

_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)


def _thread_faults() -> int:
    """Major faults of the calling thread so far (rule 4: 0 where the platform does not count them)."""
    return 0 if _RUSAGE_THREAD is None else resource.getrusage(_RUSAGE_THREAD).ru_majflt


def _pop(waiting: deque[Head]) -> Head | None:
    """The oldest head waiting, popped without the lock (a deque's pop is atomic; only the thread pops,
    and :meth:`ThreadHeadReader.stop` may empty it meanwhile); None: none waits."""
    try:
        return waiting.popleft()
    except IndexError:
        return None


class ThreadHeadReader:
    """A :class:`~polecat.frontier.read_ahead.HeadReader` over the ``queue`` and ``hosts`` tables of
    ``env`` (see the module docstring)."""

    def __init__(self, env: lmdb.Environment, queue: Any, hosts: Any, depth: int = DEPTH) -> None:
        self._env = env
        self._queue = queue
        self._hosts = hosts
        self.depth = depth
        self._waiting: deque[Head] = deque(maxlen=depth)  # rule 2: the oldest is pushed out
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._read = 0
        self._faults = 0
        self.prefetched: Prefetched | None = None
        """What rule 5's prefetch handed to the kernel, once it has (None: not yet, or it failed)."""

    def start(self) -> None:
        """Begin the thread (rule 1)."""
        self._thread = threading.Thread(target=self._run, name="polecat-heads", daemon=True)
        self._thread.start()

    def read(self, heads: list[Head]) -> None:
        """Hand ``heads`` to the thread, after those waiting (rule 2); returns at once."""
        with self._wake:
            self._waiting.extend(heads)
            self._wake.notify()

    def counts(self) -> tuple[int, int]:
        """Heads read so far and the major faults the thread took reading them (rule 4)."""
        return self._read, self._faults

    def stop(self) -> None:
        """Rule 3: the thread ends after the head it reads, and is joined."""
        with self._wake:
            self._stopping = True
            self._waiting.clear()
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _next(self) -> Head | None:
        """The next head to read, waiting for one; None: stopped."""
        with self._wake:
            while not self._waiting and not self._stopping:
                self._wake.wait()
            return None if self._stopping else self._waiting.popleft()

    def _run(self) -> None:
        try:
            self.prefetched = prefetch(self._env, Path(self._env.path()) / "data.mdb", PREFETCH,  # rule 5
                                       lambda: self._stopping)
        except (OSError, lmdb.Error) as exc:
            log.warning("frontier: queue leaves not prefetched: %s", exc)
        waiting = self._waiting
        while (head := self._next()) is not None:
            txn = self._env.begin(db=self._queue, buffers=True)  # rule 1: one a batch
            try:
                cursor = txn.cursor(db=self._queue)
                while head is not None:
                    before = _thread_faults()
                    num = head.num
                    if num is None:  # a host out of memory: its record first (read_ahead.py rule 1)
                        raw = txn.get(host_row(head.host), db=self._hosts)
                        num = None if raw is None else decode_host(raw).num
                    if num is not None:
                        cursor.set_range(queue_prefix(head.host, num))
                    self._faults += _thread_faults() - before
                    self._read += 1
                    head = None if self._stopping else _pop(waiting)
            finally:
                txn.abort()
