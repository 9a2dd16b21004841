"""A checkpoint round exports each group of slices in steps, and a restore adopts each object in steps,
the event loop given a turn between two (polecat/cluster/failover.py rules 1 and 6; issue 39): the rows
or records read between two turns are counted, never timed. A restore cut between two steps and done
again ends as a one-call restore does."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path

import obstore
import obstore.store
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.cluster import failover
from polecat.cluster.checkpoint_plan import GROUP, Manifest
from polecat.cluster.checkpoints import CheckpointStore
from polecat.cluster.failover import Failover
from polecat.cluster.ownership import ABORT_BOUND
from polecat.frontier import handover
from polecat.frontier.bundle import SliceBundle
from polecat.frontier.handover_ranges import CommittedSnapshot
from polecat.frontier.slices import SLICES, slice_of
from polecat.testing.fakes import FakeClock
from tests.frontier_helpers import Rig
from tests.test_cluster_checkpoints import RigNode, _rig_with_crawl, _ship
from tests.test_export_steps import CountedBundle, CountedSnapshot, moved_state
from tests.test_frontier_handover import CFG, HOSTS, queued_urls
from tests.test_release_steps import node_with

EVERY = frozenset(range(SLICES))
WALL = 5_000.0


class PerTurn:
    """How much ``count()`` grew between each two turns the event loop gave another task while ``async
    with`` it ran (a call that holds the loop throughout grows it all at once)."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count
        self._last = 0
        self.grown: list[int] = []
        self._task: asyncio.Task[None] | None = None

    def _look(self) -> None:
        now = self._count()
        self.grown.append(now - self._last)
        self._last = now

    async def _tick(self) -> None:
        while True:
            self._look()
            await asyncio.sleep(0)

    async def __aenter__(self) -> PerTurn:
        self._last = self._count()
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._look()


async def test_a_round_exports_a_group_a_few_rows_a_turn_of_the_loop_and_ships_the_one_call_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 1: on a node, a round reads its snapshot at most ``EXPORT_STEP`` rows between two turns of the
    loop (in one call a group's rows were read at once), and each object it uploads is the one-call
    export of the same commit byte for byte."""
    monkeypatch.setattr(failover, "EXPORT_STEP", 4)
    memory = obstore.store.MemoryStore()
    store = CheckpointStore(memory, "t")
    async with node_with(tmp_path, 9) as crawler:
        frontier = crawler.frontier
        taken: list[tuple[CountedSnapshot, CommittedSnapshot]] = []
        snapshot = frontier.snapshot

        def counted() -> CommittedSnapshot:
            # A second snapshot of the same commit (no await between), for the one-call export.
            taken.append((CountedSnapshot(crawler._db.snapshot()), snapshot()))
            return CommittedSnapshot(taken[-1][0])

        monkeypatch.setattr(frontier, "snapshot", counted)
        fo = Failover(store, "a", 60.0, clock=FakeClock(wall=WALL))
        fo.attach(crawler.member)
        async with PerTurn(lambda: taken[0][0].rows if taken else 0) as turns:
            assert await fo.ship(EVERY)
        rows = taken[0][0].rows
        assert rows >= 12 and max(turns.grown) <= 4 and sum(turns.grown) == rows
        manifest = store.read_manifest("a")
        assert manifest is not None and manifest.slices == EVERY
        one_call = taken[0][1]
        try:
            for entry in manifest.entries:
                shipped = bytes(obstore.get(memory, entry.object).bytes())
                assert shipped == one_call.export(entry.slices, WALL).to_bytes()
        finally:
            one_call.close()


async def test_a_node_restores_an_object_a_few_records_a_turn_of_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 6: on a node, a restore takes in at most ``ADOPT_STEP`` records of an object between two
    turns of the loop (in one call an object's records were taken in at once), and each restored host
    waits the old owner's abort bound first (ownership rule 11)."""
    monkeypatch.setattr(handover, "ADOPT_STEP", 4)
    a, now = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    _ship(store, a, EVERY, Manifest("a"), 1, now)
    bundles: list[CountedBundle] = []
    fetch = store.fetch

    def counted(manifest: Manifest, slices: frozenset[int]) -> list[SliceBundle]:
        bundles.extend(CountedBundle(b) for b in fetch(manifest, slices))
        return bundles  # type: ignore[return-value] # read as a bundle is
    monkeypatch.setattr(store, "fetch", counted)
    async with node_with(tmp_path / "b", 9) as crawler:
        fo = Failover(store, "b", 60.0, clock=FakeClock(wall=WALL))
        fo.attach(crawler.member)
        async with PerTurn(lambda: sum(b.read for b in bundles)) as turns:
            await fo.restore({"a": EVERY})
        records = sum(b.read for b in bundles)
        assert records >= 100 and max(turns.grown) <= 4 and sum(turns.grown) == records
        assert [r.member for r in fo.restores] == ["a"]
        hosts = {url.split("/")[2] for url in queued_urls(a)}
        assert hosts and all(crawler.frontier.host_state(h).next_allowed >= WALL + ABORT_BOUND for h in hosts)


def test_a_rounds_group_in_steps_of_any_budget_is_the_one_call_export(tmp_path: Path) -> None:
    """Rule 1: whatever the budget, the group a round exports in steps is the one-call export of the same
    snapshot byte for byte (no wire change: an heir of 0.3.0 reads it)."""
    a, _ = _rig_with_crawl(tmp_path)
    snapshot = a.raw.snapshot()
    first = slice_of(HOSTS[0]) // GROUP * GROUP
    group = frozenset(range(first, first + GROUP))
    one_call = {books: snapshot.export(group, WALL, books=books).to_bytes() for books in (True, False)}
    assert SliceBundle.read(io.BytesIO(one_call[True])).records_count >= 10  # a few steps' worth

    @settings(max_examples=30, deadline=None)
    @given(budget=st.integers(1, 16), books=st.booleans())
    def same(budget: int, books: bool) -> None:
        steps = snapshot.export_steps(group, WALL, books=books, budget=budget)
        assert asyncio.run(failover._drained(steps)).to_bytes() == one_call[books]

    try:
        same()
    finally:
        snapshot.close()


class Crash(Exception):
    """The node dies (kill -9) between two steps."""


@pytest.mark.parametrize("cut", [1, 3, 10])
async def test_a_restore_cut_between_steps_and_done_again_ends_as_a_one_call_restore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: int) -> None:
    """Rule 6: a commit after every step, the heir killed after ``cut`` steps, reopened and the claim's
    restore done again: the same URLs queued, host counters (pages fetched aside: each adoption adds
    them), URL records and seen keys as a restore whose objects are adopted each in one call, and the
    hosts wait as long."""
    monkeypatch.setattr(handover, "ADOPT_STEP", 5)
    a, now = _rig_with_crawl(tmp_path / "a")
    store = CheckpointStore(obstore.store.MemoryStore(), "t")
    _ship(store, a, EVERY, Manifest("a"), 1, now)
    manifest = store.read_manifest("a")
    assert manifest is not None
    one = Rig(tmp_path / "one", cfg=CFG)
    hold = WALL + ABORT_BOUND
    for bundle in store.fetch(manifest, EVERY):  # as the restore adopted them before
        one.frontier.adopt(bundle, WALL, wait_from=hold)
    one.raw.commit()

    heir = Rig(tmp_path / "heir", cfg=CFG)
    steps = 0

    def commit_then_die() -> None:
        nonlocal steps
        heir.raw.commit()  # a periodic commit holds the steps so far
        steps += 1
        if steps == cut:
            raise Crash

    fo = Failover(store, "heir", 60.0, clock=FakeClock(wall=WALL))
    fo.attach(RigNode(heir, commit_then_die))
    with pytest.raises(Crash):
        await fo.restore({"a": EVERY})
    assert fo.restores == [] and queued_urls(heir) < queued_urls(one)  # a part of it only
    heir.crash()
    heir.reopen(WALL)
    again = Failover(store, "heir", 60.0, clock=FakeClock(wall=WALL))
    again.attach(RigNode(heir))
    await again.restore({"a": EVERY})
    heir.raw.commit()
    assert moved_state(heir, fetched=False) == moved_state(one, fetched=False)
    hosts = {url.split("/")[2] for url in queued_urls(one)}
    assert {h: heir.frontier.host_state(h).next_allowed for h in hosts} == \
        {h: one.frontier.host_state(h).next_allowed for h in hosts}
