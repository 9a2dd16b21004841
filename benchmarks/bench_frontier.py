"""Frontier alone (no network): push and pop rates, and resident memory, at millions of URLs.

    python -m benchmarks.bench_frontier --urls 10000000 --hosts 100000
    python -m benchmarks.bench_frontier --admit 2000 [--links 40 --rounds 5]

Pushes ``--urls`` canonical URLs spread over ``--hosts`` hosts (committing every 2,000 operations, as
the node does), then leases and completes ``--pops`` of them with a fake clock, and reports the rates
and the process's resident memory after each phase. The point: memory grows with hosts, not with
queued URLs (LMDB holds those, on disk).

``--admit PAGES`` measures routing before dedup instead: the outlinks of PAGES pages (``--links`` each,
new URLs over ``--hosts`` hosts) admitted three ways on three fresh frontiers, in alternating rounds:
``add_many`` (no routing), ``admit`` without a ring, and ``admit`` under a one-member Ring. It prints the
CPU time (``time.process_time``) per page of each, so load from other processes does not count.
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from pathlib import Path

from polecat.cluster.ring import Ring
from polecat.config import Config, FrontierConfig, PolitenessConfig, ScopeConfig
from polecat.dedup.seen import SeenSet
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.routing import Routing


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


CFG = Config(
    scope=ScopeConfig(mode="any", max_queue_per_host=10**9, max_pages_per_host=10**9),
    politeness=PolitenessConfig(rate=1000.0),
    frontier=FrontierConfig(map_size=256 * 1024**3),
)


def open_frontier(workdir: Path, urls: int) -> tuple[FrontierDB, RobotsPolicy, Frontier]:
    db = FrontierDB(workdir / "frontier", map_size=CFG.frontier.map_size, params={})
    seen = SeenSet.restore(db.env, db.seen, workdir / "seen.bloom", db.seq, urls, 0.01)
    robots = RobotsPolicy(CFG.robots, CFG.fetch.user_agent)
    return db, robots, Frontier(db, CFG, robots, seen, 0.0)


def admit_cost(workdir: Path, args: argparse.Namespace) -> None:
    """CPU per page of admitting one page's outlinks, three ways (see the module docstring)."""
    total = args.admit * args.rounds
    names = ["add_many", "admit", "ring1"]
    ways = {name: open_frontier(workdir / name, total * args.links) for name in names}
    ways["ring1"][2].set_routing(Routing(Ring(["solo"]), "solo"))
    cpu = dict.fromkeys(ways, 0.0)
    rng = random.Random(1)
    page = 0
    for r in range(args.rounds):
        pages = [[f"http://h{rng.randrange(args.hosts)}.bench.test/p/{page + p}/{k}.html"
                  for k in range(args.links)] for p in range(args.admit)]
        page += args.admit
        for name in names[r % 3:] + names[: r % 3]:  # each way goes first in turn
            db, _, frontier = ways[name]
            add = frontier.add_many if name == "add_many" else frontier.admit
            t0 = time.process_time()
            for links in pages:
                db.apply(add(links, 1, 0.1, 0.0).writes)
                if frontier.pending_ops >= CFG.frontier.commit_ops:
                    frontier.commit()
            frontier.commit()
            cpu[name] += time.process_time() - t0
    for name, (db, _, frontier) in ways.items():
        print(f"{name:9s} {cpu[name] / total * 1e6:8.1f} us CPU/page ({args.links} links), "
              f"queued {frontier.queued:,}")
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--pops", type=int, default=200_000)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--admit", type=int, default=0, metavar="PAGES")
    ap.add_argument("--links", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="polecat-bench-frontier-"))
    if args.admit:
        admit_cost(workdir, args)
        return
    db, robots, frontier = open_frontier(workdir, args.urls)
    rng = random.Random(1)
    print(f"workdir {workdir}; start: {memory()}")

    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(args.urls):
        host = rng.randrange(args.hosts)
        url = f"http://h{host}.bench.test/section/{i % 97}/page-{i}.html"
        db.applied(frontier.add(url, 1 + i % 7, 0.5, 0.0))
        if frontier.pending_ops >= CFG.frontier.commit_ops:
            frontier.commit()
    frontier.commit()
    push_s, push_cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"push: {args.urls:,} URLs over {args.hosts:,} hosts in {push_s:.1f}s = "
        f"{args.urls / push_s:,.0f} URLs/s, {push_cpu / args.urls * 1e6:.1f} us CPU/URL; {memory()}; "
        f"queued {frontier.queued:,}"
    )

    # Robots answered for every host up front (allow-all), as after a warm-up.
    for h in range(args.hosts):
        robots.record_response(f"http://h{h}.bench.test", 404, b"", 0.0)
    now = 1.0
    done = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while done < args.pops:
        got = db.applied(frontier.lease(now))
        if not isinstance(got, Lease):
            now += 0.001
            continue
        db.apply(frontier.complete(got, Completion(Attempt(now, now, now, 200), "fetched", "200"), now))
        done += got.kind == "page"
        if frontier.pending_ops >= CFG.frontier.commit_ops:
            frontier.commit()
    frontier.commit()
    pop_s, pop_cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"pop+complete: {args.pops:,} leases in {pop_s:.1f}s = {args.pops / pop_s:,.0f}/s, "
        f"{pop_cpu / args.pops * 1e6:.1f} us CPU/lease; "
        f"{memory()}; queued {frontier.queued:,}"
    )
    size = sum(p.stat().st_size for p in (workdir / "frontier").iterdir())
    print(f"LMDB on disk: {size / 1024**2:,.0f} MB ({size / max(1, args.urls):.0f} B/URL)")
    db.close()


if __name__ == "__main__":
    main()
