"""The etcd ``Membership`` backend: the thin I/O around :class:`~polecat.cluster.ownership.Ownership`.

Rules:
1. Keys: ``/<cluster>/members/<id>`` -> the member record, JSON ``{"address": ..., "lease": ..., "leaving":
   ..., "wire": ..., "wire_oldest": ..., "release": ..., "sig": ...}`` signed with the cluster secret
   (:mod:`polecat.cluster.member_records`: a record that does not prove it is no member), and
   ``/<cluster>/owner/<slice>`` -> the owner's id, both under the node's lease (TTL ``ttl``, renewed every
   ``ttl / 3``, sooner after a renewal that failed: rule 9). A node joins by registering, leaves by flagging
   itself ``leaving`` (ownership rule 8), handing its slices over and revoking its lease, and is gone for
   everyone when the lease expires. ``lease`` is the member's fencing token; a record without it (written
   before it existed) reads as lease 0, and ``leaving`` absent as False; the wire fields absent read as
   0.2.0's wire (wire rule 2), and a record whose wire fields are malformed is skipped like any malformed
   record.
2. The member list is read once, then followed with a watch on the prefix; every renewal also re-reads
   it, so a watch that broke silently (etcd restarted) costs at most ``ttl / 3`` of staleness.
3. Every decision (what to claim, what to release, when to fence) is the state machine's; this module
   only turns its actions into etcd calls and etcd's answers into its events. An etcd call that fails or
   hangs past ``ttl / 3`` is an event too (no renewal), never a crash of the node.
4. Owner keys are claimed with create-if-absent transactions, up to 64 keys per transaction (under
   etcd's default limit of 128 operations), after one read that leaves out the keys already taken; a
   chunk that races another claim fails whole and is retried later. Keys are deleted only if they still
   name this node, in chunks of 64 the same way (key by key when a chunk meets a key not ours).
5. A leaving node keeps renewing its lease until its slices are handed over (:meth:`EtcdMembership.close`):
   a hand-over stops once the node is fenced (polecat/processes/machine.py rule 8), and one that takes
   longer than ``ttl / 2`` (waiting for requests in flight, a busy peer) would otherwise be abandoned
   half-way; the lease would then be revoked with slices unhanded, which its heirs restore from a
   checkpoint that may be rounds old (pages fetched since are fetched again). While leaving, a renewal
   only renews: the member list stays the one the leave began with, and a lease found lost is not
   registered again (the hand-over under it stops; rule 9 of ownership).
6. A leave goes on past a step that fails (flagging the record leaving, the release with its
   hand-over, the revoke): a node that stops must stop. Each failure is logged at WARNING naming the
   step and counted (:attr:`EtcdMembership.leave_failures`, ``polecat_cluster_leave_failures_total``):
   the slices of a release that failed are restored by their heirs from a checkpoint once the lease
   expires, and an operator must be able to tell that from a clean leave.
7. Orphan records (ownership rule 12): ``/<cluster>/orphans/<id>`` -> JSON ``{"slices": [...],
   "version": ...}``, NOT under a lease: the slices a leave kept (no member that stays to hand them to)
   and the version of the checkpoint manifest that holds them. It is written after the release and
   before the revoke (a member that registers meanwhile still sees the leaver, and inherits by
   ownership rule 6); a record already there is merged in (the caller's ``orphaned`` is given it).
   Its node, started again, takes out of it the slices it wins (its data dir has them) and those it
   handed to their owners, who adopted them (:meth:`EtcdMembership.handed_over`; until then other
   members do not claim them: ownership rule 13), keeps the others in its checkpoint rounds and
   leaves them recorded: a node that stops again before it won or handed them over (a restart cut
   short) must not lose the only pointer to them. Its edits of its own record are one at a time.
   Every member list read (:meth:`EtcdMembership.resync`) reads the records too, and so does every
   ``retry`` seconds while a wanted slice waits for a registered member's record (ownership rule
   13); a claim that restored slices from a member removes the won ones from its record (the key goes
   when none is left). Two heirs editing one record
   at once may leave a slice in it that one of them restored: the next owner restores it once more,
   which adoption merges (nothing is queued twice). A malformed record is logged and skipped.
8. A registration is a lease AND the member record under it. A re-registration (the lease expired:
   a partition, a stalled loop) whose record write fails or times out after the lease was granted
   (a loaded machine: both must fit in ``ttl / 3``) is finished by the next renewal that succeeds: the
   record is written (and the fencing token taken) before the renewal counts. A live lease with no
   record left the node a member to nobody and without a token (ownership rule 9): no hand-off batch,
   checkpoint round or hand-over went out under it, so the URLs only it held were never fetched
   while the process lived.
9. A renewal that failed (no answer, a timeout, a re-registration cut short) is tried again
   ``ttl / 12`` later, not ``ttl / 3``: once etcd is back it gives each lease its TTL again (a restarted
   etcd from when it is leader), and the node must renew within that. A try every ``ttl / 3``, each
   waiting up to ``ttl / 3``, left gaps of two thirds of the lease between tries: on a loaded machine
   (etcd slow to serve after its restart, a try hanging on the connection meanwhile) a node missed its
   restored lease, re-registered, and its slices were restored elsewhere although no node had died.
   The first renewal after failures is logged at INFO with the number of tries and the time since the
   last renewal.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.member_records import MemberRecords, parse_record
from polecat.cluster.membership import Member, view
from polecat.cluster.ownership import Action, Claim, Ownership, Release
from polecat.frontier.bundle import Fence

log = logging.getLogger(__name__)

_CHUNK = 64


@dataclass(frozen=True, slots=True)
class KeyEvent:
    """A change under a watched prefix (``value`` is None for a delete)."""

    key: str
    value: bytes | None
    lease: int = 0
    """The lease the key is held under (0: none, or a delete)."""


class EtcdClient(Protocol):
    """The etcd calls the cluster needs (v3 API). :class:`AetcdClient` is the real one."""

    async def grant(self, ttl: int) -> int:
        """A new lease id."""
        ...

    async def keepalive(self, lease: int) -> bool:
        """Renew ``lease``; False if it no longer exists."""
        ...

    async def revoke(self, lease: int) -> None: ...

    async def put(self, key: str, value: bytes, lease: int) -> int:
        """Write ``key`` under ``lease``; the store revision of the write."""
        ...

    async def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        """Keys under ``prefix`` and the store revision they were read at."""
        ...

    async def get_prefix_leased(self, prefix: str) -> tuple[dict[str, tuple[bytes, int]], int]:
        """Keys under ``prefix`` with their values and the leases they are held under, and the store
        revision they were read at."""
        ...

    def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[KeyEvent]: ...

    async def create_all(self, values: dict[str, bytes], lease: int) -> bool:
        """Create every key in ``values`` under ``lease`` if none exists; False (nothing written) else."""
        ...

    async def delete_all_if(self, values: dict[str, bytes]) -> bool:
        """Delete every key in ``values`` if each still has its value there; False (nothing deleted) else."""
        ...

    async def close(self) -> None: ...


def members_prefix(cluster: str) -> str:
    return f"/{cluster}/members/"


def owner_key(cluster: str, slice_id: int) -> str:
    return f"/{cluster}/owner/{slice_id:04d}"


def orphans_prefix(cluster: str) -> str:
    return f"/{cluster}/orphans/"


@dataclass(frozen=True, slots=True)
class Orphans:
    """A member's orphan record (rule 7): the slices it left behind, in its manifest ``version``."""

    slices: frozenset[int]
    version: int

    def to_bytes(self) -> bytes:
        return json.dumps({"slices": sorted(self.slices), "version": self.version},
                          separators=(",", ":")).encode()

    @classmethod
    def parse(cls, raw: bytes) -> Orphans:
        """ValueError (or KeyError, TypeError) when ``raw`` is not a record."""
        info = json.loads(raw)
        return cls(frozenset(int(s) for s in info["slices"]), int(info["version"]))


def parse_orphans(cluster: str, kvs: Mapping[str, bytes]) -> dict[str, Orphans]:
    """The orphan records under the prefix by member (rule 7); a malformed one is logged, skipped."""
    prefix = orphans_prefix(cluster)
    out = {}
    for key, raw in kvs.items():
        try:
            out[key[len(prefix) :]] = Orphans.parse(raw)
        except (ValueError, KeyError, TypeError):
            log.warning("skipping malformed orphan record %s", key)
    return out


def parse_members(cluster: str, kvs: dict[str, bytes]) -> tuple[Member, ...]:
    """The member list from the keys under the members prefix, as the records claim it, unverified
    (``polecat cluster status``, which has no secret; a node believes only :class:`MemberRecords` that
    prove themselves). A malformed value is logged, skipped."""
    prefix = members_prefix(cluster)
    out = []
    for key, raw in kvs.items():
        try:
            member, _ = parse_record(key[len(prefix) :], raw)
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("skipping malformed member record %s", key)
            continue
        out.append(member)
    return view(out)



class EtcdMembership:
    """One node in an etcd-coordinated cluster: membership (the ``Membership`` protocol) and ownership.

    ``on_release`` is awaited with the slices that move away, after this node stopped leasing them and
    before their owner keys are deleted (the export to the new owners goes there). ``on_restore`` is
    awaited with a claim's inherited slices (member that left -> slices) before that claim is made
    (ownership rule 6); if it raises, the claim fails and is retried. ``orphaned`` is awaited once a
    leave's release is done, its lease still held: the slices it kept, to record in etcd (rule 7;
    None: none)."""

    def __init__(self, client: EtcdClient, cluster: str, me: Member, *, records: MemberRecords,
                 ttl: int = 10, clock: Clock = SYSTEM_CLOCK,
                 on_release: Callable[[frozenset[int]], Awaitable[None]] | None = None,
                 on_restore: Callable[[Mapping[str, frozenset[int]]], Awaitable[None]] | None = None,
                 orphaned: Callable[[], Awaitable[Orphans | None]] | None = None) -> None:
        self._client = client
        self._cluster = cluster
        self.records = records
        """Signs this node's record and checks the others' (records ignored: ``records.ignored``)."""
        self._me = me
        self._ttl = ttl
        self._clock = clock
        self._on_release = on_release
        self._on_restore = on_restore
        self._orphaned = orphaned
        self.own_orphans: frozenset[int] = frozenset()
        """The slices this node's own orphan record names (rule 7): still its to checkpoint."""
        self._settling = asyncio.Lock()
        """Held while an orphan record is edited: this node's own edits go one at a time (rule 7)."""
        self.ownership = Ownership(me.id, ttl=ttl)
        self._lease: int | None = None
        self.fence: Fence | None = None
        """This registration's fencing token (ownership rule 9); None while not registered."""
        self._members: tuple[Member, ...] = ()
        self._views: list[asyncio.Queue[tuple[Member, ...] | None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._renewing: asyncio.Task[None] | None = None
        """The renew loop among :attr:`_tasks`: a leave stops it last (rule 5)."""
        self._leaving = False
        """Set when :meth:`close` begins: renewals only renew (rule 5)."""
        self._work: asyncio.Queue[Action] = asyncio.Queue()
        self.leave_failures = 0
        """Steps of :meth:`close` that failed (rule 6)."""

    @property
    def self_id(self) -> str:
        return self._me.id

    def members(self) -> tuple[Member, ...]:
        return self._members

    async def changes(self) -> AsyncIterator[tuple[Member, ...]]:
        queue: asyncio.Queue[tuple[Member, ...] | None] = asyncio.Queue()
        self._views.append(queue)
        try:
            yield self._members
            while (got := await queue.get()) is not None:
                yield got
        finally:
            self._views.remove(queue)

    def leasable(self) -> frozenset[int]:
        """The slices this node may lease URLs from now (fenced: none)."""
        return self.ownership.leasable(self._clock.boottime())

    async def start(self) -> None:
        """Read this node's orphan record (rule 7), register (a lease and the member key), read the
        member list, start renewing and watching."""
        key = orphans_prefix(self._cluster) + self._me.id
        mine, _ = await self._client.get_prefix(key)
        record = parse_orphans(self._cluster, {key: mine[key]}).get(self._me.id) if key in mine else None
        self.own_orphans = record.slices if record is not None else frozenset()
        await self._register()
        self._renewing = asyncio.create_task(self._renew_loop())
        self._tasks += [self._renewing, asyncio.create_task(self._watch_loop()),
                        asyncio.create_task(self._act_loop())]

    def leaving(self) -> frozenset[str]:
        """The members flagged leaving in the current list (ownership rule 8)."""
        return frozenset(m.id for m in self._members if m.leaving)

    async def close(self) -> None:
        """Leave: flag this member leaving, release every held slice (``on_release`` first), revoke the
        lease, end ``changes()``."""
        self._leaving = True
        if self._lease is not None:  # etcd unreachable: peers just do not know it is leaving
            await self._leave_step("flag itself leaving", self._put_record(leaving=True), self._ttl / 3)
        held = self.ownership.held
        self.ownership.view_changed([m.id for m in self._members if m.id != self._me.id],
                                    self._clock.boottime())
        renewing = [t for t in self._tasks if t is self._renewing]  # on until the slices are handed over
        await self._cancel([t for t in self._tasks if t is not self._renewing])
        if held:
            await self._leave_step(f"release {len(held)} slices", self._release(held), None)
        kept = await self._orphaned() if self._orphaned is not None and self._lease is not None else None
        if kept is not None and kept.slices and kept.slices != self.own_orphans:
            await self._leave_step(f"record {len(kept.slices)} orphaned slices",
                                   self._client.put(orphans_prefix(self._cluster) + self._me.id,
                                                    kept.to_bytes(), 0), self._ttl / 3)
        await self._cancel(renewing)
        self._tasks.clear()
        if self._lease is not None:
            await self._leave_step("revoke its lease", self._client.revoke(self._lease), self._ttl / 3)
        self._lease = self.fence = None
        for queue in self._views:
            queue.put_nowait(None)

    async def _leave_step(self, what: str, step: Awaitable[object], bound: float | None) -> None:
        """One step of a leave, within ``bound`` seconds (None: unbounded): a failure is logged and
        counted, and the leave goes on (rule 6)."""
        try:
            async with asyncio.timeout(bound):
                await step
        except Exception as exc:
            self.leave_failures += 1
            log.warning("leave of %s: could not %s: %s", self._me.id, what, repr(exc))

    async def _cancel(self, tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        if tasks:  # bounded: a task stuck in the client must not hold the node's stop
            await asyncio.wait(tasks, timeout=self._ttl / 3)

    # -- the loops ----------------------------------------------------------------------------------

    async def _register(self) -> None:
        self._lease = await self._client.grant(self._ttl)
        self._queue(self.ownership.lease_granted(self._clock.boottime()))
        await self._put_record(leaving=False)

    async def _put_record(self, *, leaving: bool) -> None:
        assert self._lease is not None
        body = self.records.encode(Member(self._me.id, self._me.address, leaving, self._lease, self._me.wire))
        revision = await self._client.put(members_prefix(self._cluster) + self._me.id, body, self._lease)
        if not leaving:  # a registration: its token (flagging leaving keeps the registration's)
            self.fence = Fence(self._me.id, self._lease, revision)

    async def _renew_loop(self) -> None:
        failed = 0  # renewals failed in a row: the next comes sooner (rule 9)
        last = self._clock.boottime()
        while True:
            await asyncio.sleep(self._ttl / 12 if failed else self._ttl / 3)
            started = self._clock.boottime()
            failed += 1  # until this renewal goes through
            try:
                assert self._lease is not None
                # Bounded with asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancel that lands as the call completes (CPython gh-86296), and this loop would then
                # renew the lease of a closed node for ever.
                async with asyncio.timeout(self._ttl / 3):
                    alive = await self._client.keepalive(self._lease)
                if not alive:
                    self.fence = None
                    self.ownership.lease_lost()
                    if self._leaving:  # rule 5: no new registration; the hand-over under it stops
                        log.warning("etcd lease expired while leaving: its heirs restore the slices "
                                    "not handed over from its checkpoint")
                        return
                    log.warning("etcd lease expired: discarding what was decided under it, re-registering")
                    async with asyncio.timeout(self._ttl / 3):
                        await self._register()
                    failed, last = 0, started
                    continue
                if self.fence is None and not self._leaving:  # rule 8: a registration cut short
                    async with asyncio.timeout(self._ttl / 3):
                        await self._put_record(leaving=False)
                    log.warning("etcd member record of %s written under lease %x: its registration is "
                                "complete", self._me.id, self._lease)
                # The lease runs from when the renewal was sent, not from when etcd answered.
                actions = self.ownership.renewed(started)
                if failed > 1:
                    log.info("etcd lease %x renewed after %d failed tries, %.2f s after its last renewal",
                             self._lease, failed - 1, started - last)
                failed, last = 0, started
                if self._leaving:  # rule 5: close() releases; the member list stays as the leave began
                    continue
                self._queue(actions)
                async with asyncio.timeout(self._ttl / 3):
                    await self.resync()
            except Exception as exc:  # any etcd failure or hang is "not renewed" (rule 3); a
                # timeout has no message: its name then
                log.warning("etcd lease renewal failed: %s", str(exc) or type(exc).__name__)

    async def owned_by_others(self) -> frozenset[int]:
        """Slices whose owner key names another node now."""
        taken, _ = await self._client.get_prefix(f"/{self._cluster}/owner/")
        me = self._me.id.encode()
        prefix = len(owner_key(self._cluster, 0)) - 4
        return frozenset(int(k[prefix:]) for k, v in taken.items() if v != me)

    async def registered(self) -> dict[str, Member]:
        """The members registered in etcd now, by id (a read only: the list this node follows is
        unchanged)."""
        kvs, _ = await self._client.get_prefix_leased(members_prefix(self._cluster))
        return {m.id: m for m in self._proven(kvs)}

    async def resync(self) -> int:
        """Read the member list and the orphan records now (returns the etcd revision the list was
        read at)."""
        orphans, _ = await self._client.get_prefix(orphans_prefix(self._cluster))
        kvs, revision = await self._client.get_prefix_leased(members_prefix(self._cluster))
        members = view(self._proven(kvs))
        self._take_orphans(orphans, members)
        self._set_members(members)
        return revision

    async def _reread_orphans(self) -> None:
        """Read the orphan records again while a wanted slice waits for a registered member to take it
        out of its record (rule 7, ownership rule 13); a failure is logged (the next look tries again)."""
        try:
            kvs, _ = await self._client.get_prefix(orphans_prefix(self._cluster))
        except Exception as exc:  # rule 3: never a crash
            log.warning("could not read the orphan records: %s", str(exc) or type(exc).__name__)
            return
        self._take_orphans(kvs, self._members)

    def _take_orphans(self, kvs: Mapping[str, bytes], members: Iterable[Member]) -> None:
        """Give the ownership the orphan records read (``kvs``) and the members registered with them."""
        self.ownership.orphans({m: r.slices for m, r in parse_orphans(self._cluster, kvs).items()},
                               [m.id for m in members], self._clock.boottime())

    async def handed_over(self, slices: frozenset[int]) -> None:
        """``slices`` were adopted by their owners: those of this node's own orphan record leave it
        (rule 7, ownership rule 13)."""
        if mine := slices & self.own_orphans:
            await self._settle_orphans(((self._me.id, mine),), slices, "handed over")

    def _proven(self, kvs: dict[str, tuple[bytes, int]]) -> list[Member]:
        """The members whose records prove themselves (member_records rule 2)."""
        prefix = members_prefix(self._cluster)
        got = (self.records.decode(key[len(prefix) :], raw, lease) for key, (raw, lease) in kvs.items())
        return [m for m in got if m is not None]

    async def _watch_loop(self) -> None:
        prefix = members_prefix(self._cluster)
        while True:
            try:
                revision = await self.resync()
                known = {m.id: m for m in self._members}
                async for event in self._client.watch_prefix(prefix, revision + 1):
                    node = event.key[len(prefix) :]
                    member = None if event.value is None else self.records.decode(node, event.value,
                                                                                  event.lease)
                    if member is None:  # deleted, or replaced by a record that does not prove itself
                        known.pop(node, None)
                    else:
                        known[member.id] = member
                    self._set_members(view(known.values()))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken watch is re-established, never fatal
                log.warning("etcd watch failed: %s", str(exc) or type(exc).__name__)
            await asyncio.sleep(min(1.0, self._ttl / 3))

    async def _act_loop(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.ownership.retry):  # not wait_for: see _renew_loop
                    action = await self._work.get()
            except TimeoutError:
                if self.ownership.kept(self._clock.boottime()):
                    await self._reread_orphans()
                self._queue(self.ownership.tick(self._clock.boottime()))
                continue
            if not self.ownership.current(action):  # ownership rule 9
                log.warning("discarding a %s of %d slices decided under a lease that is gone",
                            type(action).__name__.lower(), len(action.slices))
                continue
            try:
                if isinstance(action, Claim):
                    if action.restore and self._on_restore is not None:
                        await self._on_restore(dict(action.restore))
                    won = await self._claim(action.slices)
                    mine = won & self.own_orphans  # its data dir, or its own checkpoint, has them
                    if won and (action.restore or mine):
                        await self._settle_orphans((*action.restore, (self._me.id, mine)), won)
                else:
                    await self._release(action.slices)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed claim is retried by the state machine
                log.warning("etcd %s failed: %s", type(action).__name__, exc)
                if isinstance(action, Claim):
                    self._queue(self.ownership.claimed((), action.slices))
                else:  # the slices stay unleased and their keys held until the hand-over succeeds
                    asyncio.get_running_loop().call_later(self.ownership.retry, self._work.put_nowait, action)

    # -- actions ------------------------------------------------------------------------------------

    async def _settle_orphans(self, restored: tuple[tuple[str, frozenset[int]], ...],
                              won: frozenset[int], done: str = "restored") -> None:
        """Take the slices restored and won (or ``done`` otherwise) out of their members' orphan records
        (rule 7); a failure is logged (the next owner restores them once more, which merges)."""
        async with self._settling:
            await self._settle_orphans_now(restored, won, done)

    async def _settle_orphans_now(self, restored: tuple[tuple[str, frozenset[int]], ...],
                                  won: frozenset[int], done: str) -> None:
        try:
            kvs, _ = await self._client.get_prefix(orphans_prefix(self._cluster))
            records = parse_orphans(self._cluster, kvs)
            for member, slices in restored:
                record = records.get(member)
                if record is None or not record.slices & slices & won:
                    continue
                key = orphans_prefix(self._cluster) + member
                left = record.slices - (slices & won)
                if left:
                    await self._client.put(key, Orphans(left, record.version).to_bytes(), 0)
                else:
                    await self._client.delete_all_if({key: kvs[key]})
                if member == self._me.id:
                    self.own_orphans = left
                log.info("%s %d slices %s left orphaned; %d left in its record",
                         done, len(record.slices) - len(left), member, len(left))
        except Exception as exc:  # rule 3: never a crash
            log.warning("could not update the orphan records: %s", str(exc) or type(exc).__name__)

    async def _claim(self, slices: frozenset[int]) -> frozenset[int]:
        """Claim ``slices`` (rule 4); the ones won."""
        lease = self._lease
        if lease is None:
            self._queue(self.ownership.claimed((), slices))
            return frozenset()
        me = self._me.id.encode()
        taken, _ = await self._client.get_prefix(f"/{self._cluster}/owner/")
        won: list[int] = []
        lost = [s for s in slices if taken.get(owner_key(self._cluster, s), me) != me]
        ordered = sorted(slices - set(lost))
        for i in range(0, len(ordered), _CHUNK):
            chunk = ordered[i : i + _CHUNK]
            ok = await self._client.create_all({owner_key(self._cluster, s): me for s in chunk}, lease)
            (won if ok else lost).extend(chunk)  # a chunk that raced another claim is retried later
        self._queue(self.ownership.claimed(won, lost))
        return frozenset(won)

    async def _release(self, slices: frozenset[int]) -> None:
        if self._on_release is not None:
            await self._on_release(slices)
        me = self._me.id.encode()
        ordered = sorted(slices)
        for i in range(0, len(ordered), _CHUNK):
            chunk = ordered[i : i + _CHUNK]
            if not await self._client.delete_all_if({owner_key(self._cluster, s): me for s in chunk}):
                for s in chunk:  # some key is not ours (any more): delete the others one by one
                    await self._client.delete_all_if({owner_key(self._cluster, s): me})
        self.ownership.released(slices)

    def _queue(self, actions: list[Action]) -> None:
        for action in actions:
            self._work.put_nowait(action)

    def _set_members(self, members: tuple[Member, ...]) -> None:
        if members == self._members:
            return
        self._members = members
        self._queue(self.ownership.view_changed([m.id for m in members], self._clock.boottime()))
        for queue in self._views:
            queue.put_nowait(members)


__all__ = ["Claim", "EtcdClient", "EtcdMembership", "KeyEvent", "Orphans", "Release"]
