"""Which slices this node may fetch for, in a cluster coordinated by etcd: the sans-IO state machine.

The etcd client (:mod:`polecat.cluster.etcd`) feeds it events (lease granted, renewed, lost; a new member
list; the outcome of claims and releases) with ``now`` and carries out the actions it returns. It owns
these rules:

1. **Wanted slices** are the Ring's slices of this node for the current member list (rule 1 of
   :mod:`polecat.cluster.ring`). A node that is not in the list (not registered yet, or its key expired)
   wants nothing.
2. **Held slices** are the slices whose ``/<cluster>/owner/<slice>`` key this node created under its
   current lease. A key is claimed with a create-if-absent transaction, so at most one node holds it;
   keys die with the lease, so losing the lease empties ``held`` at once.
3. **Claims:** wanted slices not held and not being claimed are claimed; a claim that loses (the old
   owner has not released yet) is retried at most every ``retry`` seconds.
4. **Releases:** held slices that are no longer wanted stop being leasable at once, then are released
   (the node exports them before deleting the key, so the new owner's claim follows the export).
5. **Fencing:** the node may lease URLs only for slices that are held AND wanted, and only while its
   last successful lease renewal is less than ``ttl / 2`` old. The lease outlives that by at least
   ``ttl / 2``, so a cut-off node stops fetching well before etcd lets another node claim its slices:
   no host is ever served by two owners.
6. **Inheritance:** a wanted slice whose owner under the previous member list has left the list (its
   lease expired, or it left gracefully) is claimed naming that member (:attr:`Claim.restore`): the
   node restores the slice from that member's last checkpoint before claiming it. A member that left
   gracefully handed every slice over and its checkpoint names none, so the restore finds nothing.
   A slice stays inherited until a claim of it is won (a failed restore fails the claim; it is retried).
   A node restarted without its data dir inherits from itself the slices of its own last checkpoint
   that no other node owns (:meth:`Ownership.inherit`).
7. **Strays:** URLs queued here in a slice that this node neither holds, claims nor wants (it adopted
   the slice from a peer that was leaving, or kept it when every peer was leaving) are handed to the
   slice's Ring owner by a periodic reconciliation (:meth:`Ownership.strays`), so no node keeps URLs
   it will never fetch. So are the slices adopted here by hand-over and not held since, even with no
   URL queued: their finished URLs tell the owner which of the URLs it has queued were fetched
   meanwhile (a node back from a freeze holds its slices' queues as they were; a peer that left during
   the freeze handed the heir's restore of them to a third node, and its owner fetched them again, one
   host's worth of pages). Adoption merges, so a stray shipped twice duplicates nothing.
8. **Leaving members receive nothing:** a hand-over gives each slice to its Ring owner, unless that
   owner is this node, a member that flagged itself leaving in etcd, or a member this node shares no
   wire version with (polecat/cluster/wire.py rule 4); such slices stay here (their
   data stays on this node's disk until the next change or reconciliation moves it). So when every
   node stops at once, each keeps its own slices, and a restart under the same Ring finds them local.
9. **Fencing tokens:** each registration of a node has a token, :class:`~polecat.frontier.bundle.Fence`
   (its lease and the etcd revision its member record was written at; a later registration has a
   larger revision). Every decision carries the lease epoch it was taken in; losing the lease ends the
   epoch, and a decision of an ended epoch is discarded, never carried out (:meth:`Ownership.current`),
   so a node whose lease expired hands nothing over under it. A fenced node decides no release (its
   keys may be gone); the release follows at the first tick after a renewal. Every bundle handed over
   carries the sender's token, and a receiver refuses it (:func:`stale`) when the sender is not
   registered under that lease, or when it already adopted a bundle of a later registration of it.
10. **Send permits:** a request goes out under a :class:`Permit`, taken when its lease starts (only for
    a slice it may lease, rule 5) and checked again just before its first byte is written, with no
    wait in between (:meth:`Ownership.permitted`): it holds while the lease epoch it was taken in
    lasts, the node is not fenced and the slice's key is still held (a slice being handed over keeps
    its requests: the hand-over waits for them). A node frozen between its lease and its write wakes
    fenced and sends nothing. A request already sent may go on while its epoch lasts, its slice is
    held and the lease has not run out by this node's clock (``ttl`` after the last renewal:
    :meth:`Ownership.may_go_on`); past that it is aborted (its URL stays queued), and a node whose
    loop runs has aborted every one within :data:`ABORT_BOUND` seconds, so within
    ``ttl + ABORT_BOUND`` of its last renewal, at once when etcd says the lease is gone. A fence of
    a moment (a slow keepalive) stops new requests, not those under way.
11. **The heir's hold:** a slice restored from the checkpoint of a member that left without handing it
    over (rule 6) keeps its hosts unleased until :data:`ABORT_BOUND` after the restore, then one
    interval more (as every adopted host): the restore follows the member's lease expiry in etcd, so
    an heir's first request to such a host comes no earlier than that expiry + the old owner's abort
    bound + the host's interval (:meth:`Ownership.restore_hold`). Every slice that becomes leasable
    here (a claim won, with or without a restore) holds the hosts this node already knows in it the
    same way, from that moment (polecat/processes/machine.py ``sync_owned``): URLs routed here for
    it while its old owner was still aborting are not sent before it is done.
12. **Orphaned slices:** a member that leaves keeping slices it could not hand to a member that stays
    (rule 8: every other member was leaving, or it was alone) records them in etcd under a key that
    outlives its lease (polecat/cluster/etcd.py rule 7), after its final checkpoint. A member that
    registers later never saw it, so rule 6 cannot name it: a wanted slice that such a record names,
    of a member not registered now, is claimed restoring it from that member's checkpoint
    (:meth:`Ownership.orphans`; the claim names the member as rule 6's do), and the record loses the
    slices once the claim is won. Records of registered members (back with their data dir) and this
    node's own (its data dir or its own checkpoint has them: it takes out of its record the slices
    it wins) are left out.
    Only recorded slices are restored this way: a node never pulls in a checkpoint of a member that
    did not leave any slice behind.
13. **Slices a registered member keeps:** a wanted slice that the orphan record of another member
    registered now names is not claimed while that member has it (:meth:`Ownership.kept`): the
    member is back with its data dir, whose records of the slice are newer than any checkpoint, and a
    claim won before they arrive fetches the slice's seeds and all they lead to again (a whole cluster
    restarted with a member joining: 9, 10 and 23 of 219 pages fetched twice in 3 runs of 26 under load).
    The member hands the slices of its own record it does not want to their Ring owner like strays,
    even with nothing queued (rule 7; polecat/processes/machine.py rule 7), and takes each out of its
    record once its owner adopted it (polecat/cluster/etcd.py rule 7); the claim follows the next
    read of the records (etcd.py reads them every ``retry`` seconds while a slice waits so). A member
    that never does (a release before this rule, or a bug) holds a slice back at most
    :data:`KEPT_WAIT` seconds from when this node first saw it kept; a member no longer registered
    is rule 12's.

Lease times (the ``now`` of this module) are read on a clock that counts the time the machine was
suspended (:meth:`polecat.clock.Clock.boottime`): the etcd lease runs on while a machine sleeps, so a
clock that stopped would keep a woken node unfenced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from polecat.cluster.ring import Ring
from polecat.frontier.bundle import Fence


@dataclass(frozen=True, slots=True)
class Claim:
    """Create ``/<cluster>/owner/<slice>`` under this node's lease for each slice, if absent; first
    restore the slices in ``restore`` from the checkpoints of the members named there (rule 6)."""

    slices: frozenset[int]
    restore: tuple[tuple[str, frozenset[int]], ...] = ()
    epoch: int = field(default=0, compare=False)
    """The lease epoch it was decided in (rule 9; not part of what is decided)."""


@dataclass(frozen=True, slots=True)
class Release:
    """Export these slices to their new owners, then delete their owner keys (this node no longer
    leases URLs from them)."""

    slices: frozenset[int]
    epoch: int = field(default=0, compare=False)
    """The lease epoch it was decided in (rule 9; not part of what is decided)."""


Action = Claim | Release

ABORT_BOUND = 1.0
"""Seconds after its lease ran out (by its clock) within which a running node has aborted its requests
in flight (rule 10):
the node looks every 0.1 s (polecat/processes/machine.py ``SYNC_EVERY``), an aborted request closes its
connection at once, and the rest is room for a loaded event loop."""


KEPT_WAIT = 60.0
"""The most seconds a wanted slice waits unclaimed for the registered member whose orphan record names
it (rule 13): long enough for a restarted member to open its frontier and hand the slice over on a
loaded machine; past it, a member that does not (a release before rule 13) no longer holds the crawl
of the slice back (its seeds are fetched again, as before the rule)."""


@dataclass(frozen=True, slots=True)
class Permit:
    """Leave to send one request to a host of ``slice_id`` (rule 10)."""

    slice_id: int
    epoch: int


class Ownership:
    """Slice ownership and self-fencing of one node (rules at the top of the module)."""

    def __init__(self, self_id: str, *, ttl: float, retry: float = 1.0) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.self_id = self_id
        self.ttl = ttl
        self.retry = retry
        self._renewed_at: float | None = None
        self._ring: Ring | None = None
        self._wanted: frozenset[int] = frozenset()
        self._held: set[int] = set()
        self._claiming: set[int] = set()
        self._releasing: set[int] = set()
        self._inherited: dict[int, str] = {}
        """Wanted slice -> the member that left owning it, until a claim of it is won (rule 6)."""
        self._orphaned: dict[int, str] = {}
        """Slice -> the member that left it orphaned, as its record in etcd reads now (rule 12)."""
        self._kept_since: dict[int, float] = {}
        """Slice named in the orphan record of another member registered now -> when this node first
        saw it so (rule 13)."""
        self._last_claim = float("-inf")
        self._epoch = 0
        """Counts leases granted and lost: decisions of an older epoch are void (rule 9)."""

    # -- events -------------------------------------------------------------------------------------

    def lease_granted(self, now: float) -> list[Action]:
        """A new lease: keys of any older lease are gone with it (rule 2)."""
        self._epoch += 1
        self._held.clear()
        self._claiming.clear()
        self._releasing.clear()
        self._renewed_at = now
        return self._claims(now, force=True)

    def renewed(self, now: float) -> list[Action]:
        """A keepalive succeeded (the lease is good for another ``ttl`` from ``now``)."""
        if self._renewed_at is not None:
            self._renewed_at = max(self._renewed_at, now)
        return self.tick(now)

    def lease_lost(self) -> None:
        """etcd says the lease is gone (expired or revoked): nothing is held any more (rule 2), and
        nothing decided under it is carried out (rule 9)."""
        self._epoch += 1
        self._renewed_at = None
        self._held.clear()
        self._claiming.clear()
        self._releasing.clear()

    def view_changed(self, member_ids: Iterable[str], now: float) -> list[Action]:
        """A new member list (rules 1, 3, 4)."""
        ids = sorted(set(member_ids))
        old = self._ring
        self._ring = Ring(ids) if ids else None
        self._wanted = self._ring.slices_of(self.self_id) if self._ring is not None else frozenset()
        gone = set(old.members) - set(ids) if old is not None else set()
        if gone and old is not None:
            for s in self._wanted - self._held:
                if (previous := old.owner(s)) in gone:
                    self._inherited[s] = previous
        self._inherited = {s: m for s, m in self._inherited.items() if s in self._wanted}
        return self._releases(now) + self._claims(now, force=True)

    def inherit(self, slices: Iterable[int], member: str) -> None:
        """Restore ``slices`` from ``member``'s checkpoint before claiming them, while they are wanted
        (rule 6)."""
        self._inherited.update(dict.fromkeys(slices, member))

    def orphans(self, records: Mapping[str, Iterable[int]], registered: Iterable[str], now: float) -> None:
        """The orphan records in etcd now (member -> the slices it left behind), and the members
        registered now (rules 12 and 13)."""
        skip = {self.self_id, *registered}
        back = skip - {self.self_id}
        self._orphaned = {s: m for m, slices in sorted(records.items()) if m not in skip for s in slices}
        kept = {s for m, slices in records.items() if m in back for s in slices}
        self._kept_since = {s: self._kept_since.get(s, now) for s in kept}

    def claimed(self, won: Iterable[int], lost: Iterable[int]) -> list[Action]:
        """The outcome of a :class:`Claim`: ``won`` keys are ours, ``lost`` ones belong to someone else."""
        won_set, lost_set = set(won), set(lost)
        self._claiming -= won_set | lost_set
        for s in won_set:
            self._inherited.pop(s, None)
            self._orphaned.pop(s, None)
        if self._renewed_at is None:
            return []  # the lease died while the claim was in flight: its keys died with it
        self._held |= won_set
        # A slice won after it stopped being wanted goes straight back (rule 4).
        late = frozenset(won_set - self._wanted - self._releasing)
        if late:
            self._releasing |= late
            return [Release(late, self._epoch)]
        return []

    def released(self, slices: Iterable[int]) -> None:
        """The owner keys of ``slices`` are deleted."""
        done = set(slices)
        self._held -= done
        self._releasing -= done

    def strays(self, queued: Iterable[int]) -> frozenset[int]:
        """Of the slices with URLs queued here, those to ship to their Ring owner (rule 7)."""
        if self._ring is None:
            return frozenset()  # no member list yet: nobody to ship to
        return frozenset(queued) - self._wanted - self._held - self._claiming

    def heirs(self, slices: Iterable[int], leaving: Iterable[str]) -> dict[str, frozenset[int]]:
        """Who receives ``slices`` handed over: Ring owner -> slices, leaving out the slices whose owner
        is this node or a member in ``leaving``: those that receive nothing (rule 8: those stay here)."""
        if self._ring is None:
            return {}
        keep = {self.self_id, *leaving}
        out: dict[str, set[int]] = {}
        for s in slices:
            if (owner := self._ring.owner(s)) not in keep:
                out.setdefault(owner, set()).add(s)
        return {m: frozenset(ss) for m, ss in sorted(out.items())}

    def tick(self, now: float) -> list[Action]:
        """Time passes: retry lost claims (rule 3), release what a fenced moment held back (rule 9)."""
        return self._releases(now) + self._claims(now, force=False)

    def current(self, action: Action) -> bool:
        """Whether ``action`` was decided under the lease this node holds now (rule 9)."""
        return action.epoch == self._epoch and self._renewed_at is not None

    # -- queries ------------------------------------------------------------------------------------

    def fenced(self, now: float) -> bool:
        """True when this node must not lease any URL (rule 5)."""
        return self._renewed_at is None or now - self._renewed_at >= self.ttl / 2

    def may_lease(self, slice_id: int, now: float) -> bool:
        """Whether ``slice_id`` is in :meth:`leasable` at ``now`` (one slice: no set built)."""
        return (not self.fenced(now) and slice_id in self._held and slice_id in self._wanted
                and slice_id not in self._releasing)

    def permit(self, slice_id: int, now: float) -> Permit | None:
        """Leave to start a request to a host of ``slice_id`` now (rules 5 and 10); None: withdraw it."""
        return Permit(slice_id, self._epoch) if self.may_lease(slice_id, now) else None

    def permitted(self, permit: Permit, now: float) -> bool:
        """Whether a request under ``permit`` may still be sent (rule 10)."""
        return permit.epoch == self._epoch and not self.fenced(now) and permit.slice_id in self._held

    def may_go_on(self, permit: Permit, now: float) -> bool:
        """Whether a request sent under ``permit`` may stay in flight (rule 10; False: abort it)."""
        renewed = self._renewed_at
        return (permit.epoch == self._epoch and renewed is not None and now - renewed < self.ttl
                and permit.slice_id in self._held)

    @staticmethod
    def restore_hold(now: float) -> float:
        """Until when the hosts of slices restored at ``now`` from a member that left wait, before their
        interval (rule 11)."""
        return now + ABORT_BOUND

    def lease_age(self, now: float) -> float | None:
        """Seconds since the last renewal (None: no lease)."""
        return None if self._renewed_at is None else now - self._renewed_at

    def leasable(self, now: float) -> frozenset[int]:
        """The slices this node may lease URLs from at ``now`` (rule 5)."""
        if self.fenced(now):
            return frozenset()
        return frozenset(self._held & self._wanted) - self._releasing

    @property
    def wanted(self) -> frozenset[int]:
        """The slices the Ring gives this node (rule 1)."""
        return self._wanted

    @property
    def held(self) -> frozenset[int]:
        """The slices whose owner key this node holds (rule 2)."""
        return frozenset(self._held)

    def kept(self, now: float) -> frozenset[int]:
        """The wanted slices not claimed because a registered member's orphan record names them, for at
        most :data:`KEPT_WAIT` seconds (rule 13)."""
        return frozenset(s for s, since in self._kept_since.items()
                         if s in self._wanted and s not in self._held and now - since < KEPT_WAIT)

    @property
    def inherited(self) -> dict[int, str]:
        """Wanted slices still to be restored from a member that left, with that member (rule 6)."""
        return dict(self._inherited)

    @property
    def ring(self) -> Ring | None:
        """The Ring of the current member list (None while the list is empty)."""
        return self._ring

    def _releases(self, now: float) -> list[Action]:
        if self.fenced(now):
            return []  # rule 9: the keys may be gone already
        unwanted = frozenset(self._held - self._wanted - self._releasing)
        if not unwanted:
            return []
        self._releasing |= unwanted
        return [Release(unwanted, self._epoch)]

    def _claims(self, now: float, *, force: bool) -> list[Action]:
        if self._renewed_at is None or self.fenced(now):
            return []
        todo = frozenset(self._wanted - self._held - self._claiming) - self.kept(now)  # rule 13
        if not todo or (not force and now - self._last_claim < self.retry):
            return []
        self._claiming |= todo
        self._last_claim = now
        restore: dict[str, set[int]] = {}
        for s in todo:
            member = self._inherited.get(s) or self._orphaned.get(s)  # rules 6 and 12
            if member is not None:
                restore.setdefault(member, set()).add(s)
        return [Claim(todo, tuple((m, frozenset(ss)) for m, ss in sorted(restore.items())), self._epoch)]


def stale(token: Fence, registered_lease: int | None, newest: int) -> str | None:
    """Why a bundle carrying ``token`` must be refused (rule 9), or None to adopt it. ``registered_lease``:
    the lease the sender is registered under now (None: not registered; 0: a record from before leases
    were written, which proves nothing); ``newest``: the highest revision of a bundle adopted from it."""
    if token.revision < newest:
        return f"{token.node} sent it under an older registration (revision {token.revision} < {newest})"
    if registered_lease is None:
        return f"{token.node} is not registered (its lease {token.lease:x} is gone)"
    if registered_lease not in (0, token.lease):
        return f"{token.node} is registered under lease {registered_lease:x}, not {token.lease:x}"
    return None
