"""Worst-case cost of spider traps and link amplifiers for a crawl (issue 10, frontier/traps.py and
frontier/budgets.py), on loopback servers only.

    python -m benchmarks.bench_traps traps [--seconds 60]
    python -m benchmarks.bench_traps amplify [--links 20000] [--seconds 120]

``traps``: crawls the trap web (polecat/testing/trapweb.py: an infinite calendar, ``?page=N+1``,
session ids, repeated path segments, a soft-404 site and a 30-host redirect chain) with ``--scope any``
at 200 req/s per host, stopping after ``--seconds``, and prints the page requests each trap cost and
the trap rules that acted. ``amplify``: one page linking ``--links`` distinct host names that the local
DNS server does not know, crawled with ``--scope any --max-pages 2`` (give-up after 3 attempts, as
``polecat crawl`` sets it); prints DNS queries, names asked, requests, wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.testing.sitegen import SiteSpec
from polecat.testing.trapweb import TRAP_HOSTS, TrapWeb
from polecat.testing.web import TestWeb


async def _crawl(cfg: Any, seconds: float) -> tuple[str, Any]:
    async with Crawler(cfg) as crawler:
        run = asyncio.ensure_future(crawler.run())
        done, _ = await asyncio.wait([run], timeout=seconds)
        if not done:
            crawler.stop()
        stats = await run
        return ("ended by itself" if done else f"stopped after {seconds:g} s"), stats


async def traps(seconds: float, data: Path) -> None:
    async with TrapWeb(chain=30) as web:
        cfg = config_from_mapping({
            "data_dir": str(data), "scope": {"seeds": web.seeds, "mode": "any"},
            "politeness": {"rate": 200.0}, "fetch": {"concurrency": 64},
            "dns": {"nameservers": [web.dns.address], "allow_private": True},
        })
        started = time.monotonic()
        how, _ = await _crawl(cfg, seconds)
        print(f"{how}, {time.monotonic() - started:.1f} s")
        chain = sum(web.page_requests(f"r{i}.test") for i in range(31))
        for host in TRAP_HOSTS:
            print(f"  {host:14s} {web.page_requests(host):6d} page requests")
        print(f"  {'r0..r30.test':14s} {chain:6d} page requests")


def amplify(links: int, seconds: float, data: Path) -> None:
    with TestWeb(SiteSpec(hosts=1, pages_per_host=5, seed=1)).start() as web:
        hrefs = "".join(f'<a href="http://x{i}.nowhere.test/">x</a>' for i in range(links))
        web.respond(web.site.hosts[0], "/", 200, headers={"Content-Type": "text/html"},
                    body=f"<html><body>{hrefs}</body></html>".encode())
        cfg = config_from_mapping({
            "data_dir": str(data), "scope": {"seeds": web.seeds[:1], "mode": "any", "max_pages": 2},
            "politeness": {"rate": 5.0, "give_up_after": 3}, "fetch": {"concurrency": 64},
            "dns": {"nameservers": [web.dns_address], "allow_private": True, "timeout": 0.5},
        })
        started = time.monotonic()
        how, stats = asyncio.run(_crawl(cfg, seconds))
        queries = web.dns.queries
        robots = sum(1 for r in web.log if r.target == "/robots.txt")
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(f"{how} ({stats.ended}), {time.monotonic() - started:.1f} s: {sum(queries.values())} DNS "
              f"queries for {len(queries)} names, {robots} robots.txt and {len(web.log) - robots} page "
              f"requests, {stats.hosts} hosts known, peak RSS {peak_mb} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("traps")
    p.add_argument("--seconds", type=float, default=60.0)
    p = sub.add_parser("amplify")
    p.add_argument("--links", type=int, default=20_000)
    p.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polecat-bench-traps-") as tmp:
        if args.what == "traps":
            asyncio.run(traps(args.seconds, Path(tmp)))
        else:
            amplify(args.links, args.seconds, Path(tmp))


if __name__ == "__main__":
    main()
