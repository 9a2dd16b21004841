"""A node releases, exports and adopts slices in steps, the event loop given a turn between two (handover
rules 7, 8 and 9)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.frontier import handover
from polecat.frontier.bundle import SliceBundle
from polecat.frontier.slices import slice_of, slice_prefix
from polecat.testing.fakes import FakeClock, FakeFetcher, MemoryPageStore
from tests.async_helpers import LoopTurns


def hosts_in(s: int, n: int) -> list[str]:
    names = [f"r{i}.test" for i in range(200_000) if slice_of(f"r{i}.test") == s]
    return names[:n]


@contextlib.asynccontextmanager
async def node_with(tmp_path: Path, s: int) -> AsyncIterator[Crawler]:
    """A node whose seeds are 6 hosts of slice ``s`` and one of another slice."""
    seeds = [f"http://{host}/" for host in hosts_in(s, 6)] + ["http://other.test/"]
    cfg = config_from_mapping({"data_dir": str(tmp_path), "scope": {"seeds": seeds, "mode": "host"}})
    clock = FakeClock(tick=0.0005)
    async with Crawler(cfg, clock=clock, fetcher=FakeFetcher(clock, {}), store=MemoryPageStore()) as crawler:
        yield crawler


async def test_a_node_releases_a_slice_a_few_rows_a_turn_of_the_loop(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handover, "RELEASE_STEP", 4)
    s = 9
    async with node_with(tmp_path, s) as crawler:
        frontier = crawler.frontier
        # Each seed's queue row and its host's record (in memory: its seed mark, intake.py rule 9), one
        # delete each.
        rows = 2 * sum(1 for _ in crawler._db.items("queue", slice_prefix(s)))
        assert frontier.queued == 7 and rows >= 12
        async with LoopTurns() as loop:
            await crawler.member.release_slices([s])
        assert loop.turns >= rows // 4 - 1  # a turn of the loop between two steps of 4 rows
        assert frontier.queued == 1 and not any(True for _ in crawler._db.items("queue", slice_prefix(s)))


async def test_a_node_exports_a_slice_a_few_rows_a_turn_of_the_loop(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 8 (polecat/node/member.py ``export``): a turn of the loop between two steps, and the bytes
    are a bundle of every row of the slice, as the one-call export reads them."""
    monkeypatch.setattr(handover, "EXPORT_STEP", 4)
    s = 9
    async with node_with(tmp_path, s) as crawler:
        frontier = crawler.frontier
        rows = sum(1 for table in ("queue", "ops", "hosts", "seen")
                   for _ in crawler._db.items(table, slice_prefix(s)))
        async with LoopTurns() as loop:
            body = await crawler.member.export([s])
        assert rows >= 12 and loop.turns >= rows // 4 - 1  # a turn of the loop between two steps of 4 rows
        assert frontier.queued_since_export([s]) == 0
        got = sorted(SliceBundle.read(io.BytesIO(body)).records())
        assert got == sorted(frontier.export_slices([s], 0.0).records())


async def test_a_node_adopts_a_chunk_a_few_records_a_turn_of_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 9 (polecat/node/member.py ``adopt_in_steps``): a turn of the loop between two steps, and the
    slice's URLs queued again once the last is done."""
    monkeypatch.setattr(handover, "ADOPT_STEP", 4)
    s = 9
    async with node_with(tmp_path, s) as crawler:
        bundle = SliceBundle.read(io.BytesIO(await crawler.member.export([s])))
        await crawler.member.release_slices([s])
        assert crawler.frontier.queued == 1
        async with LoopTurns() as loop:
            report = await crawler.member.adopt_in_steps(bundle, 0.0)
        assert bundle.records_count >= 12 and loop.turns >= bundle.records_count // 4 - 1
        assert report.queued == 6 and crawler.frontier.queued == 7
