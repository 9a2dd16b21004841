"""Slice hand-over in bounded chunks (polecat/cluster/chunks.py): a transfer cut anywhere loses nothing
and duplicates nothing (sans-IO, two real LMDB frontiers)."""

from __future__ import annotations

import io
from pathlib import Path

from polecat.cluster.chunks import Exporter, bundle_chunks
from polecat.cluster.ring import Ring
from polecat.frontier.bundle import SliceBundle
from polecat.frontier.slices import SLICES, slice_of
from tests.frontier_helpers import Rig, canon
from tests.test_frontier_handover import CFG, HOSTS, crawl_some, drain, queued_urls

MAX_BYTES = 700


def exporter(rig: Rig, now: float) -> Exporter:
    """A node's export (polecat/node/member.py): from a snapshot of a commit made now, in steps of a few
    rows (polecat/frontier/handover.py rule 8)."""

    async def export(slices: frozenset[int]) -> bytes:
        rig.raw.commit()
        snapshot = rig.raw.snapshot()
        steps = rig.raw.begin_export(snapshot, slices, now, budget=16)
        while (bundle := steps.step()) is None:
            pass
        snapshot.close()
        return bundle.to_bytes()

    return export


def _adopt(rig: Rig, body: bytes, now: float) -> int:
    """What the new owner's /internal/adopt does with one chunk: verify, adopt, commit."""
    report = rig.frontier.adopt(SliceBundle.read(io.BytesIO(body)), now)
    rig.frontier.commit()
    return report.duplicates


async def test_chunks_are_whole_slices_within_the_bound_and_cover_everything(tmp_path: Path) -> None:
    a = Rig(tmp_path / "a", cfg=CFG)
    now = crawl_some(a, 1000.0, 10)
    moving = Ring(["a", "b"]).slices_of("b")
    chunks = [c async for c in bundle_chunks(exporter(a, now), moving, max_bytes=MAX_BYTES, max_slices=64)]
    assert len(chunks) > 2
    assert frozenset().union(*(c for c, _ in chunks)) == moving
    assert sum(len(c) for c, _ in chunks) == len(moving)  # disjoint: no slice split or sent twice
    for group, body in chunks:
        assert len(body) <= MAX_BYTES or len(group) == 1, (len(group), len(body))
        assert SliceBundle.read(io.BytesIO(body)).ids == group


async def test_a_transfer_cut_mid_way_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    a = Rig(tmp_path / "a", cfg=CFG)
    now = crawl_some(a, 1000.0, 30)
    before = queued_urls(a)
    moving = frozenset(slice_of(h) for h in HOSTS[::2])  # slices with hosts in them: every chunk counts
    a.frontier.set_owned(frozenset(range(SLICES)) - moving, now)
    moved = {u for u in before if slice_of(canon(u).split("/")[2]) in moving}
    assert len([c async for c in bundle_chunks(exporter(a, now), moving, max_bytes=MAX_BYTES)]) >= 5
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.set_owned(moving, now)
    # Attempt 1: two chunks go through, then the new owner dies while adopting the third (before
    # its commit).
    chunks = bundle_chunks(exporter(a, now), moving, max_bytes=MAX_BYTES)
    for _ in range(2):
        group, body = await anext(chunks)
        _adopt(b, body, now)
        a.frontier.release_slices(group)
    _, body = await anext(chunks)
    await chunks.aclose()
    b.frontier.adopt(SliceBundle.read(io.BytesIO(body)), now)
    b.crash()
    b.reopen(now)
    b.frontier.set_owned(moving, now)
    # Attempt 2: chunks are adopted and committed, up to one with queued URLs (a slice may hold none),
    # but their answers are lost: the sender keeps them.
    chunks = bundle_chunks(exporter(a, now), moving, max_bytes=MAX_BYTES)
    queued = False
    while not queued:
        _, body = await anext(chunks)
        _adopt(b, body, now)
        queued = any(table == "queue" for table, _, _ in SliceBundle.read(io.BytesIO(body)).records())
    await chunks.aclose()
    # Attempt 3 sends what the sender still has, the chunks with the lost answers again first.
    repeats = 0
    async for group, body in bundle_chunks(exporter(a, now), moving, max_bytes=MAX_BYTES):
        repeats += _adopt(b, body, now)
        a.frontier.release_slices(group)
    a.frontier.commit()
    assert repeats > 0  # the repeated chunk's queued URLs were recognised, not queued again
    assert queued_urls(b) == moved and b.frontier.queued == len(moved)
    assert queued_urls(a) == before - moved
    fetched_b, _ = drain(b, now + 1)
    assert sorted(fetched_b) == sorted(moved)  # each moved URL fetched once, by the new owner


class _CountingExporter:
    """Slices of ``per_slice`` bytes each; counts the slices every export read."""

    def __init__(self, per_slice: int) -> None:
        self.per_slice = per_slice
        self.exported = 0

    async def __call__(self, slices: frozenset[int]) -> bytes:
        self.exported += len(slices)
        return bytes(self.per_slice * len(slices) + 16)


async def test_the_first_chunk_is_one_slice_and_the_next_start_at_the_slices_that_fit() -> None:
    # 50M URLs over 4,096 slices: ~660 KB a slice, ~6 of them to a 4 MB chunk.
    per_slice, max_bytes, moving = 660_000, 4 << 20, range(2048)
    exporter = _CountingExporter(per_slice)
    chunks = [c async for c in bundle_chunks(exporter, moving, max_bytes=max_bytes)]
    assert sorted(s for group, _ in chunks for s in group) == list(moving)
    assert all(len(body) <= max_bytes for _, body in chunks)
    assert exporter.exported == len(moving)  # each slice exported once: no chunk halved
    assert len(chunks[0][0]) == 1  # the first export is one slice, not 64 (~9 s of the loop at 50M)
    assert {len(group) for group, _ in chunks[1:-1]} == {max_bytes // per_slice}  # 6 a chunk


async def test_chunks_grow_back_when_slices_get_smaller() -> None:
    exporter = _CountingExporter(660_000)
    chunks = bundle_chunks(exporter, range(512), max_bytes=4 << 20)
    first, _ = await anext(chunks)
    exporter.per_slice = 1_000  # the rest of the slices hold few URLs
    rest = [group async for group, _ in chunks]
    assert len(first) == 1 and all(len(g) == 64 for g in rest[1:-1])
