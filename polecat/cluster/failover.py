"""Failover for one cluster node: its slices shipped to object storage, a dead member's slices restored.

The policy is :mod:`.checkpoint_plan`'s; the blocking I/O is :mod:`.checkpoints`'. This module runs them
from the node's event loop. Rules:

1. A round commits the frontier and takes a snapshot of that commit (so it holds everything accepted
   until then), with the slices written up to that commit (given back if the round fails). It exports
   the groups of 64 slices with a slice written (checkpoint_plan rule 2), one at a time on the loop's
   thread, yielding in between
   (an LMDB read transaction must not cross threads: moving the exports to a worker thread crashed
   the process), and digests, uploads and writes the manifest in a worker thread. A group is read in
   steps of at most :data:`~polecat.frontier.handover.EXPORT_STEP` rows, the loop given a turn between
   two (issue 39: in one call a group held the loop ~160 ms of CPU at 1M URLs, ~10 us a URL it holds,
   so seconds at 50M; benchmarks/README.md): the steps are handover_ranges.py
   ``export_steps``, which the one-call export drains, so a group's bundle is that export's byte for
   byte; the snapshot is opened, stepped and closed on the loop's thread, and stays its commit's
   whatever the loop writes meanwhile (what it writes is marked written for the next round). Unlike a
   hand-over's export (handover.py rule 8) it leaves the slices' rule-5 marks alone: a round ships
   slices it keeps.
2. Before it ships, a round waits until the hand-off batches committed with its snapshot are
   acknowledged (``settled``): a snapshot records pages done whose links for other owners are then in
   those owners' frontiers, not only in this node's outbox, which dies with its disk. A round that
   cannot settle within :data:`SETTLE_WAIT` (a receiver frozen or cut off) ships all the same, with the URLs
   of the batches still unacknowledged (``unacked``) as its strays object (checkpoint_plan rule 7): a
   round skipped instead left heirs an older round to restore, pages fetched since to fetch again.
3. Manifest writes (rounds, hand-over entries, releases) take one lock and are made on the manifest
   the last write left, so none undoes another.
4. A round ships the slices whose owner key this node holds, less those it has handed over and not
   yet released (their manifest entries are gone already: checkpoint_plan rule 4), and carries the
   entries of the slices the Ring gives it that it does not hold (checkpoint_plan rule 2). A fenced
   node ships no round.
5. A failed round or write is logged and counted, never fatal: the previous manifest stays valid and
   the next round (after the interval) tries again. A round whose node lost its lease while it ran
   (``token`` differs at its end from its start, or is None: fenced) writes no manifest: a snapshot
   taken under a lease that is gone must not become what heirs restore (ownership rule 9); it counts
   as a failure, and its uploaded objects are collected like any unreferenced ones. The manifest a
   round writes carries that token (checkpoint_plan rule 8).
6. Restoring a dead member's slices reads its manifest, adopts the inherited slices from its objects
   (each adopted host waits the old owner's abort bound, then one full interval, from the adoption:
   ownership rule 11), commits, then asks for a round; a
   failure raises, so the claim of those slices fails and is retried with the restore. Objects are
   adopted one at a time, each in steps of at most :data:`~polecat.frontier.handover.ADOPT_STEP`
   records with the loop running in between (handover.py rule 9, ``Node.adopt_in_steps``; a big restore
   must not starve the lease renewals: a loop stalled for ``ttl / 2`` fences the node; issue 39: one
   object in one call held the loop ~0.7 s of CPU at 1M URLs). A periodic commit between two steps may hold a
   part of an object; a restore cut there (a crash, a cancel) records no slice restored, so the claim
   comes again with its restore, here or at another heir, and that adoption merges (handover.py rule 3:
   a URL already seen is not queued twice, a record is written again as it was): it ends as one
   adoption of the object would, the hosts' ``fetched`` counts aside, which each adoption adds
   (host_table rule 12); a node left holding a part of slices another heir restored hands them over
   to it as it does any slice with URLs queued here that it does not own (polecat/processes/machine.py
   reconcile, ``unowned_queued``), and that adoption merges too. A slice is
   restored once from a given manifest version (a claim retried after a restore does not adopt again).
   The manifest's strays (rule 2) are handed to ``on_strays`` once per manifest version, before the
   commit, by the heir that restores the manifest's lowest slice (checkpoint_plan rule 7): the node
   routes them to their owners, and the other heirs leave them.
   Every manifest of one restore is read first: a slice is taken from the one with the newest fencing
   token among those naming it (checkpoint_plan rule 8); a manifest refused for a slice (an older
   token) is named at WARNING and counted (:attr:`Failover.manifests_refused`).
7. A round marks a URL done only when its page is where heirs read it: with object storage for pages
   (``[store] url``), after its snapshot a round seals the store's open segment and waits until every
   sealed segment is confirmed there (``Node.bodies_shipped``, within the interval; otherwise the round
   is skipped and counted like rule 2's). Without it (``bodies_remote`` False) a dead member's pages
   are on its disk only: a restore counts the URLs it adopts as done with a stored page
   (:attr:`Failover.restored_without_body`) and says so at WARNING; they are not fetched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.checkpoint_plan import CheckpointError, CheckpointSchedule, Manifest, freshest, groups
from polecat.cluster.checkpoints import CheckpointStore
from polecat.cluster.ownership import Ownership
from polecat.errors import PolecatError
from polecat.frontier.handover import EXPORT_STEP
from polecat.frontier.handover_ranges import export_step

if TYPE_CHECKING:
    from polecat.frontier.bundle import Fence, SliceBundle
    from polecat.frontier.frontier import Frontier
    from polecat.frontier.records import AdoptReport

log = logging.getLogger(__name__)

SETTLE_WAIT = 1.0
"""Seconds at most (the interval, when shorter) a round waits for its hand-off batches to be
acknowledged before it carries the rest as strays (rule 2): the snapshot ages while it waits."""


class Node(Protocol):
    """What failover needs of a node (:class:`~polecat.node.member.Member` is the real one)."""

    @property
    def frontier(self) -> Frontier: ...

    async def commit(self, *, lmdb: bool = False) -> None:
        """Return once a frontier commit holds every change made so far (``lmdb``: an LMDB commit,
        polecat/node/commits.py rule 9)."""
        ...

    async def bodies_shipped(self, within: float) -> bool:
        """True once every page stored so far is in object storage (at once without it), False when
        that took over ``within`` seconds (rule 7)."""
        ...

    async def adopt_in_steps(self, bundle: SliceBundle, now: float, *,
                             wait_from: float | None = None) -> AdoptReport:
        """Take over the slices of ``bundle`` in steps, the loop given a turn between two (durable at the
        next commit; polecat/frontier/handover.py rule 9); its hosts wait one interval from ``now``, or
        from ``wait_from`` when later."""
        ...


Slices = Callable[[], tuple[frozenset[int], frozenset[int]] | None]
"""The slices a round ships and those it carries (None: fenced, no round)."""


@dataclass(frozen=True, slots=True)
class Restored:
    """One restore from a dead member's checkpoint (for logs and figures)."""

    member: str
    slices: int
    queued: int
    round: int
    seconds: float
    at: float
    """Wall-clock time the restored slices were committed here."""


async def _drained(steps: Generator[int, None, SliceBundle]) -> SliceBundle:
    """The bundle an export in steps ends with, the loop given a turn between two (rule 1)."""
    while (bundle := export_step(steps)) is None:  # noqa: ASYNC110 - a turn for the loop, not a wait
        await asyncio.sleep(0)
    return bundle


class Failover:
    """Slice checkpoints and restores of one node (rules above). ``open()``, ``attach(crawler)``, then
    run :meth:`run` as a task."""

    def __init__(self, store: CheckpointStore, node_id: str, interval: float, *,
                 settled: Callable[[float], Awaitable[bool]] | None = None,
                 unacked: Callable[[], bytes] | None = None,
                 on_strays: Callable[[bytes], int] | None = None,
                 token: Callable[[], Fence | None] | None = None, books: Callable[[], bool] | None = None,
                 bodies_remote: bool = True, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._unacked = unacked
        """The msgpack URL list of the hand-off batches not acknowledged now (rule 2; b"": none)."""
        self._on_strays = on_strays
        """Routes a dead member's strays (a msgpack URL list) to their owners; returns the URL count
        (rule 6)."""
        self._bodies_remote = bodies_remote
        """Pages are in object storage (``[store] url``): a dead member's are read from there (rule 7)."""
        self._books = books
        """Whether a round carries the content claim books (every heir reads them); None: always."""
        self._token = token
        """The node's fencing token now, None while fenced (rule 5); None: not in an etcd cluster."""
        self._settled = settled
        """Waits (at most the given seconds) until the hand-off batches committed so far are
        acknowledged; False if they were not (rule 2)."""
        self._clock = clock
        """Where rounds (``monotonic``) and manifest writes (``wall``) read the time."""
        self.schedule = CheckpointSchedule(interval)
        """When the next round is due, and the round numbers."""
        self.manifest = Manifest(node_id)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._crawler: Node | None = None
        self._restored: dict[int, tuple[str, int]] = {}
        """Slice -> (member, manifest version) it was last restored from (rule 6)."""
        self._handed: set[int] = set()
        self._strays_routed: set[tuple[str, int]] = set()
        """(member, manifest version) whose strays were routed (rule 6)."""
        self.rounds = self.failures = self.uploaded = self.bytes_shipped = 0
        self.exported = 0
        """Groups of slices exported by rounds (those with a slice written since the last round)."""
        self._tokens: dict[int, int] = {}
        """Slice -> the newest token of a manifest it was restored from here (rule 6). Not of bundles
        adopted: a node ships the strays it queued from seeds in a slice it never owned under its own
        token, and the slice's checkpoint would then be refused."""
        self.manifests_refused = 0
        """Slices not restored from a manifest because a newer token names them (rule 6)."""
        self.restored_without_body = 0
        """URLs restored as done whose pages were on a dead member's disk only (rule 7)."""
        self.last_round_at: float | None = None
        """``clock.monotonic()`` when the last round shipped (None: none yet in this run)."""
        self.restores: list[Restored] = []

    async def open(self) -> None:
        """Continue from this node's last manifest (its round numbers must only grow: senders wait for
        them)."""
        got = await asyncio.to_thread(self._store.read_manifest, self.manifest.node)
        if got is not None:
            self.manifest = got
            self.schedule.begun = got.round

    def attach(self, crawler: Node) -> None:
        self._crawler = crawler

    async def detach(self) -> None:
        """No more rounds or restores (the crawler is about to close); returns once none runs."""
        async with self._lock:
            self._crawler = None

    def covering_round(self) -> int:
        """The round whose manifest will hold everything committed so far (checkpoint_plan rule 3)."""
        return self.schedule.covering_round()

    async def round_of(self, member: str) -> int:
        """``member``'s last complete checkpoint round (0: none yet)."""
        got = await asyncio.to_thread(self._store.read_manifest, member)
        return got.round if got is not None else 0

    async def run(self, slices: Slices) -> None:
        """Ship a round whenever one is due, until cancelled."""
        while True:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):  # not wait_for: it can swallow a cancel (see handoff.py)
                async with asyncio.timeout(self.schedule.wait(self._clock.monotonic())):
                    await self._wake.wait()
            if not self.schedule.due(self._clock.monotonic()):
                continue
            now = slices()
            if now is None or not await self.ship(*now):  # fenced, detached or failed: not in a tight loop
                await asyncio.sleep(min(1.0, self.schedule.interval))

    async def ship(self, held: frozenset[int], carried: frozenset[int] = frozenset()) -> bool:
        """One round now (rules 1 to 5) of the ``held`` slices, keeping the entries of ``carried``
        ones; whether it was shipped."""
        async with self._lock:
            crawler = self._crawler
            if crawler is None:
                return False  # not attached yet, or detached: the crawler is closing
            began_at = self._clock.monotonic()
            round_ = self.schedule.begin(began_at)
            began = self._token() if self._token is not None else None
            try:
                await crawler.commit(lmdb=True)  # the snapshot below then reads the LMDB alone
            except PolecatError as exc:  # the crawler stopped on a fault: it says so itself
                self.failures += 1
                log.warning("slice checkpoint round %d: no frontier commit: %s", round_, exc)
                return False
            self._handed &= held
            shipped = frozenset(held - self._handed)
            snapshot = crawler.frontier.snapshot()
            written = crawler.frontier.take_written()  # of the same commit as the snapshot
            done = False
            try:
                strays = b""
                wait = self.schedule.interval if self._unacked is None else min(SETTLE_WAIT,
                                                                                 self.schedule.interval)
                if self._settled is not None and not await self._settled(wait):
                    if self._unacked is None:
                        self.failures += 1
                        log.warning("slice checkpoint round %d skipped: URLs handed to other nodes are not "
                                    "acknowledged yet", round_)
                        return False
                    strays = self._unacked()  # rule 2: they go with the round
                    log.info("slice checkpoint round %d carries the hand-off URLs not acknowledged yet "
                             "(%d bytes)", round_, len(strays))
                if not await crawler.bodies_shipped(self.schedule.interval):  # rule 7
                    self.failures += 1
                    log.warning("slice checkpoint round %d skipped: pages stored before it are not all in "
                                "object storage yet", round_)
                    return False
                entries, size = [], 0
                books = self._books is None or self._books()
                for group, ids in groups(shipped).items():
                    kept = None if ids & written else self.manifest.unchanged(group, ids)
                    if kept is not None:  # nothing written there since the last round (plan rule 2)
                        entries.append(kept)
                        continue
                    # On this thread: the snapshot never crosses threads. In steps (rule 1).
                    bundle = await _drained(snapshot.export_steps(ids, self._clock.wall(), books=books,
                                                                  budget=EXPORT_STEP))
                    self.exported += 1
                    entry, sent = await asyncio.to_thread(self._store.ship_group, group, bundle,
                                                          self.manifest)
                    entries.append(entry)
                    size += sent
                if self._token is not None and (began is None or self._token() != began):
                    raise CheckpointError("the lease it began under is gone (ownership rule 9)")
                report = await asyncio.to_thread(self._store.finish_round, self.manifest, round_, entries,
                                                 carried - shipped, self._clock.wall(), size, strays,
                                                 began)
                done = True
            except CheckpointError as exc:
                self.failures += 1
                log.warning("slice checkpoint round %d failed: %s", round_, exc)
                return False
            finally:
                snapshot.close()
                if not done:  # the next round ships what this one took (tables.py rule 6)
                    crawler.frontier.mark_written(written)
            self.manifest = report.manifest
            self.rounds += 1
            self.last_round_at = self._clock.monotonic()
            self.uploaded += report.uploaded
            self.bytes_shipped += report.bytes
        # Info, with its length: one line a checkpoint interval, and what an operator (or a test) needs to
        # tell how old a dead node's last shipped round can be.
        log.info("slice checkpoint round %d: %d slices, %d objects uploaded (%d bytes) in %.3f s", round_,
                 len(report.manifest.slices), report.uploaded, report.bytes,
                 self._clock.monotonic() - began_at)
        return True

    async def handed_in(self, body: bytes, slices: frozenset[int]) -> None:
        """Slices adopted by hand-over (``body`` is their bundle): in the manifest at once."""
        async with self._lock:
            self._handed -= slices
            try:
                self.manifest = await asyncio.to_thread(self._store.add_handover, body, slices, self.manifest,
                                                        self._clock.wall())
            except CheckpointError as exc:
                self.failures += 1
                log.warning("checkpoint of %d adopted slices failed (next round): %s", len(slices), exc)
                self.urge()

    async def handed_out(self, slices: frozenset[int]) -> None:
        """Slices handed over to their new owner: out of the manifest before their keys go."""
        async with self._lock:
            self._handed |= slices
            new = self.manifest.without(slices, self._clock.wall())
            try:
                await asyncio.to_thread(self._store.write_manifest, new, self.manifest)
            except CheckpointError as exc:
                self.failures += 1
                log.warning("dropping %d handed-over slices from the checkpoint failed: %s", len(slices), exc)
                return
            self.manifest = new

    async def restore(self, sources: Mapping[str, frozenset[int]]) -> None:
        """Adopt the slices in ``sources`` (member -> slices) from each member's checkpoint (rule 6)."""
        async with self._lock:
            crawler = self._crawler
            if crawler is None:
                raise CheckpointError("the crawler is not open (yet, or any more): restore later")
            manifests: dict[str, Manifest] = {}
            for member in sorted(sources):
                got = await asyncio.to_thread(self._store.read_manifest, member)
                if got is not None:
                    manifests[member] = got
            choice = freshest(manifests, sources, self._tokens)
            for member, slices in sorted(choice.refused.items()):
                self.manifests_refused += len(slices)
                log.warning("failover: %d slices not restored from %s's checkpoint: a newer fencing token "
                            "names them (checkpoint_plan rule 8; %s's token %s)", len(slices), member, member,
                            manifests[member].fence)
            for member in sorted(set(sources) | set(choice.take)):
                started = self._clock.monotonic()
                manifest = manifests.get(member)
                slices = choice.take.get(member, frozenset())
                todo = frozenset(s for s in slices if self._restored.get(s) != (member, manifest.version)) \
                    if manifest is not None else frozenset()
                if manifest is None or not todo:
                    log.info("failover: %s left no checkpoint of its %d slices moving here not restored yet",
                             member, len(sources.get(member, ())))
                    continue
                bundles = await asyncio.to_thread(self._store.fetch, manifest, todo)
                now = self._clock.wall()
                queued = found = stored = 0
                for bundle in bundles:  # one object (64 slices) at a time, each in steps (rule 6)
                    report = await crawler.adopt_in_steps(bundle, now, wait_from=Ownership.restore_hold(now))
                    queued += report.queued
                    stored += report.stored
                    found += len(bundle.ids)
                    await asyncio.sleep(0)  # the last step of one and the first of the next not at once
                if self._on_strays is not None and manifest.routes_strays(todo) \
                        and (member, manifest.version) not in self._strays_routed:
                    strays = await asyncio.to_thread(self._store.fetch_strays, manifest)
                    if strays:
                        log.info("failover: routed %d URLs %s had handed off unacknowledged",
                                 self._on_strays(strays), member)
                    self._strays_routed.add((member, manifest.version))
                if stored and not self._bodies_remote:  # rule 7
                    self.restored_without_body += stored
                    log.warning("failover: %d URLs of %s restored as done have their pages on its disk only "
                                "(no [store] url): they are not in this crawl's export unless that disk "
                                "comes back, and are not fetched again", stored, member)
                await crawler.commit()
                self._restored.update(dict.fromkeys(todo, (member, manifest.version)))
                if manifest.fence is not None:
                    for s in todo:
                        self._tokens[s] = max(self._tokens.get(s, 0), manifest.fence.revision)
                done = Restored(member, found, queued, manifest.round, self._clock.monotonic() - started,
                                self._clock.wall())
                self.restores.append(done)
                log.info("failover: restored %d slices of %s from its checkpoint round %d (%d URLs queued) "
                         "in %.3f s", found, member, manifest.round, queued, done.seconds)
            self.urge()

    def urge(self) -> None:
        """A round as soon as possible."""
        self.schedule.urge()
        self._wake.set()

