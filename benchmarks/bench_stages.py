"""Where polecat's CPU time per page goes, stage by stage, on the benchmark's generated pages.

    python -m benchmarks.bench_stages [--pages 400]

Runs each pipeline stage the node runs for a fetched page over the same pages as the ``small`` comparison
(35 KB, ~60 links), in-process and without network, and prints microseconds per page per stage. The
HTTP stage is not here: ``python -m benchmarks.bench_fetch`` measures it against a bare aiohttp loop.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.sizes import SIZES
from polecat.config import Config, ScopeConfig, StoreConfig
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.nearindex import NearDupIndex
from polecat.dedup.seen import SeenSet
from polecat.dedup.simhash import fingerprint
from polecat.fetch.charset import decode_html
from polecat.fetch.robots import RobotsPolicy
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.parse.html import parse_html
from polecat.store.base import FetchRecord, content_hash, open_store
from polecat.testing.sitegen import Site

PORT = 8080


def timed(name: str, n: int, fn: Callable[[int], object], rows: list[tuple[str, float]]) -> None:
    start = time.process_time()
    for i in range(n):
        fn(i)
    rows.append((name, (time.process_time() - start) / n * 1e6))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=400)
    args = ap.parse_args()
    site = Site(SIZES["small"].spec)
    ids = random.Random(1).sample(range(len(site.pages)), args.pages)
    bodies = [site.render(i, PORT) for i in ids]
    urls = [site.url(i, PORT) for i in ids]
    n = len(bodies)
    work = Path(tempfile.mkdtemp(prefix="polecat-stages-"))
    cfg = Config(scope=ScopeConfig(mode="any"))
    db = FrontierDB(work / "frontier", map_size=1 << 32, params={})
    seen = SeenSet.restore(db.env, db.seen, work / "seen.bloom", db.seq, 1_000_000, 0.01)
    frontier = Frontier(db, cfg, RobotsPolicy(cfg.robots, cfg.fetch.user_agent), seen, 0.0)
    near = NearDupIndex(db.near)
    store = open_store(work / "store", StoreConfig())
    canon = Canonicalizer()
    rows: list[tuple[str, float]] = []

    htmls: list[str] = []
    timed("charset decode", n, lambda i: htmls.append(decode_html(bodies[i], "utf-8")), rows)
    parsed = [parse_html(h, u) for h, u in zip(htmls, urls, strict=True)]
    timed("parse (links, text)", n, lambda i: parse_html(htmls[i], urls[i]), rows)
    links: list[list[str]] = []
    timed("canonicalize links", n, lambda i: links.append(canon.canonicalize_links(parsed[i].links,
                                                                                   parsed[i].base)), rows)
    timed("frontier add (seen-set)", n, lambda i: frontier.add_many(links[i], 1, 0.1, 0.0), rows)
    digests: list[bytes] = []
    timed("content hash", n, lambda i: digests.append(content_hash(bodies[i])), rows)
    fps = []
    timed("near-dup fingerprint", n, lambda i: fps.append(fingerprint(parsed[i].text)), rows)
    def index(i: int) -> None:
        if near.find(db.txn, fps[i]) is None:
            near.add(db.txn, fps[i], digests[i])

    timed("near-dup index", n, index, rows)
    timed("store put (WARC, zstd)", n, lambda i: store.put(
        FetchRecord(urls[i], 0.0, 200, (("Content-Type", "text/html"),), digests[i], len(bodies[i])),
        bodies[i]), rows)
    start = time.process_time()
    store.flush()
    frontier.commit()
    rows.append(("checkpoint (amortized)", (time.process_time() - start) / n * 1e6))
    total = sum(us for _, us in rows)
    print(f"{n} pages, {sum(map(len, bodies)) / n / 1000:.1f} KB and "
          f"{sum(len(p.links) for p in parsed) / n:.0f} links on average\n")
    print("| stage | CPU µs/page | share |\n|---|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.0f} | {us / total:.0%} |")
    print(f"| **total (without HTTP)** | **{total:.0f}** | |")
    store.close()
    db.close()


if __name__ == "__main__":
    main()
