"""Refresh that learns from the first visit (issue 37), shown as a user would: one crawl of the loopback
news site, then ``polecat crawl --refresh --refresh-min 2`` every few seconds.

    python -m benchmarks.bench_news --seconds 75

The site (polecat/testing/newsweb.py): ``/news`` changes every 3 s (ETag and Last-Modified follow),
``/static`` never changes (Last-Modified a year old), ``/feed.xml`` (linked from ``/`` by ``<link
rel="alternate">``) gets an item every 3 s. The first crawl uses the defaults (``refresh.min_interval``
1 h); the refresh runs follow one another ``--gap`` seconds apart for ``--seconds``. Figures: the fetches
of ``/news`` and ``/static`` after the first crawl and their answers, the feed's polls, and for the items
published after the first crawl the delay from publication to fetch.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from polecat.testing.newsweb import NewsWeb


@dataclass(frozen=True)
class NewsFigures:
    runs: int
    news: Counter[int]
    """Answers to the fetches of /news after the first crawl, by status."""
    static: Counter[int]
    feed_polls: Counter[int]
    item_delays: list[float]
    """Seconds from an item's publication to its fetch, for the items published after the first crawl
    and before the last refresh run started."""
    items_missed: int


def polecat(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"polecat {' '.join(args)} failed: {done.stderr[-2000:]}")


def run(seconds: float, gap: float, data: Path) -> NewsFigures:
    with NewsWeb(news_period=3.0, item_period=3.0) as site:
        common = ["--data", str(data), "--allow-private", "--rate", "20", "-q"]
        polecat("crawl", site.origin + "/", *common)
        first_done = time.time()
        runs, last_start = 0, first_done
        while time.time() - first_done < seconds:
            time.sleep(gap)
            last_start = time.time()
            polecat("crawl", *common, "--refresh", "--refresh-min", "2")
            runs += 1
        log = site.log
    after = [r for r in log if r.at > first_done]
    fetched_at: dict[str, float] = {}
    for r in log:
        fetched_at.setdefault(r.path, r.at)
    first_new = site.items_so_far(first_done)
    published = [(n, site.started + n * site.item_period)
                 for n in range(first_new, site.items_so_far(last_start))]
    delays = [fetched_at[f"/item/{n}"] - at for n, at in published if f"/item/{n}" in fetched_at]
    return NewsFigures(runs, Counter(r.status for r in after if r.path == "/news"),
                       Counter(r.status for r in after if r.path == "/static"),
                       Counter(r.status for r in after if r.path == "/feed.xml"), delays,
                       len(published) - len(delays))


def main(argv: list[str] | None = None) -> NewsFigures:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=75.0)
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between two refresh runs")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        f = run(args.seconds, args.gap, Path(tmp) / "data")
    print(f"{f.runs} refresh runs over {args.seconds:g} s, {args.gap:g} s apart")
    print(f"/news fetched again {sum(f.news.values())} times: {dict(sorted(f.news.items()))}")
    print(f"/static fetched again {sum(f.static.values())} times: {dict(sorted(f.static.items()))}")
    print(f"/feed.xml polled {sum(f.feed_polls.values())} times: {dict(sorted(f.feed_polls.items()))}")
    if f.item_delays:
        print(f"new items fetched: {len(f.item_delays)}, missed {f.items_missed}; delay from publication "
              f"median {statistics.median(f.item_delays):.1f} s, max {max(f.item_delays):.1f} s")
    return f


if __name__ == "__main__":
    main()
