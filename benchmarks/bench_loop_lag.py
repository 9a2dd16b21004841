"""Event-loop lag of a node during a crawl: how late the loop runs a 1 ms timer, sampled all along.

    python -m benchmarks.bench_loop_lag --size small --max-pages 4000

Serves ``--size``'s benchmark web (benchmarks/server.py, a separate process), crawls it with an
in-process :class:`polecat.Crawler` (the settings ``benchmarks.compare`` gives polecat) and, in the same
loop, a probe that sleeps 1 ms and records how much later than asked it woke up. Prints the lag's
percentiles and maximum, the share of samples over 5 ms, and the crawl's pages/s. Any stall of the loop
(a checkpoint's fsync on the loop, a long parse) shows up as lag.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import uvloop

from benchmarks.compare import _free_port
from benchmarks.server import StaticServer, render_site
from benchmarks.sizes import SIZES
from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.testing.dns import LocalDnsServer
from polecat.testing.sitegen import Site

PROBE = 0.001


async def probe(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        asked = time.perf_counter()  # uvloop's loop.time() has 1 ms resolution: too coarse here
        await asyncio.sleep(PROBE)
        samples.append(time.perf_counter() - asked - PROBE)


async def crawl(cfg_map: dict[str, object]) -> tuple[list[float], int, float]:
    samples: list[float] = []
    stop = asyncio.Event()
    async with Crawler(config_from_mapping(cfg_map)) as crawler:
        task = asyncio.create_task(probe(samples, stop))
        t0 = time.monotonic()
        stats = await crawler.run()
        wall = time.monotonic() - t0
        stop.set()
        await task
    return samples, stats.fetches, wall


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--max-pages", type=int, default=4000)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    size = SIZES[args.size]
    out = args.dir or Path(tempfile.mkdtemp(prefix="polecat-bench-lag-"))
    addresses = [f"127.0.0.{i + 1}" for i in range(8)]
    port = _free_port(addresses)
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
                "politeness": {"rate": size.rate},
                "fetch": {"concurrency": size.concurrency},
                "dns": {"nameservers": [dns.address], "allow_private": True},
            }
            samples, pages, wall = uvloop.run(crawl(cfg))
        finally:
            server.stop()
    samples.sort()
    print(f"{pages} pages in {wall:.1f}s = {pages / wall:.0f} pages/s; {len(samples)} lag samples")
    ms = {q: pct(samples, q) * 1e3 for q in (0.5, 0.9, 0.99, 0.999)}
    print(f"loop lag ms: p50 {ms[0.5]:.2f}, p90 {ms[0.9]:.2f}, p99 {ms[0.99]:.2f}, p99.9 {ms[0.999]:.2f}, "
          f"max {samples[-1] * 1e3:.1f}; over 5 ms: {sum(s > 0.005 for s in samples) / len(samples):.2%}")


if __name__ == "__main__":
    main()
