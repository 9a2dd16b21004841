"""What a refresh crawl saves: bytes not downloaded thanks to 304s, bytes not stored thanks to near-duplicate
detection, on a real crawl of the loopback test web.

    python -m benchmarks.bench_revisit --hosts 4 --pages 100 --changed 0.1 --cosmetic 0.1

A generated web (``--hosts`` x ``--pages``) is crawled once; then ``--changed`` of the pages get new text
and ``--cosmetic`` of them only a new footer revision number (a near-duplicate, new ETag), the rest stays
as it was. A second run, ``polecat crawl --refresh`` in effect, re-fetches every page (all are due):
conditional GETs get 304 from the unchanged pages, the cosmetic ones come back whole and are recorded
as revisits of their previous version with their own bytes kept as deltas against it (a few bytes each,
polecat/store/delta.py), the changed ones are stored whole. Figures: body bytes received and
stored by the refresh run, against what a refresh without conditional GET (every page whole) and
without near-duplicate detection (every new body stored) would have cost, from the sizes the first run
recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from polecat import Crawler
from polecat.config import Config, config_from_mapping
from polecat.store.segstore import open_store
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb


class Outcome(NamedTuple):
    pages: int
    changed: int
    cosmetic: int
    not_modified: int
    """304 answers in the refresh run."""
    stored: int
    """New bodies stored by the refresh run."""


def config(web: TestWeb, data: Path, refresh: bool) -> Config:
    base: dict[str, Any] = {
        "data_dir": str(data),
        "scope": {"seeds": web.seeds, "mode": "host"},
        "politeness": {"rate": 50.0},
        "dns": {"nameservers": [web.dns_address], "allow_private": True},
        "refresh": {"enabled": refresh, "min_interval": 0.1, "max_interval": 0.5, "default_interval": 0.5},
    }
    return config_from_mapping(base)


async def crawl(cfg: Config) -> tuple[int, int, int]:
    """One run: (body bytes received, bodies stored, body bytes stored)."""
    async with Crawler(cfg) as crawler:
        before = crawler.store.stats()
        await crawler.run()
        after = crawler.store.stats()
        return crawler.bytes_fetched, after.bodies - before.bodies, after.stored_bytes - before.stored_bytes


def main(argv: list[str] | None = None) -> Outcome:
    """Run, print the figures and return the counts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--pages", type=int, default=100, help="pages per host")
    ap.add_argument("--changed", type=float, default=0.1, help="share of pages with new text")
    ap.add_argument("--cosmetic", type=float, default=0.1, help="share with a new footer only")
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    with TestWeb(SiteSpec(hosts=args.hosts, pages_per_host=args.pages, seed=args.seed)) as web, \
            tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        first = asyncio.run(crawl(config(web, data, False)))
        store = open_store(data / "store", Config().store, read_only=True)
        try:
            sizes = {r.url: r.size for r in store.records()  # pages only: robots.txt is archived too
                     if r.kind == "response" and r.status == 200 and not r.url.endswith("/robots.txt")}
        finally:
            store.close()
        pages = sorted(sizes)
        rng.shuffle(pages)
        n_changed, n_cosmetic = int(args.changed * len(pages)), int(args.cosmetic * len(pages))
        for i, url in enumerate(pages[: n_changed + n_cosmetic]):
            host, path = url.split("//", 1)[1].split("/", 1)
            web.change_every(host.split(":")[0], "/" + path, 1e9, cosmetic=i >= n_changed)
        time.sleep(0.6)  # every page is due
        web.clear_log()
        received, stored, stored_bytes = asyncio.run(crawl(config(web, data, True)))
        statuses = [r.status for r in web.log if r.target != "/robots.txt"]
    whole = sum(sizes.values())
    near_dup_raw = sum(sizes[url] for url in pages[n_changed : n_changed + n_cosmetic])
    print(f"first crawl: {len(sizes)} pages stored, {first[0]:,} body bytes received")
    print(f"refresh run: {len(statuses)} requests, {statuses.count(304)} answered 304, "
          f"{statuses.count(200)} answered 200 ({n_changed} changed, {n_cosmetic} cosmetic)")
    print("| refresh run | body bytes received | new bodies stored | store bytes written |")
    print("|---|---|---|---|")
    print(f"| polecat (conditional GET + near-dup) | {received:,} | {stored} | {stored_bytes:,} |")
    print(f"| without conditional GET (every page whole) | {whole:,} (at least) | - | - |")
    print(f"| without near-dup detection | - | {n_changed + n_cosmetic} | "
          f"+{near_dup_raw:,} raw body bytes |")
    print(f"saved by 304s: {1 - received / whole:.1%} of the body bytes of a full re-download; "
          f"by near-dup detection: {n_cosmetic} bodies ({near_dup_raw:,} raw bytes) not stored again")
    return Outcome(len(sizes), n_changed, n_cosmetic, statuses.count(304), stored)


if __name__ == "__main__":
    main()
