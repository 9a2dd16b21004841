"""Refresh that learns from the first visit (issue 37), end to end with ``polecat crawl`` on a loopback
news site (polecat/testing/newsweb.py): a page that changes every few seconds is refetched within a few
``--refresh`` runs of the first crawl, a page that never changes is not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from polecat.testing.newsweb import NewsWeb

RUNS = 4


def polecat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=120)


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
