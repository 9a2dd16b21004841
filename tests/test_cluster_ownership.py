"""The cluster ownership state machine (sans-IO): claims, releases, lease loss and self-fencing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.cluster.ownership import ABORT_BOUND, KEPT_WAIT, Claim, Ownership, Release, stale
from polecat.cluster.ring import Ring
from polecat.frontier.bundle import Fence
from polecat.frontier.slices import SLICES


def _owning(me: str, members: list[str], now: float = 0.0, ttl: float = 10.0) -> Ownership:
    o = Ownership(me, ttl=ttl)
    o.lease_granted(now)
    (claim,) = o.view_changed(members, now)
    assert isinstance(claim, Claim)
    assert o.claimed(claim.slices, ()) == []
    return o


def test_a_node_claims_its_ring_share_and_leases_only_what_it_holds() -> None:
    o = Ownership("a", ttl=10)
    assert o.view_changed(["a", "b"], 0.0) == []  # no lease yet: nothing claimed
    (claim,) = o.lease_granted(0.0)
    assert isinstance(claim, Claim)
    assert claim.slices == Ring(["a", "b"]).slices_of("a")
    assert o.leasable(1.0) == frozenset()  # wanted, not yet held
    some = sorted(claim.slices)[:10]
    o.claimed(claim.slices - set(some), some)
    assert o.leasable(1.0) == claim.slices - set(some)


def test_lost_claims_are_retried_no_more_often_than_retry() -> None:
    o = Ownership("a", ttl=10, retry=1.0)
    o.lease_granted(0.0)
    (claim,) = o.view_changed(["a"], 0.0)
    assert isinstance(claim, Claim)
    o.claimed((), claim.slices)  # the old owners still hold every key
    assert o.tick(0.5) == []
    assert o.tick(1.0) == [Claim(claim.slices)]
    assert o.tick(1.5) == []  # in flight
    o.claimed(claim.slices, ())
    assert o.tick(4.0) == []
    assert o.leasable(4.0) == frozenset(range(SLICES))


def test_a_join_releases_exactly_the_slices_that_move_away_and_stops_leasing_them_at_once() -> None:
    o = _owning("a", ["a", "b"])
    before = o.leasable(1.0)
    actions = o.view_changed(["a", "b", "c"], 1.0)
    moves = Ring(["a", "b"]).moves(Ring(["a", "b", "c"])).items()
    moving = frozenset(s for s, (old, _) in moves if old == "a")
    # The balanced ring may also cascade a few of b's slices to a (ring rule 3): those are claimed.
    gained = frozenset(s for s, (_, new) in moves if new == "a")
    assert actions == [Release(moving)] + ([Claim(gained)] if gained else [])
    assert o.leasable(1.0) == before - moving  # before the keys are even deleted
    o.released(moving)
    assert o.held == before - moving
    assert o.view_changed(["a", "b", "c"], 2.0) == []  # same list: nothing to do


def test_a_leave_claims_the_slices_of_the_member_that_left() -> None:
    o = _owning("a", ["a", "b"])
    (claim,) = o.view_changed(["a"], 1.0)
    from_b = Ring(["a", "b"]).slices_of("b")
    assert claim == Claim(from_b, (("b", from_b),))  # restored from b's checkpoint first (rule 6)


def test_fencing_at_half_the_ttl_without_renewal() -> None:
    o = _owning("a", ["a"], now=0.0, ttl=10)
    assert len(o.leasable(4.9)) == SLICES
    assert o.leasable(5.0) == frozenset()  # TTL/2 after the last renewal
    assert o.fenced(5.0)
    assert o.tick(6.0) == []  # a fenced node claims nothing either
    o.renewed(6.0)
    assert len(o.leasable(6.1)) == SLICES
    assert o.leasable(11.0) == frozenset()


def test_lease_loss_drops_every_key_and_a_new_lease_reclaims() -> None:
    o = _owning("a", ["a"])
    o.lease_lost()
    assert o.held == frozenset() and o.leasable(0.1) == frozenset()
    assert o.claimed(range(5), ()) == []  # a claim answered after the loss does not count
    assert o.held == frozenset()
    (claim,) = o.lease_granted(1.0)
    assert claim == Claim(frozenset(range(SLICES)))


def test_a_slice_won_after_it_stopped_being_wanted_goes_straight_back() -> None:
    o = Ownership("a", ttl=10)
    o.lease_granted(0.0)
    (claim,) = o.view_changed(["a"], 0.0)
    assert isinstance(claim, Claim)
    o.view_changed(["a", "b"], 0.5)  # b joins while the claim is in flight
    back = o.claimed(claim.slices, ())
    lost_to_b = Ring(["a", "b"]).slices_of("b")
    assert back == [Release(lost_to_b)]
    assert o.leasable(1.0) == Ring(["a", "b"]).slices_of("a")


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sets(st.sampled_from("abcd"), min_size=1), min_size=1, max_size=4))
def test_two_nodes_fed_the_same_views_never_lease_the_same_slice(views: list[set[str]]) -> None:
    """Through any sequence of member lists, with claims resolved by one key store (create-if-absent)
    and releases applied, no slice is ever leasable by two nodes."""
    nodes = {m: Ownership(m, ttl=10) for m in "abcd"}
    keys: dict[int, str] = {}
    now = 0.0
    for o in nodes.values():
        o.lease_granted(now)
    for members in views:
        now += 1.0
        for o in nodes.values():
            o.renewed(now)
        pending = [(m, a) for m, o in nodes.items() for a in o.view_changed(members, now)]
        while pending:
            m, action = pending.pop(0)
            o = nodes[m]
            if isinstance(action, Release):
                for s in action.slices:
                    if keys.get(s) == m:
                        del keys[s]
                o.released(action.slices)
            else:
                won = [s for s in action.slices if keys.setdefault(s, m) == m]
                pending += [(m, a) for a in o.claimed(won, action.slices - set(won))]
            leased = [o.leasable(now) for o in nodes.values()]
            assert sum(len(x) for x in leased) == len(frozenset().union(*leased))
        for m, o in nodes.items():
            pending += [(m, a) for a in o.tick(now + 1)]
        while pending:
            m, action = pending.pop(0)
            if isinstance(action, Claim):
                won = [s for s in action.slices if keys.setdefault(s, m) == m]
                nodes[m].claimed(won, action.slices - set(won))
        # Once settled, the live members lease every slice between them.
        leased = [nodes[m].leasable(now + 1) for m in members]
        assert len(frozenset().union(*leased)) == SLICES


def test_slices_of_a_member_that_left_are_claimed_naming_it_until_a_claim_is_won() -> None:
    o = _owning("a", ["a", "b", "c"])
    before, after = Ring(["a", "b", "c"]), Ring(["a", "c"])
    actions = o.view_changed(["a", "c"], 1.0)  # b's lease expired
    claim = actions[-1]
    assert isinstance(claim, Claim)
    for release in actions[:-1]:  # the balanced ring may also move a few of a's slices to c
        assert isinstance(release, Release)
        o.released(release.slices)
    from_b = before.slices_of("b") & after.slices_of("a")
    # Slices that cascade from c (still a member) are claimed too, but restored from nobody.
    assert claim.slices == after.slices_of("a") - before.slices_of("a")
    assert claim.restore == (("b", from_b),)
    assert o.inherited == dict.fromkeys(from_b, "b")
    lost = sorted(from_b)[:5]
    o.claimed(claim.slices - set(lost), lost)  # a failed restore fails (part of) the claim: named again
    assert o.tick(2.0) == [Claim(frozenset(lost), (("b", frozenset(lost)),))]
    o.claimed(lost, ())
    assert o.inherited == {}
    assert o.leasable(2.0) == after.slices_of("a")


def test_a_member_joining_or_an_unchanged_list_names_nobody_to_restore_from() -> None:
    o = _owning("a", ["a", "b"])
    actions = o.view_changed(["a", "b", "c"], 1.0)
    assert actions[0] == Release(Ring(["a", "b"]).slices_of("a") - Ring(["a", "b", "c"]).slices_of("a"))
    assert all(isinstance(a, Claim) and a.restore == () for a in actions[1:])  # cascades from b
    assert o.inherited == {}
    o2 = Ownership("a", ttl=10)
    o2.lease_granted(0.0)
    (claim,) = o2.view_changed(["a", "b"], 0.0)  # the first list: nobody left
    assert isinstance(claim, Claim) and claim.restore == ()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from("abcdef"), min_size=2, max_size=6, unique=True), st.data())
def test_inherited_slices_are_exactly_the_departed_members_slices_that_move_here(
        members: list[str], data: st.DataObject) -> None:
    me = members[0]
    gone = data.draw(st.lists(st.sampled_from(members[1:]), unique=True, min_size=1))
    o = _owning(me, members)
    left = [m for m in members if m not in gone]
    o.view_changed(left, 1.0)
    old, new = Ring(members), Ring(left)
    # Slices that cascade from a member still present (balanced ring, rule 3) are not inherited.
    assert o.inherited == {s: old.owner(s) for s in new.slices_of(me) - old.slices_of(me)
                           if old.owner(s) in gone}


def test_a_node_restarted_without_its_disk_inherits_its_own_slices_while_it_wants_them() -> None:
    o = Ownership("a", ttl=10)
    ring = Ring(["a", "b"])
    o.inherit(ring.slices_of("a") | {next(iter(ring.slices_of("b")))}, "a")  # held by its old lease
    o.lease_granted(0.0)
    (claim,) = o.view_changed(["a", "b"], 0.0)
    assert isinstance(claim, Claim)
    assert claim.restore == (("a", ring.slices_of("a")),)  # b's slice is not wanted: not restored


def test_strays_are_queued_slices_this_node_neither_holds_claims_nor_wants() -> None:
    assert Ownership("a", ttl=10).strays({1, 2}) == frozenset()  # no member list: nobody to ship to
    o = _owning("a", ["a", "b"])
    ring = Ring(["a", "b"])
    mine, theirs = sorted(ring.slices_of("a"))[:2], sorted(ring.slices_of("b"))[:2]
    assert o.strays([*mine, *theirs]) == frozenset(theirs)
    (release,) = o.view_changed(["a", "b", "c"], 1.0)[:1]  # a join: some of a's slices move to c
    assert isinstance(release, Release)
    moving = sorted(release.slices)[0]
    assert moving not in o.strays([moving])  # held until its hand-over ends: that hand-over ships it


def test_hand_overs_go_to_ring_owners_that_stay_and_never_to_leaving_members() -> None:
    o = _owning("a", ["a", "b", "c"])
    o.view_changed(["b", "c"], 1.0)  # a leaves: every slice goes to b or c
    ring = Ring(["b", "c"])
    everything = range(SLICES)
    assert o.heirs(everything, leaving=()) == {m: ring.slices_of(m) for m in ("b", "c")}
    assert o.heirs(everything, leaving=["b"]) == {"c": ring.slices_of("c")}  # b's share stays here
    assert o.heirs(everything, leaving=["b", "c"]) == {}  # everyone stops: a keeps its data


def test_decisions_of_a_lease_that_is_gone_are_void_and_a_fenced_node_decides_no_release() -> None:
    """The frozen node of issue 32: a member list change reaches it after its lease expired."""
    o = _owning("a", ["a", "b"], ttl=4)
    assert o.view_changed(["a", "b", "c"], 10.0) == []  # fenced (last renewal at 0): no release yet
    o2 = _owning("a", ["a", "b"], ttl=4)
    (release,) = o2.view_changed(["a", "b", "c"], 1.0)[:1]
    assert isinstance(release, Release) and o2.current(release)
    o2.lease_lost()  # etcd says the lease is gone before the hand-over ran
    assert not o2.current(release)
    (claim,) = o2.lease_granted(12.0)
    assert isinstance(claim, Claim) and o2.current(claim) and not o2.current(release)
    # Unfenced again, a release held back while fenced follows at once.
    (late,) = [a for a in o.renewed(10.0) if isinstance(a, Release)]
    assert late.slices == Ring(["a", "b"]).slices_of("a") - Ring(["a", "b", "c"]).slices_of("a")


def test_a_bundle_is_stale_unless_its_sender_is_registered_under_its_lease() -> None:
    token = Fence("b", lease=0x2A, revision=9)
    assert stale(token, registered_lease=0x2A, newest=9) is None
    assert stale(token, registered_lease=0, newest=0) is None  # a record from before leases: no proof
    assert "not registered" in (stale(token, None, 0) or "")
    assert "registered under lease 2b" in (stale(token, 0x2B, 0) or "")
    assert "older registration" in (stale(token, 0x2A, 10) or "")


def test_may_lease_answers_for_one_slice_what_leasable_answers_for_all() -> None:
    o = _owning("a", ["a", "b"], ttl=4)
    o.view_changed(["a", "b", "c"], 1.0)  # some slices are being released
    for now in (1.0, 3.0):  # then fenced: the last renewal was at 0
        leasable = o.leasable(now)
        assert [s for s in range(SLICES) if o.may_lease(s, now)] == sorted(leasable)
    assert o.leasable(1.0) and not o.leasable(3.0)


def test_a_send_permit_lasts_while_its_epoch_lasts_unfenced_and_its_slice_is_held() -> None:
    """Rule 10: a permit is asked again just before the send and while the request is in flight."""
    o = _owning("a", ["a", "b"], ttl=4)
    mine = min(o.leasable(1.0) & Ring(["a", "b", "c"]).slices_of("a"))  # stays a's after c joins
    assert o.permit(mine, 1.0) is not None
    assert o.permit(next(s for s in range(SLICES) if s not in o.held), 1.0) is None  # not held
    permit = o.permit(mine, 1.0)
    assert permit is not None and o.permitted(permit, 1.9)
    assert not o.permitted(permit, 2.0)  # fenced: ttl / 2 after the last renewal, nothing more is sent
    assert o.may_go_on(permit, 3.9)  # what was sent goes on while the lease lasts by this clock...
    assert not o.may_go_on(permit, 4.0)  # ...and is aborted once it ran out
    o.renewed(1.5)
    assert o.permitted(permit, 3.0)  # renewed in time: the same lease, it holds again
    # A slice being handed over keeps its requests in flight (the hand-over waits for them) but starts
    # none; once released it has none.
    moving = next(s for s in o.held if s not in Ring(["a", "b", "c"]).slices_of("a"))
    going = o.permit(moving, 1.5)
    assert going is not None
    o.view_changed(["a", "b", "c"], 1.5)
    assert o.permit(moving, 1.5) is None and o.permitted(going, 1.5)
    o.released([moving])
    assert not o.permitted(going, 1.5) and not o.may_go_on(going, 1.5)
    # A lease lost and granted again is a new epoch: a permit of the old one never holds again, even
    # for a slice held again (a request leased before a freeze, sent after the node re-registered).
    o.lease_lost()
    assert not o.may_go_on(permit, 1.6)  # etcd says the lease is gone: aborted at once
    (claim,) = o.lease_granted(20.0)
    assert isinstance(claim, Claim)
    o.claimed(claim.slices, ())
    assert mine in o.held and not o.permitted(permit, 20.0) and not o.may_go_on(permit, 20.0)
    assert o.permit(mine, 20.0) is not None


def test_restored_hosts_wait_the_old_owners_abort_bound() -> None:
    """Rule 11: a restore follows the old owner's lease expiry, after which that owner (running) aborts
    within the abort bound: the heir holds the hosts that long."""
    assert Ownership.restore_hold(100.0) == 100.0 + ABORT_BOUND


def test_orphaned_slices_of_a_member_not_registered_are_claimed_restoring_them_from_it() -> None:
    """Ownership rule 12: b left alone, keeping every slice; a and c never saw it. a claims its share
    restoring the slices b's record names from b; records of registered members (rule 13) and its own
    are left out; a won slice is no longer orphaned."""
    o = Ownership("a", ttl=10)
    o.lease_granted(0.0)
    recorded = frozenset(range(0, SLICES, 2))
    o.orphans({"b": recorded, "c": {1, 3}, "a": {5}}, registered=["a", "c"], now=0.0)
    (claim,) = o.view_changed(["a", "c"], 0.0)
    assert isinstance(claim, Claim)
    mine = Ring(["a", "c"]).slices_of("a")
    assert claim.slices == mine - {1, 3} and claim.restore == (("b", mine & recorded),)  # c: rule 13
    lost = sorted(mine & recorded)[:3]
    o.claimed(claim.slices - set(lost), lost)
    assert o.tick(2.0) == [Claim(frozenset(lost), (("b", frozenset(lost)),))]
    o.claimed(lost, ())
    o.lease_lost()
    o.orphans({"b": recorded - mine}, registered=["a", "c"], now=3.0)  # the record lost what a won
    (again,) = o.lease_granted(3.0)
    assert isinstance(again, Claim) and again.slices == mine and again.restore == ()
    o.orphans({"b": recorded}, registered=["a", "b", "c"], now=4.0)  # b is back: rule 13, not 12
    o.claimed((), again.slices)
    assert o.tick(5.0) == [Claim(mine - recorded)]


def test_a_slice_a_registered_member_keeps_is_claimed_once_its_record_lets_it_go() -> None:
    """Ownership rule 13: b is back with its data dir and its record still names slices a wants: a
    claims the rest, and each of those once b's record no longer names it (b handed it over), or
    KEPT_WAIT after it first saw it kept, whichever comes first; c's record (c is not registered) is
    rule 12's restore, never held back."""
    o = Ownership("a", ttl=10)
    o.lease_granted(0.0)
    mine = Ring(["a", "b"]).slices_of("a")
    by_b, by_c = frozenset(sorted(mine)[:10]), frozenset(sorted(mine)[10:12])
    o.orphans({"b": by_b | {next(iter(Ring(["a", "b"]).slices_of("b")))}, "c": by_c},
              registered=["a", "b"], now=0.0)
    (claim,) = o.view_changed(["a", "b"], 0.0)
    assert isinstance(claim, Claim)
    assert claim.slices == mine - by_b and claim.restore == (("c", by_c),)
    assert o.kept(0.0) == by_b
    o.claimed(claim.slices, ())
    assert o.renewed(2.0) == []  # nothing else to claim while b has them
    handed = frozenset(sorted(by_b)[:4])
    o.orphans({"b": by_b - handed}, registered=["a", "b"], now=3.0)  # b handed four over
    assert o.renewed(3.0) == [Claim(handed)]
    o.claimed(handed, ())
    assert o.renewed(KEPT_WAIT - 0.5) == []
    assert o.kept(KEPT_WAIT) == frozenset()  # b never let the others go: no longer waited for
    assert o.renewed(KEPT_WAIT) == [Claim(by_b - handed)]
