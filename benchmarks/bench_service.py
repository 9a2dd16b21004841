"""What the node's observers cost the event loop: one ``/metrics`` scrape, one ``/admin/crawl/status``
and one host's status, on a frontier holding N hosts (each with queued URLs), in CPU ms per call.

Every one of them runs on the event loop between awaits, so its cost is loop time the crawl loses (and,
beyond ``WatchdogSec``/2, a missed watchdog ping). No network: the node is opened, never run.

    python -m benchmarks.bench_service --hosts 10000 100000
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from collections.abc import Callable

from prometheus_client import generate_latest

from polecat.config import config_from_mapping
from polecat.node.crawler import Crawler
from polecat.service.activity import Activity
from polecat.service.metrics import LoopLag, NodeMetrics
from polecat.service.status_data import host_detail, totals


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per_call_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    start = cpu()
    for _ in range(repeat):
        fn()
    return (cpu() - start) / repeat * 1000


async def measure(hosts: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data:
        cfg = config_from_mapping({"data_dir": data, "dedup": {"expected_urls": max(1000, hosts * 4)}})
        async with Crawler(cfg) as crawler:
            now = time.time()
            for i in range(hosts):
                for path in ("", "a", "b"):
                    crawler.add_seed(f"http://h{i}.example/{path}", importance=1.0 / (1 + i % 7), now=now)
            await crawler.commit()
            start = cpu()
            crawler.frontier.queue_bands()  # the one-off count a node pays at its first scrape
            first_bands_ms = (cpu() - start) * 1000
            activity = Activity()
            metrics = NodeMetrics(crawler, LoopLag())
            return {
                "metrics_ms": per_call_ms(lambda: generate_latest(metrics.registry), repeat),
                "status_ms": per_call_ms(lambda: totals(crawler, activity, time.time()), repeat),
                "host_ms": per_call_ms(lambda: host_detail(crawler, activity, "h1.example", time.time()),
                                       repeat * 100),
                "first_bands_ms": first_bands_ms,
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    print("| hosts (3 URLs each) | /metrics scrape | /admin/crawl/status | ?host=H "
          "| first scrape's band count |")
    print("|---|---|---|---|---|")
    for n in args.hosts:
        r = asyncio.run(measure(n, args.repeat))
        print(f"| {n:,} | {r['metrics_ms']:.1f} ms | {r['status_ms']:.1f} ms | {r['host_ms']:.3f} ms | "
              f"{r['first_bands_ms']:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
