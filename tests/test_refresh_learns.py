"""Refresh that learns from the first visit (issue 37), end to end with ``polecat crawl`` on a loopback
news site (polecat/testing/newsweb.py): a page that changes every few seconds is refetched within a few
``--refresh`` runs of the first crawl, a page that never changes is not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from polecat.testing.newsweb import NewsWeb

RUNS = 4


def polecat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_news_is_refetched_within_a_few_refresh_runs_and_static_is_not(tmp_path: Path) -> None:
    with NewsWeb(news_period=3.0) as site:
        common = ["--data", str(tmp_path / "data"), "--allow-private", "--rate", "20", "-q"]
        first = polecat("crawl", site.origin + "/", *common)
        assert first.returncode == 0, first.stderr
        assert [r.status for r in site.requests("/news")] == [200]
        assert [r.status for r in site.requests("/static")] == [200]
        # As the user did: refresh runs a few seconds apart, with a 2 s floor.
        refetched_by = None
        for run in range(1, RUNS + 1):
            time.sleep(3.5)
            again = polecat("crawl", *common, "--refresh", "--refresh-min", "2")
            assert again.returncode == 0, again.stderr
            if refetched_by is None and len(site.requests("/news")) > 1:
                refetched_by = run
        news = site.requests("/news")
        assert refetched_by is not None and refetched_by <= 2, [(r.status, r.at) for r in news]
        # Each refetch found a new edition (the interval follows the 3 s changes: no 304 storm).
        assert len(news) >= RUNS - 1 and news[1].status == 200
        assert len(site.requests("/static")) == 1  # a year-old Last-Modified: weeks away


@pytest.mark.slow
def test_a_linked_feed_is_polled_on_its_item_gap_and_its_new_items_fetched(tmp_path: Path) -> None:
    with NewsWeb(news_period=60.0, item_period=3.0) as site:
        common = ["--data", str(tmp_path / "data"), "--allow-private", "--rate", "20", "-q"]
        time.sleep(3.5)  # two items dated 3 s apart: the feed's gap is known at its first fetch
        first = polecat("crawl", site.origin + "/", *common)
        assert first.returncode == 0, first.stderr
        assert [r.status for r in site.requests("/feed.xml")] == [200]  # found by <link rel=alternate>
        assert {f"/item/{n}" for n in range(site.items_so_far(site.requests("/feed.xml")[0].at))} <= {
            r.path for r in site.log}
        starts = []
        for _ in range(RUNS):
            time.sleep(3.5)
            starts.append(time.time())
            again = polecat("crawl", *common, "--refresh", "--refresh-min", "2")
            assert again.returncode == 0, again.stderr
        feed = site.requests("/feed.xml")
        assert len(feed) >= RUNS - 1, [(r.status, r.at) for r in feed]  # polled about every item gap
        # Every item published a feed interval (3 s) and more before the last run was fetched by it.
        fetched = {r.path for r in site.log}
        due = site.items_so_far(starts[-1] - 3.0)
        assert {f"/item/{n}" for n in range(due)} <= fetched, sorted(fetched)


def test_a_listed_feed_is_crawled_without_seeds_and_a_bad_one_is_named(tmp_path: Path) -> None:
    with NewsWeb(item_period=600.0) as site:
        common = ["--data", str(tmp_path / "data"), "--allow-private", "--rate", "20", "-q"]
        run = polecat("crawl", "--feed", site.origin + "/feed.xml", *common)
        assert run.returncode == 0, run.stderr
        assert [r.path for r in site.log if r.path != "/robots.txt"] == ["/feed.xml", "/item/0"]
        # Its one item is seconds old, so the feed is polled again soon: a conditional GET, 304.
        time.sleep(3.0)
        again = polecat("crawl", *common, "--refresh", "--refresh-min", "2")
        assert again.returncode == 0, again.stderr
        assert [r.status for r in site.requests("/feed.xml")] == [200, 304]
    bad = polecat("crawl", "--feed", "ftp://a.test/feed", "--data", str(tmp_path / "other"))
    assert bad.returncode != 0 and "--feed (refresh.feeds[0])" in bad.stderr, bad.stderr
