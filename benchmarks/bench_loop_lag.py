"""Event-loop lag of a node during a crawl: how late the loop runs a 1 ms timer, sampled all along.

    python -m benchmarks.bench_loop_lag --size small --max-pages 1500 --rate 0.5

Serves ``--size``'s benchmark web (benchmarks/server.py, a separate process), crawls it with an
in-process :class:`polecat.Crawler` (the settings ``benchmarks.compare`` gives polecat) and, in the same
loop, a probe that sleeps 1 ms and records how much later than asked it woke up. Prints the lag's
percentiles and maximum, the share of samples over 5 ms, and the crawl's pages/s. Any stall of the loop
(a checkpoint's fsync on the loop, a long parse) shows up as lag; a lower ``--rate`` keeps the loop from
being saturated by page work, so that stalls stand out. Every checkpoint's store flush and frontier
commit are timed too, split by the thread they ran on (on the loop's thread they stall it; a commit the
loop waits for, at start and stop, counts on the loop and again on the frontier's writer thread).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.server import StaticServer, render_site
from benchmarks.sizes import SIZES
from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.testing.dns import LocalDnsServer
from polecat.testing.sitegen import Site
from polecat.testing.siteserve import reserve_port

PROBE = 0.001


async def probe(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        asked = time.perf_counter()  # uvloop's loop.time() has 1 ms resolution: too coarse here
        await asyncio.sleep(PROBE)
        samples.append(time.perf_counter() - asked - PROBE)


def timed(fn: Callable[..., Any], on_loop: list[float], off_loop: list[float]) -> Callable[..., Any]:
    """``fn`` that records its duration, split by whether it ran on the loop's thread."""
    loop_thread = threading.get_ident()

    def run(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            (on_loop if threading.get_ident() == loop_thread else off_loop).append(time.perf_counter() - t0)

    return run


async def crawl(cfg_map: dict[str, object], stalls: dict[str, list[float]]) -> tuple[list[float], int, float]:
    samples: list[float] = []
    stop = asyncio.Event()
    async with Crawler(config_from_mapping(cfg_map)) as crawler:
        # Instance attributes shadow the methods: every checkpoint's flush and commit are timed.
        store: Any = crawler.store
        db: Any = crawler._db
        store.flush = timed(store.flush, stalls["flush on loop"], stalls["flush in thread"])
        # A commit that runs on (or waits on) the loop's thread; and, where there is one, the frontier
        # writer thread's own commit (polecat/frontier/db.py), which every commit now runs.
        db.commit = timed(db.commit, stalls["commit on loop"], stalls["commit in thread"])
        writer = getattr(db, "_writer", None)
        if writer is not None:
            writer._commit = timed(writer._commit, stalls["commit on loop"], stalls["commit in thread"])
        task = asyncio.create_task(probe(samples, stop))
        t0 = time.monotonic()
        stats = await crawler.run()
        wall = time.monotonic() - t0
        stop.set()
        await task
    return samples, stats.fetches, wall


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--max-pages", type=int, default=1500)
    ap.add_argument("--rate", type=float, default=None, help="per-host rate (default: the size's)")
    ap.add_argument("--concurrency", type=int, default=None, help="default: the size's")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args(argv)
    size = SIZES[args.size]
    out = args.dir or Path(tempfile.mkdtemp(prefix="polecat-bench-lag-"))
    addresses = [f"127.0.0.{i + 1}" for i in range(8)]
    port = reserve_port(addresses)
    site = Site(size.spec)
    render_site(site, port, out / "site")
    with LocalDnsServer() as dns:
        for i, host in enumerate(site.hosts):
            dns.add(host, [addresses[i % len(addresses)]])
        server = StaticServer(out / "site", port, len(addresses), 1, out / "server", None)
        server.start()
        try:
            cfg: dict[str, object] = {
                "data_dir": str(out / "data"),
                "scope": {"seeds": site.seeds(port), "mode": "any", "max_pages": args.max_pages},
                "politeness": {"rate": args.rate or size.rate},
                "fetch": {"concurrency": args.concurrency or size.concurrency},
                "dns": {"nameservers": [dns.address], "allow_private": True},
            }
            stalls: dict[str, list[float]] = {k: [] for k in ("flush on loop", "flush in thread",
                                                               "commit on loop", "commit in thread")}
            samples, pages, wall = uvloop.run(crawl(cfg, stalls))
        finally:
            server.stop()
    samples.sort()
    print(f"{pages} pages in {wall:.1f}s = {pages / wall:.0f} pages/s; {len(samples)} lag samples")
    ms = {q: pct(samples, q) * 1e3 for q in (0.5, 0.9, 0.99, 0.999)}
    print(f"loop lag ms: p50 {ms[0.5]:.2f}, p90 {ms[0.9]:.2f}, p99 {ms[0.99]:.2f}, p99.9 {ms[0.999]:.2f}, "
          f"max {samples[-1] * 1e3:.1f}; over 5 ms: {sum(s > 0.005 for s in samples) / len(samples):.2%}")
    for name, xs in stalls.items():
        if xs:
            xs.sort()
            print(f"{name}: {len(xs)} calls, ms p50 {pct(xs, 0.5) * 1e3:.2f}, p99 {pct(xs, 0.99) * 1e3:.2f}, "
                  f"max {xs[-1] * 1e3:.1f}, total {sum(xs):.2f}s")


if __name__ == "__main__":
    main()
