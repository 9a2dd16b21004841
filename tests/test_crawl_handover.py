"""A crawl moves between data dirs by slice bundle and finishes there (real servers, server-side checks)."""

from __future__ import annotations

import asyncio
import io
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from polecat import Crawler
from polecat.frontier.bundle import SliceBundle
from polecat.frontier.opener import open_frontier
from polecat.frontier.slices import SLICES
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests
from tests.frontier_helpers import queued_urls_in

RATE = 10.0


async def crawl(cfg: object) -> None:
    async with Crawler(cfg) as crawler:  # type: ignore[arg-type]
        await crawler.run()


def test_export_adopt_round_trip_finishes_on_b(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=6, pages_per_host=25, seed=5))
    cfg_a = crawl_config(web, tmp_path / "a", politeness={"rate": RATE}, scope={"max_pages": 40})
    asyncio.run(crawl(cfg_a))
    fetched_on_a = Counter(page_requests(web))
    assert sum(fetched_on_a.values()) == 40

    a = open_frontier(cfg_a, time.time())
    queued_on_a = a.frontier.queued
    waiting = set(queued_urls_in(a.db.txn.cursor(db=a.db.hosts), a.db.txn.cursor(db=a.db.queue)))
    assert len(waiting) == queued_on_a > 0
    raw = a.frontier.export_slices(range(SLICES), time.time()).to_bytes()
    a.close()

    cfg_b = replace(cfg_a, data_dir=tmp_path / "b", scope=replace(cfg_a.scope, seeds=(), max_pages=0))
    b = open_frontier(cfg_b, time.time())
    report = b.db.applied(b.frontier.adopt(SliceBundle.read(io.BytesIO(raw)), time.time()))
    assert report.queued == queued_on_a and report.duplicates == 0
    b.commit()
    b.close()

    asyncio.run(crawl(cfg_b))
    pages = Counter(page_requests(web))
    assert max(pages.values()) == 1, [u for u, n in pages.items() if n > 1]  # nothing fetched twice
    b = open_frontier(cfg_b, time.time())
    assert b.frontier.queued == 0
    for url in waiting:  # nothing lost: every URL A had queued was finished on B
        rec = b.frontier.url_record(url)
        assert rec is not None and (url in pages or rec.outcome == "skipped"), (url, rec)
    b.close()
    robots = Counter(r.host for r in web.log if r.target == "/robots.txt")
    assert max(robots.values()) == 1  # B kept A's robots.txt answers
    assert politeness_violations(web.log, web.min_intervals(RATE)) == []
