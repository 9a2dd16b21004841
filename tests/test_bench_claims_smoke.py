"""Smoke test of benchmarks/bench_claims.py: one process and two workers crawl a tiny mirrored web; what
becomes of every page URL after a stop (``account_pages``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from benchmarks.bench_claims import PageAccount, account_pages, main
from polecat import Crawler
from polecat.config import Config
from polecat.frontier.opener import open_frontier
from polecat.frontier.status import read_queued
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests, stored_records
from tests.frontier_helpers import queued_urls_in


async def crawl(cfg: Config) -> None:
    async with Crawler(cfg) as crawler:
        await crawler.run()


def test_bench_claims_measures_the_collapse_of_one_process_and_of_workers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hosts", "4", "--pages-per-host", "10", "--rate", "50", "--workers", "2",
                 "--out", str(tmp_path), "--timeout", "120"]) == 0
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| 1 process") or line.startswith("| 2 workers")]
    assert len(rows) == 2
    assert rows[0][1] == rows[1][1] and int(rows[0][1]) > 0  # the same pages
    assert all(0 < float(r[4]) < 1.5 and int(r[6]) > 0 for r in rows)  # mirrors became revisits


def test_account_pages_tells_a_request_cut_at_the_stop_from_a_lost_page(
        test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=3, pages_per_host=12, seed=5))
    cfg = crawl_config(web, tmp_path / "d", politeness={"rate": 50.0}, scope={"max_pages": 10})
    asyncio.run(crawl(cfg))
    asked = page_requests(web)
    stored = {r.url for r in stored_records(tmp_path / "d")}
    frontier = open_frontier(cfg, time.time())
    queued = set(queued_urls_in(frontier.db.txn.cursor(db=frontier.db.hosts),
                                frontier.db.txn.cursor(db=frontier.db.queue)))
    frontier.close()
    assert set(read_queued(tmp_path / "d" / "frontier")) == queued and len(queued) > 2
    assert set(asked) == stored and len(stored) == 10
    cut, *unasked = sorted(queued)
    gone = f"http://{web.site.hosts[0]}:{web.port}/never-stored.html"
    pages = account_pages([*asked, cut, gone], [tmp_path / "d"])
    assert pages == PageAccount(stored=10, cut=(cut,), unasked=tuple(unasked), failed=(), lost=(gone,))
