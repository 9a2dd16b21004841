"""What archive-grade WARC costs: store bytes and CPU with and without ``request`` records.

    python -m benchmarks.bench_archive --hosts 4 --pages 250

Crawls the loopback test web (polecat/testing) twice with the same settings except
``store.request_records``, and prints pages fetched, store bytes (compressed segments) per page and the
process CPU of each crawl. Every segment also starts with a ``warcinfo`` record either way (a few
hundred bytes per segment).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
from pathlib import Path

from polecat import Crawler, config_from_mapping
from polecat.node.stats import CrawlStats
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb


async def _crawl(web: TestWeb, data: Path, requests: bool) -> CrawlStats:
    cfg = config_from_mapping({
        "data_dir": str(data), "scope": {"seeds": web.seeds},
        "politeness": {"rate": 200.0}, "fetch": {"user_agent": "polecat-bench/1 (+http://bench.invalid/)"},
        "dns": {"nameservers": [web.dns_address], "allow_private": True},
        "store": {"request_records": requests},
    })
    async with Crawler(cfg) as crawler:
        return await crawler.run()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> dict[bool, tuple[int, int, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--pages", type=int, default=250, help="pages per host")
    args = ap.parse_args(argv)
    web = TestWeb(SiteSpec(hosts=args.hosts, pages_per_host=args.pages, seed=11)).start()
    out: dict[bool, tuple[int, int, float]] = {}
    try:
        print("| request records | pages | store bytes | bytes/page | process CPU s |")
        print("|---|---|---|---|---|")
        for requests in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                before = _cpu()
                stats = asyncio.run(_crawl(web, Path(tmp) / "d", requests))
                cpu = _cpu() - before
            out[requests] = (stats.answered, stats.bytes_stored, cpu)
            per_page = stats.bytes_stored / max(1, stats.answered)
            print(f"| {'on' if requests else 'off'} | {stats.answered} | {stats.bytes_stored:,} | "
                  f"{per_page:,.0f} | {cpu:.2f} |")
    finally:
        web.stop()
    return out


if __name__ == "__main__":
    main()
