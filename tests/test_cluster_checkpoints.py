"""Slice checkpoints in object storage: the manifest rules (sans-IO) and rounds against obstore's memory
and file backends (polecat/cluster/checkpoint_plan.py, checkpoints.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import obstore
import obstore.store
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.cluster.batch import HandoffUrl, decode_urls, encode_urls
from polecat.cluster.checkpoint_plan import (
    GROUP,
    CheckpointError,
    CheckpointSchedule,
    Entry,
    Manifest,
    covered,
    freshest,
    garbage,
    groups,
    manifest_name,
)
from polecat.cluster.checkpoints import CheckpointStore, RoundReport
from polecat.cluster.failover import Failover
from polecat.cluster.ownership import ABORT_BOUND
from polecat.cluster.ring import Ring
from polecat.frontier.bundle import Fence, SliceBundle
from polecat.frontier.frontier import Frontier
from polecat.frontier.records import AdoptReport, Lease, QueuedUrl
from polecat.frontier.slices import SLICES, slice_of
from polecat.testing.fakes import FakeClock
from tests.frontier_helpers import Rig, canon
from tests.test_frontier_handover import CFG, HOSTS, crawl_some, drain, queued_urls


def test_a_manifest_round_trips_and_refuses_what_it_cannot_trust() -> None:
    m = Manifest("n1", 3, 2, 10.5, (Entry("t/n1/a", frozenset({1, 2}), 0, "d"),
                                    Entry("t/n1/b", frozenset({70}))))
    assert Manifest.from_bytes(m.to_bytes()) == m
    assert b"strays" not in m.to_bytes()  # none: the manifest 0.3.0 writes and reads
    with_strays = Manifest("n1", 4, 3, 11.0, m.entries, "t/n1/s")
    assert Manifest.from_bytes(with_strays.to_bytes()) == with_strays and "t/n1/s" in with_strays.objects
    assert m.locate({2, 70, 99}) == {"t/n1/a": frozenset({2}), "t/n1/b": frozenset({70})}
    twice = Manifest("n1", entries=(Entry("a", frozenset({1})), Entry("b", frozenset({1}))))
    for raw in (b"{", b'{"format": 9}', twice.to_bytes(),
                Manifest("n", entries=(Entry("a", frozenset({SLICES})),)).to_bytes()):
        with pytest.raises(CheckpointError):
            Manifest.from_bytes(raw)


def test_a_manifest_carries_its_rounds_fencing_token_and_one_without_reads_as_before() -> None:
    """Checkpoint_plan rule 8: the token goes with the manifest (a hand-over entry or a removal keeps
    it); 0.3.0's manifest has no ``fence`` and reads as None."""
    token = Fence("n1", 0x2A, 77)
    m = Manifest("n1", 3, 2, 10.5, (Entry("t/n1/a", frozenset({1, 2}), 0, "d"),), fence=token)
    assert Manifest.from_bytes(m.to_bytes()) == m
    assert m.with_entry(Entry("t/n1/h", frozenset({9})), 11.0).fence == token
    assert m.without({1}, 12.0).fence == token
    old = b'{"format":1,"node":"n1","version":3,"round":2,"written":10.5,"entries":[]}'
    assert Manifest.from_bytes(old).fence is None
    with pytest.raises(CheckpointError):
        Manifest.from_bytes(old[:-1] + b',"fence":{"node":"n1"}}')


def test_an_heir_takes_each_slice_from_the_manifest_with_the_newest_token() -> None:
    """Checkpoint_plan rule 8: slice 5 held by a, then by b (both manifests name it): b's newer token
    wins, a's is refused for it; a slice whose owner this heir knows under a newer token than every
    manifest's is taken from none; a manifest without a token (0.3.0) is taken as before."""
    entry = Entry("t/x", frozenset({5, 6, 7}))
    a = Manifest("a", entries=(entry,), fence=Fence("a", 1, 10))
    b = Manifest("b", entries=(Entry("t/y", frozenset({5})),), fence=Fence("b", 2, 20))
    got = freshest({"a": a, "b": b}, {"a": {5, 6, 7}, "b": set()}, {7: 15})
    assert got.take == {"a": frozenset({6}), "b": frozenset({5})}
    assert got.refused == {"a": frozenset({5, 7})}
    old = Manifest("a", entries=(entry,))
    got = freshest({"a": old, "b": b}, {"a": {5, 6, 7}}, {7: 15})
    assert got.take == {"a": frozenset({5, 6, 7})} and got.refused == {}
    assert freshest({}, {"a": {5}}, {}).take == {}


async def test_a_restore_refuses_a_manifest_older_than_the_slices_newest_owner(tmp_path: Path) -> None:
    """Failover rule 6 with checkpoint_plan rule 8: a's manifest names every slice under revision 10;
    b's (revision 20) names groups 0 and 1, and this node restored group 1 from b already: group 0
    comes from b, group 1 from nobody (b's newer manifest names it, and a's copy is older than what
    the heir restored, even with b's manifest not read), the rest from a; each refusal is counted."""
    a, now = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    every = frozenset(range(SLICES))
    shipped = _ship(store, a, every, Manifest("a"), 1, now).manifest
    store.write_manifest(dataclasses.replace(shipped, fence=Fence("a", 1, 10)), shipped)
    g0, g1 = frozenset(range(GROUP)), frozenset(range(GROUP, 2 * GROUP))
    later = Manifest("b", entries=tuple(Entry(o, ss) for o, ss in shipped.locate(g0 | g1).items()),
                     fence=Fence("b", 2, 20))
    store.write_manifest(later, Manifest("b"))
    fo = Failover(store, "c", 60.0, clock=FakeClock(wall=5_000.0))
    fo.attach(RigNode(Rig(tmp_path / "c", cfg=CFG)))
    await fo.restore({"b": g1})
    await fo.restore({"a": every - g0, "b": g0})
    assert [(r.member, r.slices) for r in fo.restores] == [("b", len(g1)), ("a", len(every - g0 - g1)),
                                                           ("b", len(g0))]
    assert fo.manifests_refused == len(g1)
    await fo.restore({"a": g1})
    assert len(fo.restores) == 3 and fo.manifests_refused == 2 * len(g1)


def test_a_handover_entry_takes_its_slices_from_older_entries_and_release_drops_them() -> None:
    m = Manifest("n", 1, 1, 0.0, (Entry("g0", frozenset(range(GROUP)), 0, "x"),))
    m2 = m.with_entry(Entry("h", frozenset({3, 4})), 1.0)
    assert m2.locate({3, 5}) == {"h": frozenset({3}), "g0": frozenset({5})}
    assert m2.round == 1 and m2.version == 2
    assert m2.reusable(0, frozenset(range(GROUP)) - {3, 4}, "x") is None  # narrowed: uploaded again
    m3 = m2.without({3, 4, 5}, 2.0)
    assert m3.objects == {"g0"} and garbage(m2, m3) == {"h"}
    assert m3.without(range(SLICES), 3.0).slices == frozenset()  # a graceful leave: nothing left


@given(st.sets(st.integers(0, SLICES - 1), max_size=300))
def test_groups_partition_the_slices(slices: set[int]) -> None:
    got = groups(slices)
    assert frozenset().union(*got.values()) == slices
    assert all(s // GROUP == g for g, ss in got.items() for s in ss)


def test_the_schedule_spaces_rounds_and_counts_them_for_acknowledgements() -> None:
    c = CheckpointSchedule(60.0)
    assert c.due(0.0) and c.covering_round() == 1
    assert c.begin(0.0) == 1
    assert not c.due(59.0) and c.wait(59.0) == pytest.approx(1.0)
    assert c.covering_round() == 2  # committed after round 1 began: round 2 at the earliest
    c.urge()
    assert c.due(1.0) and c.wait(1.0) == 0.0
    assert c.begin(1.0) == 2 and not c.due(2.0)
    assert covered({1: 1, 2: 2, 3: 3}, 2) == {1, 2}


def _ship(store: CheckpointStore, rig: Rig, held: frozenset[int], previous: Manifest, round_: int, now: float,
          *, carried: frozenset[int] = frozenset()) -> RoundReport:
    """One round from a snapshot of the rig's last commit (closed after: an LMDB read transaction left
    open past its environment is not safe)."""
    snapshot = rig.frontier.snapshot()
    try:
        return store.ship_round(snapshot.export, held, previous, round_, now, carried=carried)
    finally:
        snapshot.close()


def _rig_with_crawl(path: Path) -> tuple[Rig, float]:
    rig = Rig(path, cfg=CFG)
    now = crawl_some(rig, 1000.0, 30)
    rig.frontier.commit()
    return rig, now


def test_a_round_ships_every_held_slice_and_the_next_uploads_only_what_changed(tmp_path: Path) -> None:
    rig, now = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    held = frozenset(range(SLICES))
    first = _ship(store, rig, held, Manifest("a"), 1, now)
    assert first.manifest.slices == held and first.uploaded == len(groups(held)) and first.bytes > 0
    assert store.read_manifest("a") == first.manifest
    again = _ship(store, rig, held, first.manifest, 2, now + 1)
    assert again.uploaded == 0 and again.manifest.round == 2  # nothing changed
    rig.frontier.add(canon(f"http://{HOSTS[0]}/new"), 1, 0.5, now)
    rig.frontier.commit()
    third = _ship(store, rig, held, again.manifest, 3, now + 2)
    assert third.uploaded == 1  # the one group where a URL was added
    assert store.read_manifest("b") is None


def _exports_of_a_round_after_writes(path: Path, hosts: int, k: int) -> tuple[int, int, int]:
    """Groups a round exports after a first one, with ``hosts`` hosts queued and then URLs added to ``k``
    hosts of ``k`` groups; and the groups the first round exported, and the URLs held."""
    rig = Rig(path, cfg=CFG)
    for i in range(hosts):
        rig.frontier.add(canon(f"http://held{i}.test/"), 0, 0.5, 0.0)
    rig.frontier.commit()
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    held = frozenset(range(SLICES))
    exported: list[frozenset[int]] = []

    def round_(previous: Manifest, n: int) -> RoundReport:
        snapshot = rig.frontier.snapshot()
        written = rig.frontier.take_written()

        def export(ids: frozenset[int], now: float) -> SliceBundle:
            exported.append(ids)
            return snapshot.export(ids, now)

        try:
            return store.ship_round(export, held, previous, n, float(n), written=written)
        finally:
            snapshot.close()

    first = round_(Manifest("a"), 1)
    at_first = len(exported)
    exported.clear()
    touched: dict[int, str] = {}
    for i in range(10_000):
        host = f"new{i}.test"
        touched.setdefault(slice_of(host) // GROUP, host)
        if len(touched) == k:
            break
    for host in touched.values():
        rig.frontier.add(canon(f"http://{host}/"), 0, 0.5, 1.0)
    rig.frontier.commit()
    second = round_(first.manifest, 2)
    assert second.uploaded == k and second.manifest.slices == held
    assert round_(second.manifest, 3).uploaded == 0  # nothing written since: nothing exported
    return len(exported), at_first, rig.frontier.queued


def test_a_round_exports_only_the_groups_written_since_the_last_round(tmp_path: Path) -> None:
    small, first, queued = _exports_of_a_round_after_writes(tmp_path / "a", 200, 3)
    assert first == len(groups(range(SLICES)))  # a frontier just opened: every slice may have changed
    large, _, queued_large = _exports_of_a_round_after_writes(tmp_path / "b", 2_000, 3)
    assert queued_large >= 10 * queued - 30
    assert small == large == 3


def test_an_heir_restores_the_dead_nodes_slices_from_its_last_round(tmp_path: Path) -> None:
    """Dead node a's slices split over b and c by the Ring: each adopts its share from a's manifest, and
    together they fetch exactly what a had queued at its last round, politely."""
    a, now = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.from_url(f"file://{tmp_path}/ckpt", mkdir=True), "t")
    _ship(store, a, frozenset(range(SLICES)), Manifest("a"), 1, now)
    queued = queued_urls(a)
    lease = a.frontier.lease(now + 5)  # after the round: lost with a's disk
    assert isinstance(lease, Lease)
    a.crash()
    ring = Ring(["b", "c"])
    manifest = store.read_manifest("a")
    assert manifest is not None
    fetched: list[str] = []
    for name in ("b", "c"):
        heir = Rig(tmp_path / name, cfg=CFG)
        mine = ring.slices_of(name)
        heir.frontier.set_owned(mine, now)
        for bundle in store.fetch(manifest, mine):
            assert bundle.ids <= mine
            heir.frontier.adopt(bundle, now + 10)
        assert queued_urls(heir) == {u for u in queued if slice_of(canon(u).split("/")[2]) in mine}
        first = heir.frontier.lease(now + 10)
        assert not isinstance(first, Lease) or first.not_before >= now + 10 + 0.75  # restart spacing
        got, _ = drain(heir, now + 10)
        fetched += got
    assert sorted(fetched) == sorted(queued)


def test_a_missing_object_or_a_corrupt_one_is_a_checkpoint_error(tmp_path: Path) -> None:
    rig, now = _rig_with_crawl(tmp_path)
    raw = obstore.store.MemoryStore()
    store = CheckpointStore(raw, "t")
    every = frozenset(range(SLICES))
    m = _ship(store, rig, every, Manifest("a"), 1, now).manifest
    name = sorted(m.objects)[0]
    obstore.put(raw, name, b"PCSB garbage")
    with pytest.raises(CheckpointError, match=name):
        store.fetch(m, m.slices)
    obstore.delete(raw, name)
    with pytest.raises(CheckpointError, match="missing"):
        store.fetch(m, m.slices)
    obstore.put(raw, manifest_name("t", "a"), b"not json")
    with pytest.raises(CheckpointError, match="manifest"):
        store.read_manifest("a")


@pytest.mark.s3
def test_rounds_ship_to_s3_and_an_heir_reads_them_back(tmp_path: Path, s3_endpoint: str) -> None:
    bucket = f"polecat-ckpt-{uuid.uuid4().hex[:12]}"
    with urllib.request.urlopen(urllib.request.Request(f"{s3_endpoint}/{bucket}", method="PUT"), timeout=10):
        pass  # moto accepts an unsigned bucket creation; obstore does not create buckets
    options = (("endpoint", s3_endpoint), ("region", "us-east-1"), ("access_key_id", "test"),
               ("secret_access_key", "test"), ("allow_http", "true"))
    store = CheckpointStore.open(f"s3://{bucket}/checkpoints", options, "t")
    rig, now = _rig_with_crawl(tmp_path)
    every = frozenset(range(SLICES))
    first = _ship(store, rig, every, Manifest("a"), 1, now)
    rig.frontier.add(canon(f"http://{HOSTS[0]}/new"), 1, 0.5, now)
    rig.frontier.commit()
    second = _ship(store, rig, every, first.manifest, 2, now + 1)
    assert second.uploaded == 1 and store.read_manifest("a") == second.manifest
    mine = frozenset(s for s in every if s % 2)
    got = {QueuedUrl.decode_v3(v).url for b in store.fetch(second.manifest, mine)
           for table, _, v in b.records() if table == "queue"}
    assert got == {u for u in queued_urls(rig) if slice_of(canon(u).split("/")[2]) in mine}
    listed = f"{s3_endpoint}/{bucket}?list-type=2&prefix=checkpoints/t/a/"
    with urllib.request.urlopen(listed, timeout=10) as r:
        listing = r.read().decode()
    assert listing.count("<Key>") == len(second.manifest.objects) + 1  # garbage deleted, plus MANIFEST


def test_a_round_carries_the_entries_of_slices_still_wanted_but_not_held(tmp_path: Path) -> None:
    """After a restart the node holds nothing until its old lease's keys expire: its rounds meanwhile
    must not drop (and delete) the last checkpoint of its slices."""
    rig, now = _rig_with_crawl(tmp_path)
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    mine = Ring(["a", "b"]).slices_of("a")
    first = _ship(store, rig, mine, Manifest("a"), 1, now).manifest
    idle = _ship(store, rig, frozenset(), first, 2, now + 1, carried=mine)
    assert idle.manifest.slices == mine and idle.manifest.objects == first.objects and idle.uploaded == 0
    some = frozenset(s for s in mine if s < 2 * GROUP)  # two whole groups held again, unchanged
    part = _ship(store, rig, some, idle.manifest, 3, now + 2, carried=mine - some)
    assert part.manifest.slices == mine and part.uploaded == 0 and part.manifest.objects == first.objects
    gone = _ship(store, rig, frozenset(), part.manifest, 4, now + 3).manifest
    assert gone.slices == frozenset() and store.read_manifest("a") == gone  # no longer wanted: dropped


class RigNode:
    """The crawler side of Failover over a Rig's frontier (the checkpoint is a plain commit); an adoption's
    steps as the node takes them (polecat/node/member.py ``adopt_in_steps``), ``after_step`` called after
    each one's writes are applied."""

    def __init__(self, rig: Rig, after_step: Callable[[], None] = lambda: None) -> None:
        self.rig = rig
        self.waits_from: list[float | None] = []
        self.after_step = after_step

    @property
    def frontier(self) -> Frontier:
        return self.rig.frontier

    async def commit(self, *, lmdb: bool = False) -> None:
        self.rig.frontier.commit()

    async def bodies_shipped(self, within: float) -> bool:
        return True

    async def adopt_in_steps(self, bundle: SliceBundle, now: float, *,
                             wait_from: float | None = None) -> AdoptReport:
        self.waits_from.append(wait_from)
        adoption = self.rig.raw.begin_adopt(bundle, now, wait_from=wait_from)
        try:
            while (report := self.rig.db.applied(adoption.step())) is None:
                self.after_step()
                await asyncio.sleep(0)
        finally:
            adoption.close()
        return report


async def test_failover_restores_a_dead_members_slices_once_then_checkpoints_them_as_its_own(
        tmp_path: Path) -> None:
    a, now = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    every = frozenset(range(SLICES))
    _ship(store, a, every, Manifest("a"), 1, now)
    clock = FakeClock(wall=5_000.0)
    fo = Failover(store, "b", 60.0, clock=clock)
    await fo.open()
    with pytest.raises(CheckpointError, match="not open"):
        await fo.restore({"a": every})  # the claim fails and is retried once the crawler is open
    b = Rig(tmp_path / "b", cfg=CFG)
    node = RigNode(b)
    fo.attach(node)
    assert fo.schedule.begin(0.0) == 1 and not fo.schedule.due(1.0)
    await fo.restore({"a": every, "z": every})  # z never wrote a checkpoint: nothing to restore from it
    assert [(r.member, r.queued) for r in fo.restores] == [("a", len(queued_urls(a)))]
    assert queued_urls(b) == queued_urls(a) and fo.schedule.due(1.0)  # a round is asked for at once
    # Ownership rule 11: every restored host waits the old owner's abort bound, then its interval.
    assert node.waits_from and set(node.waits_from) == {5_000.0 + ABORT_BOUND}
    await fo.restore({"a": every})  # the claim was retried: not adopted again
    assert len(fo.restores) == 1
    assert await fo.ship(every)
    mine = store.read_manifest("b")
    assert mine is not None and mine.round == 2 and mine.slices == every


async def test_no_round_while_fenced_or_detached_and_no_busy_loop_either() -> None:
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    fo = Failover(store, "a", 0.1)
    asked: list[bool] = []

    def fenced() -> tuple[frozenset[int], frozenset[int]] | None:
        asked.append(True)
        return None

    for slices in (fenced, lambda: (asked.append(True), (frozenset({1}), frozenset()))[1]):  # no crawler
        asked.clear()
        task = asyncio.create_task(fo.run(slices))
        await asyncio.sleep(0.35)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert 1 <= len(asked) <= 6  # about once per interval, not thousands of times
    assert store.read_manifest("a") is None and fo.rounds == 0


async def test_a_round_during_which_the_lease_was_lost_writes_no_manifest(tmp_path: Path) -> None:
    """Failover rule 5 (ownership rule 9): the node froze mid-round and re-registered, or is fenced at
    its end: what it snapshotted under the old lease must not become what heirs restore."""
    a, _ = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    one, two = Fence("a", 1, 10), Fence("a", 2, 20)
    tokens = iter([one, two, None, two, two])
    fo = Failover(store, "a", 60.0, token=lambda: next(tokens))
    fo.attach(RigNode(a))
    every = frozenset(range(SLICES))
    assert not await fo.ship(every)  # re-registered during the round
    assert not await fo.ship(every)  # fenced from its start
    assert store.read_manifest("a") is None and (fo.rounds, fo.failures) == (0, 2)
    assert await fo.ship(every)  # one lease throughout
    got = store.read_manifest("a")
    assert got is not None and got.slices == every
    assert got.fence == two  # checkpoint_plan rule 8: the token it was taken under


async def test_a_round_whose_hand_offs_are_not_acknowledged_ships_them_for_the_heirs(tmp_path: Path) -> None:
    """Failover rule 2 (checkpoint_plan rule 7): a receiver frozen or cut off leaves batches
    unacknowledged past the interval. The round ships all the same, with their URLs as its strays (it
    was skipped, so heirs restored an older round and fetched the pages since again); an heir that
    restores any of the node's slices routes them to their owners, once per manifest version."""
    a, _ = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    unacked = [HandoffUrl("http://h9.test/a", 2, 0.5), HandoffUrl("http://h9.test/b", 3, 0.25, seed=True)]
    acked = False

    async def settled(within: float) -> bool:
        return acked

    fo = Failover(store, "a", 0.05, settled=settled, unacked=lambda: encode_urls(unacked))
    fo.attach(RigNode(a))
    every = frozenset(range(SLICES))
    assert await fo.ship(every)
    shipped = store.read_manifest("a")
    assert shipped is not None and shipped.slices == every and shipped.strays in shipped.objects
    assert fo.failures == 0 and fo.rounds == 1

    routed: list[HandoffUrl] = []

    def route(raw: bytes) -> int:
        routed.extend(decode_urls(raw))
        return len(decode_urls(raw))

    heir = Failover(store, "b", 60.0, on_strays=route)
    heir.attach(RigNode(Rig(tmp_path / "b", cfg=CFG)))
    await heir.restore({"a": frozenset(range(0, SLICES, 2))})
    await heir.restore({"a": frozenset(range(1, SLICES, 2))})  # the same manifest: routed once
    assert routed == unacked

    acked = True  # the receiver answered: the next round has no strays, and their object goes
    assert await fo.ship(every)
    later = store.read_manifest("a")
    assert later is not None and later.strays == "" and shipped.strays in garbage(shipped, later)


@given(st.frozensets(st.integers(0, SLICES - 1), min_size=1, max_size=200), st.integers(2, 3),
       st.randoms(use_true_random=False))
def test_exactly_one_heir_of_a_manifest_routes_its_strays(slices: frozenset[int], heirs: int,
                                                          rnd: random.Random) -> None:
    """Checkpoint_plan rule 7: heirs restore disjoint slices of a dead member's manifest; one of them,
    and only one, routes its strays (every heir did: each stray arrived once per heir)."""
    entries = tuple(Entry(f"o{g}", ids, g, "d") for g, ids in groups(slices).items())
    manifest = Manifest("a", 3, 2, 1.0, entries, "t/a/s")
    shares: list[set[int]] = [set() for _ in range(heirs)]
    for s in slices:
        shares[rnd.randrange(heirs)].add(s)
    assert sum(manifest.routes_strays(share) for share in shares) == 1
    assert not dataclasses.replace(manifest, strays="").routes_strays(slices)  # none to route


async def test_three_heirs_restoring_a_dead_members_slices_route_each_stray_once(tmp_path: Path) -> None:
    """Checkpoint_plan rule 7, failover rule 6: the dead member's slices go to three heirs by the Ring
    of those left; every stray is routed, by one heir, once."""
    a, _ = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    unacked = [HandoffUrl(f"http://h{k}.test/p", 2, 0.5) for k in range(20)]

    async def never(within: float) -> bool:
        return False

    fo = Failover(store, "a", 0.05, settled=never, unacked=lambda: encode_urls(unacked))
    fo.attach(RigNode(a))
    assert await fo.ship(frozenset(range(SLICES)))
    routed: dict[str, list[HandoffUrl]] = {}

    def router(heir: str) -> Callable[[bytes], int]:
        def route(raw: bytes) -> int:
            urls = decode_urls(raw)
            routed.setdefault(heir, []).extend(urls)
            return len(urls)
        return route

    ring = Ring(["b", "c", "d"])
    for heir in ("d", "c", "b"):  # the heir of the lowest slice is not the first to restore
        fo_heir = Failover(store, heir, 60.0, on_strays=router(heir))
        fo_heir.attach(RigNode(Rig(tmp_path / heir, cfg=CFG)))
        await fo_heir.restore({"a": ring.slices_of(heir)})
    assert list(routed) == [ring.owner(0)] and routed[ring.owner(0)] == unacked
