"""A node as one member of a crawl over several processes or machines: what the cluster's mechanisms
call on it (polecat/processes/worker.py, polecat/processes/machine.py, polecat/cluster/failover.py). A
library user's :class:`~polecat.node.crawler.Crawler` never needs it; it is ``crawler.member``.

Rules:

1. A member leases only hosts of the slices it owns (:meth:`Member.set_owned`: the Ring, ownership and
   fencing drive it); whatever else its frontier holds waits.
2. Every change a member makes for the cluster (adopted slices, released slices, admitted or handed URLs)
   is durable at the node's next commit; a hand-off receive answers only once a commit holds its URLs,
   so the sender may forget them (polecat/cluster/outbox.py).
3. A member that is stopping refuses new hand-offs (the sender keeps them and sends again later), and so
   does one whose node says no more when the URLs would be queued (:meth:`Member.receive`'s ``taking``:
   a node that began to leave while the batch waited for the frontier, polecat/processes/machine.py
   rule 7).
4. A request in flight to a host of a slice the member lost (fenced, its lease gone) is aborted when the
   cluster asks (:meth:`Member.abort_unpermitted`; polecat/node/lease_runner.py rule 7).
5. With object storage (``[store] url``), :meth:`Member.bodies_shipped` seals the store's open segment,
   commits (the store flush ships it) and waits until every sealed segment is confirmed there: what a
   commit before it recorded done has its body where a node without this one's disk reads it
   (polecat/cluster/failover.py rule 7).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from polecat.clock import Clock
from polecat.errors import PolecatError
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.node.commits import Commits
from polecat.node.lease_runner import LeaseRunner
from polecat.node.leases import LeaseLoop
from polecat.node.run_state import RunCounters, Waker

if TYPE_CHECKING:
    from polecat.cluster.batch import Batch, HandoffUrl
    from polecat.cluster.link import ClusterLink
    from polecat.frontier.bundle import Fence, SliceBundle
    from polecat.frontier.records import AdoptReport
    from polecat.frontier.routing import Admission
    from polecat.store.base import PageStore

SHIP_POLL = 0.05
"""Seconds between two looks at the store's unshipped segments (rule 5)."""


class Member:
    """The cluster's side of one node; see the module docstring."""

    def __init__(self, *, frontier: Frontier, db: FrontierDB, store: PageStore, commits: Commits,
                 loop: LeaseLoop, runner: LeaseRunner, counters: RunCounters, waker: Waker,
                 link: ClusterLink | None, clock: Clock, receiving: Callable[[], bool]) -> None:
        self._frontier = frontier
        self._db = db
        self._store = store
        self._commits = commits
        self._loop = loop
        self._runner = runner
        self._counters = counters
        self._waker = waker
        self._link = link
        self._clock = clock
        self._receiving = receiving
        self._owned: frozenset[int] | None = None

    @property
    def fetches(self) -> int:
        """Page fetches made in this run (a running count: its rate is the node's fetch rate)."""
        return self._counters.fetches

    @property
    def frontier(self) -> Frontier:
        """The node's frontier (read on the event-loop thread only)."""
        return self._frontier

    async def commit(self, *, lmdb: bool = False) -> None:
        """Return once a commit holds every change made so far (polecat/node/commits.py; ``lmdb``: an
        LMDB commit, its rule 9)."""
        await self._commits.durable(lmdb=lmdb)

    async def bodies_shipped(self, within: float) -> bool:
        """Rule 5: True once every page stored before this call is in object storage (at once for a
        store without it: there is nothing to wait for); False when that took over ``within`` seconds."""
        if self._store.unshipped() is None:
            return True
        self._store.seal()
        await self._commits.durable()
        deadline = self._clock.monotonic() + within
        while self._store.unshipped():
            if self._clock.monotonic() >= deadline:
                return False
            await asyncio.sleep(SHIP_POLL)
        return True

    def set_owned(self, slices: frozenset[int], *, hold: float = 0.0) -> None:
        """Lease only hosts of ``slices`` from now on (rule 1); the hosts of slices gained wait ``hold``
        seconds, then one interval (:meth:`Frontier.set_owned`)."""
        if slices != self._owned:
            self._owned = slices
            now = self._clock.wall()
            self._frontier.set_owned(slices, now, wait_from=now + hold)
            self._waker.set()

    async def adopt_in_steps(self, bundle: SliceBundle, now: float, *,
                             wait_from: float | None = None) -> AdoptReport:
        """Take over the slices of ``bundle`` (rule 2) in steps, the loop given a turn between two, none
        during an LMDB commit (polecat/frontier/handover.py rule 9); durable at the next commit, which the
        caller awaits before it answers the sender (a hand-over) or claims the slices (a restore,
        polecat/cluster/failover.py rule 6). Its hosts wait one interval from ``now``, or from
        ``wait_from`` when later (:meth:`Frontier.adopt`)."""
        adoption = self._frontier.begin_adopt(bundle, now, wait_from=wait_from)
        try:
            while True:
                await self._frontier_free()
                report = self._db.applied(adoption.step())
                if report is not None:
                    break
                await asyncio.sleep(0)
        finally:
            adoption.close()
        self._adopted(bundle.ids)
        return report

    def _adopted(self, ids: frozenset[int]) -> None:
        if self._link is not None and self._link.claims is not None:  # claims rule 8
            self._link.claims.adopted(ids)
        self._waker.set()

    async def _frontier_free(self) -> None:
        """Once no LMDB commit holds the frontier (polecat/node/commits.py rule 2)."""
        while not self._commits.frontier_free.is_set():
            await self._commits.frontier_free.wait()

    async def export(self, slices: Iterable[int], fence: Fence | None = None, *, books: bool = True) -> bytes:
        """The bundle bytes of ``slices`` as of a commit made now, exported in steps with the loop given
        a turn between two (polecat/frontier/handover.py rule 8); ``fence`` and ``books`` as
        :meth:`Frontier.export_slices`."""
        await self._commits.durable(lmdb=True)  # the snapshot then reads the LMDB alone (commits rule 9)
        snapshot = self._frontier.snapshot()
        try:
            export = self._frontier.begin_export(snapshot, slices, self._clock.wall(), fence, books=books)
            while (bundle := export.step()) is None:  # noqa: ASYNC110 - a turn for the loop, not a wait
                await asyncio.sleep(0)
        finally:
            snapshot.close()
        # Its frames read again for the bundle's digest: bytes alone, off the loop.
        return await asyncio.to_thread(bundle.to_bytes)

    def abort_unpermitted(self) -> int:
        """Abort the requests in flight that lost their leave to go on (rule 4); returns how many."""
        return self._runner.abort_unpermitted()

    async def release_slices(self, slices: Iterable[int]) -> None:
        """Drop ``slices`` from this node's frontier once their new owner holds them, in steps, the loop
        given a turn between two (polecat/frontier/handover.py rule 7), none during an LMDB commit
        (polecat/node/commits.py rule 2)."""
        ids = frozenset(slices)
        release = self._db.applied(self._frontier.begin_release(ids))
        try:
            while True:
                await self._frontier_free()
                if self._db.applied(release.step()):
                    break
                await asyncio.sleep(0)
        except asyncio.CancelledError:  # a hand-over timed out: its slices would refuse URLs until an open
            while not self._db.applied(release.step()):
                pass
            self._released(ids)
            raise
        self._released(ids)

    def _released(self, ids: frozenset[int]) -> None:
        if self._link is not None and self._link.claims is not None:  # claims rule 8
            self._link.claims.released(ids)

    def admit(self, urls: Iterable[str], depth: int, importance: float, *, hops: int = 0) -> Admission:
        """Route discovered URLs (:meth:`Frontier.admit`): the owned ones queued, the others answered."""
        now = self._clock.wall()
        admission = self._db.applied(self._frontier.admit(urls, depth, importance, now, hops=hops))
        self._waker.set()
        return admission

    async def receive(self, batch: Batch, *, taking: Callable[[], bool] | None = None) -> None:
        """Queue URLs another member handed over (they are this member's by the Ring) and return once a
        commit holds them (rule 2; the hand-off receiver's sink). ``taking``: whether the node still takes
        batches, asked right before the URLs are queued (False: refused, rule 3)."""
        if not self._receiving():
            raise PolecatError("this member is stopping; send the batch again later")
        await self._commits.frontier_freed()  # commits.py rule 14
        if not self._receiving() or (taking is not None and not taking()):  # rule 3, asked again now
            raise PolecatError("this member is stopping or leaving; send the batch again later")
        self.queue_handed(batch.urls, self._clock.wall())
        await self._commits.next_periodic()

    def queue_handed(self, urls: Iterable[HandoffUrl], now: float) -> None:
        """Queue URLs handed to this member (rule 2); a forwarded seed is queued as a seed (its host
        joins the scope), a page requisite as a requisite (polecat/frontier/requisites.py)."""
        for u in urls:
            if u.seed:
                self._db.applied(self._frontier.add_seed(u.url, now, u.importance))
            elif u.requisite:
                self._db.applied(self._frontier.add_many([u.url], u.depth, u.importance, now, requisite=True,
                                                          hops=u.hops))
            else:
                self._db.applied(self._frontier.add(u.url, u.depth, u.importance, now, hops=u.hops))
        self._waker.set()

    @property
    def quiet(self) -> bool:
        """Nothing to fetch, nothing to hand off, nothing being received (see polecat/cluster/link.py)."""
        return self._link is not None and self._link.quiet(self._loop.idle and not self._loop.tasks)
