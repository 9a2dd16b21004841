"""End to end: one node crawls the multi-host loopback test web (real DNS server, real HTTP, LMDB)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from polecat import Crawler, Page
from polecat.errors import PolecatError
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import assert_store_reads_back, crawl_config, page_requests


@pytest.mark.slow
def test_crawl_multi_host_site_end_to_end(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=20, pages_per_host=50, seed=7, crawl_delays=(("h03.test", 0.25),)))
    cfg = crawl_config(web, tmp_path / "data")
    pages: list[Page] = []

    async def main() -> None:
        async with Crawler(cfg, on_page=pages.append) as crawler:
            stats = await crawler.run()
        assert stats.politeness_violations == 0
        assert stats.queued == 0

    asyncio.run(main())
    requested = page_requests(web)
    truth = web.ground_truth("host")
    counts = Counter(requested)
    assert set(counts) == truth, (len(set(counts) - truth), len(truth - set(counts)))
    assert max(counts.values()) == 1  # no URL fetched twice
    assert web.robots_violations() == []
    assert politeness_violations(web.log, web.min_intervals(cfg.politeness.rate)) == []
    robots = Counter(r.host for r in web.log if r.target == "/robots.txt")
    assert set(robots) == {f"h{i:02d}.test" for i in range(1, 21)} and max(robots.values()) == 1
    assert {p.url for p in pages} <= truth and len(pages) > 0.8 * len(truth)
    assert assert_store_reads_back(tmp_path / "data", cfg) > 0.8 * len(truth)


def test_key_by_ip_limits_hosts_sharing_a_server(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=4, pages_per_host=6, seed=2), addresses=1)  # every host on 127.0.0.1
    rate = 20.0
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": rate, "key_by_ip": True})

    async def main() -> None:
        async with Crawler(cfg) as crawler:
            await crawler.run()

    asyncio.run(main())
    assert set(page_requests(web)) == web.ground_truth("host")
    one_server = [replace(r, host="127.0.0.1") for r in web.log]
    assert politeness_violations(one_server, 1 / rate) == []


def test_redirects_go_through_the_frontier_bounded_and_loops_end(test_web: TestWebFactory,
                                                                 tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=2, seed=4))
    host = "h01.test"
    root = web.base_url(host)
    # A chain longer than max_redirects, a two-URL loop, and a cross-host redirect linked from the root.
    for i in range(6):
        web.redirect(host, f"/chain{i}", f"{root}/chain{i + 1}")
    web.redirect(host, "/loop-a", f"{root}/loop-b")
    web.redirect(host, "/loop-b", f"{root}/loop-a")
    body = f'<html><body><a href="/chain0">c</a><a href="/loop-a">l</a><a href="{root}/p">p</a></body></html>'
    web.respond(host, "/", 200, headers={"Content-Type": "text/html"}, body=body.encode())
    cfg = crawl_config(web, tmp_path / "data", scope={"seeds": [f"{root}/"], "mode": "host"},
                       fetch={"max_redirects": 3}, politeness={"rate": 20.0})

    async def main() -> None:
        async with Crawler(cfg) as crawler:
            stats = await crawler.run()
        assert dict(stats.errors).get("too_many_redirects") == 1

    asyncio.run(main())
    counts = Counter(r.target for r in web.log)
    assert [counts[f"/chain{i}"] for i in range(6)] == [1, 1, 1, 1, 0, 0]  # 3 hops followed, then stop
    assert counts["/loop-a"] == 1 and counts["/loop-b"] == 1  # the seen-set ends the loop
    assert politeness_violations(web.log, 1 / 20.0) == []


def test_library_block_and_throttle_persist(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=3, pages_per_host=5, seed=9))
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 20.0}, scope={"max_pages": 1})

    async def first() -> None:
        async with Crawler(cfg) as crawler:
            crawler.throttle("h02.test", 4.0)
            assert crawler.block("h03.test") == 1  # its seed was queued: recorded done, reason blocked
            await crawler.run()

    asyncio.run(first())
    web.clear_log()
    resumed = crawl_config(web, tmp_path / "data", politeness={"rate": 20.0})

    async def second() -> None:
        async with Crawler(resumed) as crawler:
            await crawler.run()

    asyncio.run(second())
    hosts = Counter(r.host for r in web.log)
    assert "h03.test" not in hosts and hosts["h02.test"] > 1
    assert politeness_violations([r for r in web.log if r.host == "h02.test"], 1 / 4.0) == []


def test_failing_checkpoint_stops_the_crawl_cleanly(test_web: TestWebFactory, tmp_path: Path) -> None:
    """A disk that fills up mid-crawl: the node stops with a clear error (no hang, no silent loss of
    durability), keeps what was committed, and a later run completes the crawl."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=20, seed=6))
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 20.0}, frontier={"commit_ms": 50.0})

    async def failing() -> None:
        async with Crawler(cfg) as crawler:
            flush = crawler._store.flush
            calls = 0

            def flaky_flush() -> None:
                nonlocal calls
                calls += 1
                if calls > 3:
                    raise OSError(28, "No space left on device")
                flush()

            crawler._store.flush = flaky_flush  # type: ignore[method-assign]
            with pytest.raises(PolecatError, match="No space left"):
                await asyncio.wait_for(crawler.run(), 60)

    asyncio.run(failing())
    first = len(page_requests(web))

    async def resume() -> None:
        async with Crawler(cfg) as crawler:
            await crawler.run()

    asyncio.run(resume())
    assert set(page_requests(web)) == web.ground_truth("host")
    assert 0 < first < len(web.ground_truth("host"))
