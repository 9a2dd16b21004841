"""The node's commit: how what it did becomes durable, and in which order.

Rules (this module owns them):

1. Order: the store flush, then the hand-off outbox's commit (polecat/cluster/outbox.py), then the
   frontier's commit (an fsynced append to its write-ahead log, or an LMDB commit, db.py rule 6), then
   (every :data:`BLOOM_SAVE_INTERVAL`, and at the stop) the seen-set's Bloom snapshot. The frontier never
   records as done a page the store could lose, and never forgets a URL handed to another member before
   the outbox holds it.
2. The periodic commit keeps every fsync off the event loop while requests go on: the store flush in a
   worker thread, the outbox and frontier commits each on its writer thread. A page completion that
   arrives during the store flush waits (:meth:`Commits.defer`) for the frontier commit after it: its
   store record may be in the batch after the one being flushed, and recording it done in this commit
   could outlive the record. No frontier call is made during the frontier's LMDB commit
   (:attr:`Commits.frontier_free`); decisions that need no read are applied into the next transaction
   (polecat/frontier/db.py rule 3). A frontier commit that is a log append only (db.py rule 6) does not
   touch the transaction: frontier calls go on during it, their writes in the next commit.
3. A periodic commit is made every ``frontier.commit_ms``, or sooner once ``frontier.commit_ops`` changes
   are pending or somebody waits for one (:meth:`Commits.durable`); a commit in progress is finished,
   never cut. At start, at the stop and for operator actions outside a run, the commit runs on the loop.
4. Each frontier commit records the store's record count (:data:`STORE_MARK`): every store record before
   it had its near-duplicate index entry committed with the frontier. A page's index entry goes into the
   frontier's open transaction when the page is stored, so a crash between a store flush and the
   frontier commit after it keeps bodies whose entries were lost; on opening, the node indexes again the
   records past the mark (polecat/node/pipeline.py ``reindex``), so a near-copy fetched before its
   original's replay still finds it. A data dir without a mark gets one at once.
5. The Bloom snapshot is tagged with the counter of the frontier commit it goes with: a crash in between
   leaves a snapshot of an earlier commit, which the next open brings up to date with the seen keys
   committed since (polecat/frontier/seenlog.py rule 7), never a stale filter. One process saves it once
   at its stop, with the commit the node makes last: a snapshot saved with the end of a run's commit
   would be stale at once, and each is a write of the whole filter (12 MB at the default sizing;
   benchmarks/README.md, "Issue 17, fourth pass").
6. A commit that fails for a reason of the machine (disk full, I/O error, LMDB map full) or a bug stops
   the node (the ``fail`` callback) with what was committed before; whoever waits for a commit that will
   never be made is failed, never left waiting (:meth:`Commits.abandon`).
7. After a fingerprint format change (polecat/frontier/db.py :data:`NEAR_REBUILD`), the node indexes the
   stored pages again as it opens when that is cheap (at most :data:`AUTO_REBUILD_RECORDS` store records),
   or always when asked (``polecat upgrade``); the entries and the cleared key go in one commit. Past the
   bound the crawl starts at once and the node indexes them in the background while it crawls
   (:meth:`Commits.rebuild_in_background`): :data:`REBUILD_BATCH` records a turn of the loop, and only
   while no frontier commit runs; each batch's entries and the key moved past the batch go into the
   frontier's open transaction, so a commit holds both or neither, and after a crash (or a run that
   ended first) the next one goes on from the last commit. The records left are counted
   (``near_rebuild_left``: the summary, ``/metrics``); pages fetched meanwhile are checked against what
   is indexed so far (a missed collapse, never a lost page).
8. After each store flush the pages it made durable that content claims named "first" are reported to
   their hashes' owners (polecat/cluster/claims.py rule 7), who only then answer the copies of them, and
   the near copies other members deposited in the store are acknowledged (claims rule 12); a node with
   deposits to acknowledge makes a store flush :data:`DEPOSIT_GATHER` after the first of them: the
   deposits that come meanwhile share it (one commit per deposit was 3-4 times the commits of a crawl
   without claims, benchmarks/README.md "claim cost"). That flush is the store's alone
   (:meth:`Commits._flush_off_loop`), not a whole commit: what it acknowledges is store records, and
   the frontier (with the outbox) commits at its own time (rule 3), after a flush of its own, so rule
   1's order holds and no page completion waits for it (rule 2's wait is for a frontier commit that
   follows a flush). What the whole commits cost is in benchmarks/README.md ("Issue 35: claim cost
   profiled again; deposits acknowledged by a store flush").
9. A commit asked for with ``lmdb`` (:meth:`Commits.durable`: a cluster checkpoint round, before its
   snapshot) is an LMDB commit (polecat/frontier/db.py rule 6), made like any periodic commit: off the
   loop, frontier calls held for its length (rule 2). The snapshot after it then reads the LMDB alone:
   no LMDB commit on the loop, no log to decode there (db.py rule 9), whatever the log holds.
10. The page completions a periodic commit's store flush held (rule 2) are completed after its frontier
    commit a step of the event loop at a time: at most :data:`DEFERRED_STEP` of them, or
    :data:`DEFERRED_STEP_SECONDS` on the node's clock, then the loop gets a turn (and the lease loop a
    wake-up). All in one step, a flush that held a thousand of them held the loop for up to a second in a
    100,000-host breadth crawl (benchmarks/README.md "Issue 39: loop stalls"). The next periodic commit
    starts only once they are all completed (the same task makes both); a commit on the loop (the stop)
    completes those left first.
11. The periodic commit applies the writes it makes on the loop (the host records changed since the
    last commit and those rule 6 of polecat/frontier/host_table.py drops, their index rows, the
    counters) and, after an LMDB commit, the writes held back during it (polecat/frontier/db.py rule 3)
    in steps (db.py rule 15): :data:`APPLY_CHUNK` rows at a time, the loop getting a turn once a step
    has applied :data:`APPLY_STEP` chunks or spent :data:`APPLY_STEP_SECONDS`; frontier calls wait
    meanwhile (:attr:`Commits.frontier_free`, as during an LMDB commit). Before them it ranks the
    records for the working-set cut in steps too (host_table.py rule 22), :data:`RANK_STEP` records a
    loop turn, frontier calls going on. In one step, the ranking and the writes held a 1M-host breadth
    crawl's loop 45-68 ms (benchmarks/README.md "Issue 39: a million pages of a 1M-host breadth
    crawl").
12. After the commit has begun (rule 16), a rebuild of the frontier's heaps that the commit found due is
    made a heap a loop turn (polecat/frontier/host_table.py rule 23), frontier calls going on.
13. The stop's commit (rule 3) is one step on the loop: it comes once the lease loop has ended and the
    requests in flight finished or were cancelled (polecat/node/leases.py rule 4), so no request, and
    no host's politeness, waits for it, and most of it (~110-120 ms in a 1M-host breadth crawl) is the
    wait for the LMDB commit on the writer thread (benchmarks/README.md "Issue 39: page work a loop
    turn"). What else a process serves on its loop then (the API of ``polecat node``, a cluster
    member's lease keep-alive) is late by as much, far within their timeouts.
14. Whoever waits for a free frontier looks again once woken (:meth:`Commits.frontier_freed`): a
    periodic commit sets :attr:`Commits.frontier_free` after its writes and clears it for its LMDB
    commit in the same step of the loop, so a wait that returned at its wake-up let a page's pipeline
    read the frontier during the LMDB commit, holding the loop until it ended (the seeds feed's steps
    did too: benchmarks/README.md "Issue 39: page work a loop turn").
15. Before a periodic commit's LMDB commit (polecat/frontier/db.py rule 6, :meth:`FrontierDB.lmdb_next`),
    the run's lease loop takes leases ahead (:attr:`Commits.lease_ahead`, polecat/node/leases.py rule 7)
    for the commit's expected hold (:attr:`Commits.lmdb_hold`: the last LMDB commit's, from the frontier
    held for its writes (rule 16) to the frontier free again; :data:`LMDB_HOLD_FIRST` before any), and is
    woken once the frontier is free again. No frontier call is made during the hold (rule 2), and a crawl
    that leased nothing for its length stopped for seconds at every LMDB commit at 10M URLs
    (benchmarks/README.md "Issue 39: leasing during an LMDB commit").
16. A commit is whole: a decision's rows (a URL queued, one moved to done) and its host's record and
    the counters go into one commit. The host records, counters and sequence numbers the frontier writes
    for a commit (:meth:`Frontier.prepare_commit`, host_table.py rule 1: a record once a commit, as it is
    then) are taken before the commit begins (:meth:`FrontierDB.start_commit`, which takes every write
    applied until then), and its writes' steps (rule 11) await between: the periodic commit keeps
    :attr:`Commits.frontier_free` cleared across that span, so the callers that wait for it (the lease
    loop, page work, the hand-off, the seeds feed) decide nothing there; the leases taken ahead (rule 15)
    come before it, the heaps' rebuild (rule 12) after; and what a caller that does not wait decided
    meanwhile (an operator's control, a library's call) has its records and counters written in the step
    the commit begins (:meth:`Frontier.late_writes`, host_table.py rule 28). Before, the lease loop and
    page work decided between the two: a kill -9 after such a commit left a host whose record counted one
    URL more or fewer than its queue held, and one with a URL it did not count was never leased again:
    the crawl ended with it queued (tests/test_crawl_restart.py's kill -9 test, which found it).
17. Whoever waits for a commit (:meth:`Commits.durable`, :meth:`Commits.next_periodic`: the operator
    API's answer, a hand-off receive's acknowledgement, a checkpoint round) is answered by a commit that
    began after it asked: the periodic commit takes the waiters as it begins (rule 16's step), and those
    that ask later wait for the next. Before, every waiter went on at the end of the commit in progress,
    whose changes it might not hold: a hand-off batch queued while a log append was in flight was
    acknowledged by it, its sender dropped the batch, and a kill -9 before the next commit lost its URLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lmdb

from polecat.clock import Clock
from polecat.config import FrontierConfig
from polecat.dedup.seen import SeenSet
from polecat.errors import PolecatError
from polecat.frontier.db import NEAR_REBUILD, STORE_MARK, FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.records import Completion, Lease
from polecat.runloop import StepBudget
from polecat.store.base import PageStore
from polecat.writes import Delete, Put

if TYPE_CHECKING:
    from polecat.cluster.link import ClusterLink
    from polecat.node.pipeline import PagePipeline

log = logging.getLogger("polecat")

BLOOM_SAVE_INTERVAL = 60.0
DEPOSIT_GATHER = 0.05
"""Seconds a store flush asked for by a deposit waits for more deposits (rule 8): a fifth of the default
``commit_ms``, short against ``cluster.claim_wait``."""
AUTO_REBUILD_RECORDS = 20_000
"""Store records a node indexes again as it opens after a fingerprint format change (rule 7): ~0.13 ms of
CPU a stored page (benchmarks/README.md, "Upgrading a data dir"), so a few seconds at most."""
DEFERRED_STEP = 64
"""Held page completions completed in one step of the event loop at most (rule 10)."""
DEFERRED_STEP_SECONDS = 0.01
"""Seconds of held page completions in one step of the event loop at most (rule 10)."""
APPLY_CHUNK = 64
"""Rows a commit applies between two looks at its step's budget (rule 11)."""
APPLY_STEP = 32
"""Chunks of :data:`APPLY_CHUNK` writes a commit applies in one step of the event loop at most (rule 11)."""
APPLY_STEP_SECONDS = 0.01
"""Seconds of writes a commit applies in one step of the event loop at most (rule 11)."""
RANK_STEP = 4096
"""Host records a commit ranks for the working-set cut in one step of the event loop (rule 11)."""
LMDB_HOLD_FIRST = 1.0
"""Seconds an LMDB commit is expected to hold the frontier before one was measured (rule 15): about the
mean of the 10M-URL runs (benchmarks/README.md, "Issue 39: where each bound stands")."""
REBUILD_BATCH = 32
"""Store records the background rebuild indexes in one turn of the loop (rule 7): a few ms of CPU, so
requests in flight are not held up."""


class Commits:
    """Makes the node's state durable in the order of rule 1; see the module docstring."""

    def __init__(self, cfg: FrontierConfig, *, db: FrontierDB, frontier: Frontier, store: PageStore,
                 seen: SeenSet, bloom_path: Path, link: ClusterLink | None, clock: Clock,
                 fail: Callable[[BaseException], None], wake: Callable[[], None]) -> None:
        self._cfg = cfg
        self._db = db
        self._frontier = frontier
        self._store = store
        self._seen = seen
        self._bloom_path = bloom_path
        self._link = link
        self._clock = clock
        self._fail = fail
        self._wake = wake
        self._bloom_saver = ThreadPoolExecutor(1, thread_name_prefix="polecat-bloom-save")
        """Writes the seen-set's Bloom snapshots, one at a time and in order (off the loop)."""
        self._last_bloom_save = 0.0
        self._durable: list[asyncio.Future[None]] = []
        self._deferred: deque[tuple[Lease, Completion]] = deque()
        self._due = asyncio.Event()
        self._to_lmdb = False
        """The next commit is an LMDB commit (rule 9)."""
        self._gather: asyncio.TimerHandle | None = None
        """The store flush deposits asked for, while it waits for more (rule 8)."""
        self._hurry = False
        """A whole commit is wanted before ``commit_ms`` passes (rule 3: :meth:`durable`, ``commit_ops``);
        a wake-up of the deposits alone asks for a store flush (rule 8)."""
        self._periodic = False
        """A periodic committer runs (:meth:`run`): commits wait for it instead of running on the loop."""
        self.flushing = False
        """A periodic commit's store flush is running in a worker thread (rule 2)."""
        self.frontier_free = asyncio.Event()
        self.frontier_free.set()
        self.near_rebuild_left = 0
        """Store records of an older fingerprint format not indexed yet (rule 7)."""
        self._rebuilt_unsaved = False
        """The background rebuild applied a batch since the last periodic commit: one is due even when
        the crawl changed nothing (an idle node keeps its progress too)."""
        """Clear while a periodic commit's LMDB commit runs on the frontier's writer thread: frontier
        calls wait for it (polecat/frontier/db.py rule 2)."""
        self.last = (0.0, 0.0)
        """Wall-clock time and duration (seconds) of the last commit."""
        self.lease_ahead: Callable[[float], Awaitable[None]] | None = None
        """The running lease loop's :meth:`~polecat.node.leases.LeaseLoop.lease_ahead` (rule 15); None
        between runs."""
        self.lmdb_hold = LMDB_HOLD_FIRST
        """Seconds the last LMDB commit held the frontier (rule 15)."""

    def close(self) -> None:
        """Stop the Bloom saver (after the last commit)."""
        self._bloom_saver.shutdown()

    # --- asking for one --------------------------------------------------------------------------

    async def durable(self, *, lmdb: bool = False) -> None:
        """Return once a frontier commit holds every change made so far (rule 3): made at once, on the
        loop outside a run, or by the periodic committer, asked to hurry. ``lmdb``: an LMDB commit
        (rule 9)."""
        if not self._periodic:
            self.commit(lmdb=lmdb)
            return
        self._to_lmdb |= lmdb
        self._hurry = True
        self._due.set()
        await self.next_periodic()

    async def next_periodic(self) -> None:
        """Return once the next periodic commit is made, in its own time (a hand-off receive: many
        batches share one commit); fails if none will be made (rule 6)."""
        fut = asyncio.get_running_loop().create_future()
        self._durable.append(fut)
        await fut

    async def frontier_freed(self) -> None:
        """Return once no commit holds the frontier (rule 2), looking again after each wake-up: a
        commit sets :attr:`frontier_free` and clears it again for its LMDB commit in one step of the
        loop, and those it woke run after that, during the LMDB commit (rule 14)."""
        free = self.frontier_free
        while not free.is_set():
            await free.wait()

    def after_change(self) -> None:
        """A change was applied: commit early once ``commit_ops`` are pending (rule 3)."""
        if self._frontier.pending_ops >= self._cfg.commit_ops:
            self._hurry = True
            self._due.set()

    def defer(self, lease: Lease, completion: Completion) -> bool:
        """Hold a page's completion for the commit after the flush in progress (rule 2); False when no
        flush runs and it may be completed now."""
        if not self.flushing or lease.kind != "page":
            return False
        self._deferred.append((lease, completion))
        return True

    # --- making one ------------------------------------------------------------------------------

    def commit(self, *, save_bloom: bool | None = None, lmdb: bool = False) -> None:
        """A commit on the loop (rule 3): store flush, outbox, the Bloom snapshot (``save_bloom``: True
        always, None when :data:`BLOOM_SAVE_INTERVAL` has passed, False never), the frontier (``lmdb``:
        an LMDB commit, rule 9)."""
        self._complete_deferred()
        started = self._clock.wall()
        claims = self._link.claims if self._link is not None else None
        stored = claims.before_flush() if claims is not None else {}
        self._store.flush()
        if claims is not None:
            claims.after_flush(stored)  # rule 8
        if self._link is not None:
            self._link.handoff.commit()
        now = self._clock.wall()
        if save_bloom or (save_bloom is None and now - self._last_bloom_save >= BLOOM_SAVE_INTERVAL):
            # On the saver's thread, after any snapshot still being written there (rule 5).
            self._bloom_saver.submit(self._seen.save, self._bloom_path, self._db.next_seq).result()
            self._last_bloom_save = now
        self._db.apply(self._frontier.prepare_commit())
        self._mark_store()
        held, self._durable = self._durable, []  # rule 17: all of them, none can come in between
        try:
            self._db.commit(to_lmdb=lmdb)
        except BaseException:
            self._durable[:0] = held
            raise
        self._committed(started, held)

    def try_commit(self, *, save_bloom: bool | None = None) -> bool:
        """:meth:`commit`, stopping the node when state cannot be saved (rule 6); whether it succeeded."""
        try:
            self.commit(save_bloom=save_bloom)
        except (PolecatError, OSError, lmdb.Error) as exc:
            self._fail(exc)
            return False
        return True

    async def _commit_off_loop(self) -> None:
        """The periodic commit (rule 2)."""
        started = self._clock.wall()
        self.flushing = True
        try:
            await self._flush_off_loop()
            if self._link is not None:
                await _committed_off_loop(self._link.handoff.start_commit())
                self._link.handoff.finish_commit()
            while not self._frontier.rank_for_commit(RANK_STEP):  # noqa: ASYNC110 - rule 11: a step a loop turn
                await asyncio.sleep(0)
            if self.lease_ahead is not None and self._db.lmdb_next(to_lmdb=self._to_lmdb):
                await self.lease_ahead(self.lmdb_hold)  # rule 15, before the cut (rule 16)
            self.frontier_free.clear()  # rules 11 and 16: no frontier call until the commit has begun
            cut_at = self._clock.monotonic()  # the hold the leases ahead cover starts here (rule 15)
            try:
                self._db.apply_later(self._frontier.prepare_commit())
                self._mark_store()
                self._rebuilt_unsaved = False
                await asyncio.sleep(0)  # the loop's turn after the records' encoding and the cut
                await self._apply_in_steps()
                self._db.apply(self._frontier.late_writes())  # rule 16: in the step the commit begins
                pending = self._db.start_commit(to_lmdb=self._to_lmdb)
            except BaseException:
                self.frontier_free.set()
                raise
            held, self._durable = self._durable, []  # rule 17: the waiters this commit holds the changes of
            self._to_lmdb = False
            held_from = cut_at if self._db.committing else None
            if held_from is None:  # a log append only: frontier calls go on during it (rule 2)
                self.frontier_free.set()
            try:
                await _committed_off_loop(pending)
                self._db.finish_commit()
                await self._apply_in_steps()  # the writes held back during an LMDB commit (rule 11)
            except BaseException:
                self._durable[:0] = held  # failed with the others (rule 6)
                raise
            finally:
                self.frontier_free.set()
            if held_from is not None:
                self.lmdb_hold = self._clock.monotonic() - held_from
                self._wake()  # rule 15: a lease loop asleep on its leases taken ahead
            while not self._frontier.heaps_step():  # noqa: ASYNC110 - rule 12: a heap a loop turn
                await asyncio.sleep(0)
            self._committed(started, held)
        finally:
            self.flushing = False
        await self._complete_deferred_in_steps()
        now = self._clock.wall()
        if now - self._last_bloom_save >= BLOOM_SAVE_INTERVAL:
            self._last_bloom_save = now
            # A copy taken after the commit holds every key it holds (tagged with it); written meanwhile.
            snapshot, tag = self._seen.snapshot(), self._db.seq
            await asyncio.wrap_future(self._bloom_saver.submit(snapshot.save, self._bloom_path, tag))

    async def _apply_in_steps(self) -> None:
        """Rule 11: the writes queued in the frontier (polecat/frontier/db.py rule 15) applied a step of
        the event loop at a time."""
        step = StepBudget(self._clock, APPLY_STEP, APPLY_STEP_SECONDS)
        while self._db.apply_step(APPLY_CHUNK):
            if step.spent():
                await asyncio.sleep(0)
                step.begin()

    async def _try_off_loop(self, make: Callable[[], Awaitable[None]]) -> bool:
        """``make()`` (a commit or a store flush, off the loop), stopping the node when it fails (rule 6);
        whether it succeeded."""
        try:
            await make()
        except (PolecatError, OSError, lmdb.Error) as exc:
            self._fail(exc)
            return False
        except Exception as exc:  # a bug: stop with what was committed, never hang on deferred completions
            log.exception("commit failed")
            self._fail(exc)
            return False
        return True

    def start(self) -> asyncio.Task[None]:
        """Start the periodic committer of a run (rule 3): every ``commit_ms``, or sooner, until
        :meth:`stop`."""
        self._periodic = True
        self._frontier.rebuild_heaps_in_steps()  # rule 12
        self._last_bloom_save = self._clock.wall()
        if self._link is not None and self._link.claims is not None:  # rule 8: deposits wait for a flush
            self._link.claims.flush_soon = self._deposits_due
        return asyncio.create_task(self._run())

    async def _run(self) -> None:
        period = self._cfg.commit_ms / 1000
        loop = asyncio.get_running_loop()
        whole_at = loop.time() + period
        while self._periodic:
            with contextlib.suppress(TimeoutError):
                # not wait_for: on 3.11 it can swallow a cancel
                async with asyncio.timeout_at(whole_at):
                    await self._due.wait()
            self._due.clear()
            if not self._periodic:
                return
            claims = self._link.claims if self._link is not None else None
            deposits = claims is not None and claims.flush_wanted()
            if not (self._hurry or loop.time() >= whole_at):  # the deposits' wake-up: a flush (rule 8)
                if deposits and not await self._try_off_loop(self._flush_off_loop):
                    return
                continue
            self._hurry = False
            if (self._frontier.pending_ops or self._durable or self._rebuilt_unsaved or deposits) and \
                    not await self._try_off_loop(self._commit_off_loop):
                return
            whole_at = loop.time() + period

    async def _flush_off_loop(self) -> None:
        """The store flush off the loop, then the first pages it made durable reported and the deposits it
        holds acknowledged (rule 8; claims rules 7 and 12): a periodic commit's first step, and alone at
        the deposits' wake-up."""
        claims = self._link.claims if self._link is not None else None
        stored = claims.before_flush() if claims is not None else {}
        await asyncio.to_thread(self._store.flush)
        if claims is not None:
            claims.after_flush(stored)

    def _deposits_due(self) -> None:
        """Rule 8: a store flush :data:`DEPOSIT_GATHER` from the first deposit since the last one asked."""
        if self._gather is None:
            self._gather = asyncio.get_running_loop().call_later(DEPOSIT_GATHER, self._gathered)

    def _gathered(self) -> None:
        self._gather = None
        self._due.set()

    def stop(self) -> None:
        """End the periodic committer after the commit in progress; later commits run on the loop."""
        self._periodic = False
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None
        self._due.set()

    @property
    def periodic(self) -> bool:
        """Whether the periodic committer runs (between a run's start and its end)."""
        return self._periodic

    def abandon(self) -> None:
        """Fail what still waits for a commit once no more are made (rule 6): a hand-off receive then
        answers "error" and its sender keeps the batch."""
        waiters, self._durable = self._durable, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(PolecatError("the crawl stopped before a commit held this change"))

    def _complete_next(self) -> None:
        """Complete the oldest held page completion."""
        lease, completion = self._deferred.popleft()
        self._db.apply(self._frontier.complete(lease, completion, self._clock.wall()))

    def _complete_deferred(self) -> None:
        """Complete every held page completion now (a commit on the loop; rule 10's steps may be midway)."""
        if not self._deferred:
            return
        while self._deferred:
            self._complete_next()
        self._wake()

    async def _complete_deferred_in_steps(self) -> None:
        """Rule 10. Those not completed yet stay in ``_deferred``, where a commit on the loop finds them."""
        deferred = self._deferred
        step = StepBudget(self._clock, DEFERRED_STEP, DEFERRED_STEP_SECONDS)
        while deferred:
            step.begin()
            while deferred:
                self._complete_next()
                if step.spent():
                    break
            self._wake()
            if deferred:
                await asyncio.sleep(0)

    def _committed(self, started: float, waiters: list[asyncio.Future[None]]) -> None:
        """A commit is made: ``waiters``, those that waited for it (rule 17), go on."""
        ended = self._clock.wall()
        self.last = (ended, ended - started)
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # --- the store mark (rule 4) -----------------------------------------------------------------

    def _mark_store(self) -> None:
        self._db.apply([Put("meta", STORE_MARK, str(self._store.record_count()).encode())])

    def rebuild_near_index(self, pipeline: PagePipeline, *, whole: bool) -> tuple[int, int]:
        """Index the stored pages a fingerprint format change left out (rule 7): all of them when
        ``whole`` or when cheap. Returns ``(pages indexed, store records left for later)``."""
        raw = self._db.txn.get(NEAR_REBUILD, db=self._db.meta)
        if raw is None:
            return 0, 0
        left = self._store.record_count() - int(bytes(raw))
        if not whole and left > AUTO_REBUILD_RECORDS:
            log.warning("near-duplicate index: %d store records of an older fingerprint format are indexed "
                        "in the background as the crawl runs; pages fetched meanwhile are checked against "
                        "what is indexed so far (`polecat upgrade %s` indexes them all at once)", left,
                        self._db.path.parent)
            self.near_rebuild_left = left
            return 0, left
        try:
            added = pipeline.reindex(self._store.records_since(int(bytes(raw))))
        except PolecatError as exc:
            log.warning("near-duplicate index: the stored pages were not indexed again: %s", exc)
            return 0, left
        self._db.apply([Delete("meta", NEAR_REBUILD)])
        log.info("near-duplicate index: %d stored page(s) indexed in the new fingerprint format", added)
        return added, 0

    async def rebuild_in_background(self, pipeline: PagePipeline) -> None:
        """Rule 7 past the bound: index the records :meth:`rebuild_near_index` left, a batch a turn, while
        the node crawls; ends when they are indexed (the key deleted), or cancelled with the run."""
        raw = self._db.txn.get(NEAR_REBUILD, db=self._db.meta)
        if raw is None:
            return
        cursor, end = int(bytes(raw)), self._store.record_count()  # later pages index themselves
        started, added = self._clock.monotonic(), 0
        while cursor < end:
            await asyncio.sleep(0)  # the loop's turn: requests in flight go on between batches
            while not self.frontier_free.is_set():  # no frontier read during its commit (rule 2)
                await self.frontier_free.wait()
            try:
                # The reader is dropped (its index transaction ended) here: none is held across turns.
                take = min(REBUILD_BATCH, end - cursor)
                batch = list(itertools.islice(self._store.records_since(cursor), take))
                if not batch:
                    raise PolecatError(f"the store's log ends at record {cursor}, before {end}")
                added += pipeline.reindex(batch)
                cursor += len(batch)
                self._db.apply([Put("meta", NEAR_REBUILD, str(cursor).encode())] if cursor < end
                               else [Delete("meta", NEAR_REBUILD)])
            except (lmdb.Error, OSError) as exc:  # the frontier cannot be written: the node stops (rule 6)
                self._fail(exc)
                return
            except PolecatError as exc:  # the store cannot be read: collapses are missed, nothing is lost
                log.warning("near-duplicate index: the background rebuild stopped (%d records left): %s",
                            end - cursor, exc)
                return
            self._rebuilt_unsaved = True
            self.near_rebuild_left = end - cursor
        log.info("near-duplicate index: %d stored page(s) indexed in the background in %.1f s", added,
                 self._clock.monotonic() - started)

    def reindex_past_mark(self, pipeline: PagePipeline) -> int:
        """Index again the store records past the frontier's last mark (rule 4); returns how many pages
        were. A data dir without a mark (new, or from before marks) gets one at once, committed: nothing
        is known to be missing there, and a crash before the first commit leaves a mark to start from.
        A failure costs collapses, not pages: it is logged and the crawl goes on."""
        raw = self._db.txn.get(STORE_MARK, db=self._db.meta)
        if raw is None:
            self._db.apply(self._frontier.prepare_commit())
            self._mark_store()
            self._db.commit()
            return 0
        mark = int(bytes(raw))
        if mark >= self._store.record_count():
            return 0
        try:
            added = pipeline.reindex(self._store.records_since(mark))
        except PolecatError as exc:
            log.warning("near-duplicate index: the pages stored after the last frontier commit were not "
                        "indexed again: %s", exc)
            return 0
        log.info("near-duplicate index: %d page(s) stored after the last frontier commit indexed again",
                 added)
        return added


async def _committed_off_loop(commit: Future[Any]) -> None:
    """Wait for a commit running on a writer thread; its error is raised by the owner's finish."""
    with contextlib.suppress(lmdb.Error, PolecatError):
        await asyncio.wrap_future(commit)
