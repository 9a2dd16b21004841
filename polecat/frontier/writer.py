"""One LMDB environment's open write transaction, begun and committed on a thread of its own.

A commit's fsync takes milliseconds; on the event loop it stalls every request in flight. LMDB ties a
write transaction to the thread that began it, so the commit cannot simply be handed to any worker
thread. The frontier (polecat/frontier/db.py) and the cluster's hand-off outbox (polecat/cluster/outbox.py)
both keep their transaction here.

Rules:
1. The transaction is begun, committed and aborted on this object's one writer thread only.
2. Between those, one other thread (the event loop's) reads and writes through :attr:`TxnWriter.txn`.
   While a commit is in flight, reading :attr:`~TxnWriter.txn` waits for it (its owner holds its own
   calls back until then, so that wait is the rare exception).
3. A failed commit raises ``lmdb.Error`` from :meth:`TxnWriter.finish_commit`, and again from every later
   use (whichever call saw the failure first): its writes are lost and the owner stops using the
   environment (it may still :meth:`~TxnWriter.close` it).
4. A commit may run a step of its own first, on the writer thread (the frontier makes its seen-table
   run durable there, polecat/frontier/seenlog.py rule 2); an ``OSError`` from it fails the commit as
   in rule 3, with the transaction aborted; and a step after it (the frontier empties its write-ahead
   log once the commit that holds it is durable, polecat/frontier/wal.py rule 4), run only if the commit
   succeeded.
5. Other durable steps of the owner run on the same thread (:meth:`TxnWriter.submit`: the frontier's log
   appends, wal.py rule 2), so they and the commits happen in the order they were started.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import lmdb


class TxnWriter:
    """The write transaction of ``env`` and the thread that owns it (rules above)."""

    def __init__(self, env: lmdb.Environment, name: str) -> None:
        self._env = env
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._txn: lmdb.Transaction = self._thread.submit(self._begin).result()
        self._committing: Future[lmdb.Transaction] | None = None
        self._failed: lmdb.Error | OSError | None = None

    def _begin(self) -> lmdb.Transaction:
        return self._env.begin(write=True)

    def _commit(self, txn: lmdb.Transaction, before: Callable[[], None] | None,
                after: Callable[[], None] | None = None) -> lmdb.Transaction:
        """On the writer thread: run ``before`` (rule 4), commit ``txn`` (one fsync), run ``after`` and
        begin the next transaction."""
        if before is not None:
            try:
                before()
            except OSError:
                txn.abort()
                raise
        txn.commit()
        if after is not None:
            after()
        return self._env.begin(write=True)

    @property
    def txn(self) -> lmdb.Transaction:
        """The open write transaction (rule 2: waits for a commit in flight)."""
        if self._committing is not None or self._failed is not None:
            self.finish_commit()
        return self._txn

    @property
    def committing(self) -> bool:
        """A commit was started and not yet finished."""
        return self._committing is not None

    def start_commit(self, before: Callable[[], None] | None = None,
                     after: Callable[[], None] | None = None) -> Future[lmdb.Transaction]:
        """Start committing every write so far on the writer thread and return at once; writes made from
        now on belong to the next commit. ``before`` and ``after``: steps around the commit (rule 4)."""
        txn = self.txn
        self._committing = self._thread.submit(self._commit, txn, before, after)
        return self._committing

    def submit(self, step: Callable[[], None]) -> Future[None]:
        """Run ``step`` on the writer thread after whatever was started there before (rule 5)."""
        return self._thread.submit(step)

    def finish_commit(self) -> None:
        """Wait for the commit in flight, if any (``lmdb.Error`` if it failed, rule 3)."""
        fut, self._committing = self._committing, None
        if fut is not None:
            try:
                self._txn = fut.result()
            except (lmdb.Error, OSError) as exc:
                self._failed = exc
        if self._failed is not None:
            raise self._failed

    def commit(self) -> None:
        """Commit every write so far, waiting for it."""
        self.start_commit()
        self.finish_commit()

    def close(self) -> None:
        """Abort what is uncommitted (a commit in flight is let finish first) and stop the thread; the
        environment stays open (its owner closes it)."""
        try:
            with contextlib.suppress(lmdb.Error, OSError):
                self.finish_commit()
            self._thread.submit(self._txn.abort).result()
        finally:
            self._thread.shutdown()
