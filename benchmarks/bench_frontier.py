"""Frontier alone (no network): push and pop rates, and resident memory, at millions of URLs.

    python -m benchmarks.bench_frontier --urls 10000000 --hosts 100000

Pushes ``--urls`` canonical URLs spread over ``--hosts`` hosts (committing every 2,000 operations, as
the node does), then leases and completes ``--pops`` of them with a fake clock, and reports the rates
and the process's resident memory after each phase. The point: memory grows with hosts, not with
queued URLs (LMDB holds those, on disk).
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from pathlib import Path

from polecat.config import Config, FrontierConfig, PolitenessConfig, ScopeConfig
from polecat.dedup.seen import SeenSet
from polecat.fetch.robots import RobotsPolicy
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease


def rss_mb(field: str = "RssAnon") -> float:
    """Resident memory in MB. ``RssAnon`` is the process's own heap; LMDB's memory-mapped pages show up
    in ``RssFile`` (page cache the kernel can drop), so the anonymous part is what grows with state."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory() -> str:
    return f"RSS anon {rss_mb():.0f} MB, file-backed (LMDB map) {rss_mb('RssFile'):.0f} MB"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--pops", type=int, default=200_000)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="polecat-bench-frontier-"))
    cfg = Config(
        scope=ScopeConfig(mode="any", max_queue_per_host=10**9, max_pages_per_host=10**9),
        politeness=PolitenessConfig(rate=1000.0),
        frontier=FrontierConfig(map_size=256 * 1024**3),
    )
    db = FrontierDB(workdir / "frontier", map_size=cfg.frontier.map_size, params={})
    seen = SeenSet.restore(db.env, db.seen, workdir / "seen.bloom", db.seq, args.urls, 0.01)
    robots = RobotsPolicy(cfg.robots, cfg.fetch.user_agent)
    frontier = Frontier(db, cfg, robots, seen, 0.0)
    rng = random.Random(1)
    print(f"workdir {workdir}; start: {memory()}")

    t0 = time.perf_counter()
    for i in range(args.urls):
        host = rng.randrange(args.hosts)
        frontier.add(f"http://h{host}.bench.test/section/{i % 97}/page-{i}.html", 1 + i % 7, 0.5, 0.0)
        if frontier.pending_ops >= cfg.frontier.commit_ops:
            frontier.commit()
    frontier.commit()
    push_s = time.perf_counter() - t0
    print(
        f"push: {args.urls:,} URLs over {args.hosts:,} hosts in {push_s:.1f}s = "
        f"{args.urls / push_s:,.0f} URLs/s; {memory()}; queued {frontier.queued:,}"
    )

    # Robots answered for every host up front (allow-all), as after a warm-up.
    for h in range(args.hosts):
        robots.record_response(f"http://h{h}.bench.test", 404, b"", 0.0)
    now = 1.0
    done = 0
    t0 = time.perf_counter()
    while done < args.pops:
        got = frontier.lease(now)
        if not isinstance(got, Lease):
            now += 0.001
            continue
        frontier.complete(got, Completion(Attempt(now, now, now, 200), "fetched", "200"), now)
        done += got.kind == "page"
        if frontier.pending_ops >= cfg.frontier.commit_ops:
            frontier.commit()
    frontier.commit()
    pop_s = time.perf_counter() - t0
    print(
        f"pop+complete: {args.pops:,} leases in {pop_s:.1f}s = {args.pops / pop_s:,.0f}/s; "
        f"{memory()}; queued {frontier.queued:,}"
    )
    size = sum(p.stat().st_size for p in (workdir / "frontier").iterdir())
    print(f"LMDB on disk: {size / 1024**2:,.0f} MB ({size / max(1, args.urls):.0f} B/URL)")
    db.close()


if __name__ == "__main__":
    main()
