"""polecat/node/seed_feed.py: a seeds file streamed in batches while the loop runs, bad lines skipped
and counted, and a crawl from a streamed file with bad lines in it that covers every host."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from polecat import Config, Crawler
from polecat.config import DnsConfig, FetchConfig, PolitenessConfig, ScopeConfig
from polecat.errors import ConfigError
from polecat.node import seed_feed
from polecat.node.seed_feed import BATCH, FIRST_BATCH, GIVE_UP, LOGGED, MAX_LINE, MIN_BATCH, SeedFeed
from polecat.testing.breadth import BreadthWeb
from polecat.testing.fakes import FakeClock
from tests.async_helpers import LoopTurns

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


class Admitted:
    def __init__(self) -> None:
        self.urls: list[str] = []
        self.first = asyncio.Event()
        self.wakes = 0

    def add(self, urls: list[str]) -> list[str | None]:
        """As ``Crawler.add_seeds`` answers: None for a line that is not an http(s) URL."""
        ok = [url for url in urls if url.startswith("http")]
        self.urls += ok
        if ok:
            self.first.set()
        return ["accepted" if url.startswith("http") else None for url in urls]

    def wake(self) -> None:
        self.wakes += 1


async def free() -> None:
    return None


async def test_a_large_file_is_admitted_in_batches_with_the_loop_running_between(tmp_path: Path) -> None:
    lines = 50 * BATCH
    path = tmp_path / "seeds.txt"
    path.write_text("".join(f"http://h{i}.test/\n" for i in range(lines)))
    admitted = Admitted()
    feed = SeedFeed(path, add_seeds=admitted.add, frontier_free=free, wake=admitted.wake)

    async def first_lease() -> int:  # what a lease loop woken by the first seed would see
        await admitted.first.wait()
        return len(admitted.urls)

    watcher = asyncio.create_task(first_lease())
    await feed.run()
    assert await watcher == FIRST_BATCH  # it ran after the first batch, not after the whole file
    assert len(admitted.urls) == feed.admitted == lines and feed.skipped == 0
    assert admitted.urls[:2] == ["http://h0.test/", "http://h1.test/"] and not feed.running
    assert admitted.wakes == 1  # the end of the feed wakes the loop (rule 4)


class SlowAdmission(Admitted):
    """Admission that costs ``per_seed`` seconds of a fake clock a seed; notes each batch's size."""

    def __init__(self, clock: FakeClock, per_seed: float) -> None:
        super().__init__()
        self.clock, self.per_seed = clock, per_seed
        self.batches: list[int] = []

    def add(self, urls: list[str]) -> list[str | None]:
        self.clock.advance(self.per_seed * len(urls))
        self.batches.append(len(urls))
        return super().add(urls)


@pytest.mark.parametrize("per_seed", [5e-6, 100e-6, 250e-6, 1e-3])
async def test_a_batch_is_sized_to_its_time_budget_on_the_nodes_clock(tmp_path: Path,
                                                                      per_seed: float) -> None:
    """Rule 7: after the first batch, none takes more than BATCH_SECONDS (unless MIN_BATCH seeds do), and
    none is smaller than the budget allows by more than the doubling bound, whatever a seed costs."""
    path = tmp_path / "seeds.txt"
    path.write_text("".join(f"http://h{i}.test/\n" for i in range(20 * BATCH)))
    clock = FakeClock()
    admitted = SlowAdmission(clock, per_seed)
    feed = SeedFeed(path, add_seeds=admitted.add, frontier_free=free, wake=admitted.wake, clock=clock)
    await feed.run()
    sizes = admitted.batches
    assert sizes[0] == FIRST_BATCH and sum(sizes) == len(admitted.urls) == 20 * BATCH
    fits = int(max(MIN_BATCH, min(BATCH, seed_feed.BATCH_SECONDS / per_seed)))
    for size in sizes[1:-1]:  # the last batch is what the file had left
        assert size * per_seed <= max(seed_feed.BATCH_SECONDS, MIN_BATCH * per_seed) + 1e-9
        assert size >= min(fits, 2 * FIRST_BATCH) - 1
    assert max(sizes[1:-1]) >= fits - 1  # it grows to what the budget allows, up to BATCH


async def test_bad_lines_are_skipped_counted_and_logged_up_to_a_bound(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "seeds.txt"
    body = [b"# a comment", b"", b"  http://ok1.test/  ", b"http://long.test/" + b"x" * (3 * MAX_LINE),
            b"\xff\xfe not utf-8", b"ftp://not-http.test/", b"http://ok2.test/"]
    body += [b"mailto:x%d@y.test" % i for i in range(LOGGED + 5)]
    path.write_bytes(b"\n".join(body) + b"\nhttp://ok3.test/")  # the last line without its newline
    admitted = Admitted()
    feed = SeedFeed(path, add_seeds=admitted.add, frontier_free=free, wake=admitted.wake)
    with caplog.at_level(logging.WARNING, logger="polecat"):
        await feed.run()
    assert admitted.urls == ["http://ok1.test/", "http://ok2.test/", "http://ok3.test/"]
    assert feed.skipped == 3 + LOGGED + 5
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"longer than {MAX_LINE} bytes" in m for m in messages)
    assert any("not UTF-8" in m for m in messages) and any("not an http(s) URL" in m for m in messages)
    assert len(messages) == LOGGED + 1 and "counted, not logged" in messages[-1]


async def test_an_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    feed = SeedFeed(tmp_path / "gone.txt", add_seeds=Admitted().add, frontier_free=free, wake=lambda: None)
    with pytest.raises(ConfigError, match=r"gone\.txt"):
        await feed.run()
    assert not feed.running


async def test_a_crawl_from_a_streamed_file_with_bad_lines_covers_every_host(tmp_path: Path) -> None:
    hosts = 40
    with BreadthWeb(hosts, min_interval=1 / 50) as web:
        seeds = tmp_path / "seeds.txt"
        lines = [f"{url}\n" for url in web.seeds()]
        lines[5:5] = ["# hosts\n", "not a url\n", "x" * (MAX_LINE + 10) + "\n"]
        seeds.write_text("".join(lines))
        cfg = Config(
            data_dir=tmp_path / "data",
            scope=ScopeConfig(seeds_file=seeds),
            politeness=PolitenessConfig(rate=50.0),
            fetch=FetchConfig(user_agent="polecat-test (+http://127.0.0.1/)"),
            dns=DnsConfig(nameservers=(web.dns.address,), allow_private=True),
        )
        async with Crawler(cfg) as crawler:
            stats = await crawler.run()
        server = web.stats()
    assert server.complete_hosts == hosts and server.violations == 0
    assert stats.ended.startswith("queue empty"), stats.ended


async def test_a_file_of_bad_lines_still_gives_the_loop_its_turns(tmp_path: Path) -> None:
    # Rule 6: skipped lines count too; before it, a file of nothing but bad lines was read through on the
    # loop without a single turn for the leases.
    path = tmp_path / "seeds.txt"
    path.write_bytes(b"\xff\n" * (10 * BATCH))
    admitted = Admitted()
    async with LoopTurns() as loop:
        await SeedFeed(path, add_seeds=admitted.add, frontier_free=free, wake=admitted.wake).run()
    assert loop.turns >= 9 and not admitted.urls


async def test_a_line_without_end_stops_the_feed_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "seeds.txt"
    path.write_bytes(b"http://a.test/\n" + b"x" * (GIVE_UP + MAX_LINE))
    admitted = Admitted()
    feed = SeedFeed(path, add_seeds=admitted.add, frontier_free=free, wake=admitted.wake)
    with pytest.raises(ConfigError, match=f"line 2 runs past {GIVE_UP} bytes"):
        await feed.run()
    assert not feed.running and not admitted.urls  # the node stops on it (crawler._feed_done): no half batch
