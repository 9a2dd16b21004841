"""Benchmark presets: the generated web and the crawl settings of each ``--size``."""

from __future__ import annotations

from dataclasses import dataclass

from polecat.testing.sitegen import ROBOTS_VARIANTS, SiteSpec

__all__ = ["SIZES", "Size", "bench_spec"]


@dataclass(frozen=True, slots=True)
class Size:
    spec: SiteSpec
    rate: float
    """Requests per second per host given to every runner (the per-host delay is 1/rate)."""
    concurrency: int
    timeout: float
    """Seconds a single runner may take before it is stopped."""


def bench_spec(
    hosts: int, pages_per_host: int, *, page_bytes: int, links: int, crawl_delay: float, every: int
) -> SiteSpec:
    """Realistic pages (20-50 KB, 40-80 links of every noisy form), 5 % exact and 5 % near duplicates,
    robots.txt variants that disallow /private/ on most hosts, and Crawl-delay on every ``every``-th host
    (that host's robots.txt must answer 200 for the delay to exist)."""
    robots = tuple(v for v in ROBOTS_VARIANTS if v != "error")  # every host crawlable
    delays = tuple(
        (f"h{i + 1:0{max(2, len(str(hosts)))}d}.test", crawl_delay)
        for i in (range(0, hosts, every) if every else ())
        if robots[i % len(robots)] != "missing"
    )
    return SiteSpec(
        hosts=hosts,
        pages_per_host=pages_per_host,
        seed=2026,
        links_per_page=links,
        cross_host_ratio=0.3,
        page_bytes=page_bytes,
        dup_ratio=0.05,
        near_dup_ratio=0.05,
        private_ratio=0.05,
        query_ratio=0.1,
        robots=robots,
        crawl_delays=delays,
    )


SIZES: dict[str, Size] = {
    # The smoke test's size: seconds, not minutes.
    "tiny": Size(
        bench_spec(4, 10, page_bytes=4_000, links=10, crawl_delay=0.05, every=3),
        rate=50.0,
        concurrency=16,
        timeout=60,
    ),
    # ~10,000 pages at a 0.2 s per-host delay: the setting the issue measured Scrapy on.
    "small": Size(
        bench_spec(200, 50, page_bytes=35_000, links=60, crawl_delay=0.25, every=25),
        rate=5.0,
        concurrency=256,
        timeout=400,
    ),
    "large": Size(
        bench_spec(1000, 100, page_bytes=35_000, links=60, crawl_delay=0.25, every=25),
        rate=5.0,
        concurrency=512,
        timeout=1800,
    ),
    # Politeness-bound: 1 req/s per host over 500 hosts, so at most ~500 req/s whatever the crawler.
    "polite": Size(
        bench_spec(500, 20, page_bytes=20_000, links=40, crawl_delay=0.0, every=0),
        rate=1.0,
        concurrency=512,
        timeout=400,
    ),
}
