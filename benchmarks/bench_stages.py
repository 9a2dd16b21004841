"""Where polecat's CPU time per page goes, stage by stage, against the floor, on each corpus.

    python -m benchmarks.bench_stages [--pages 400] [--corpus small,real]
    python -m benchmarks.bench_stages --worst-case [--size BYTES] [--timeout S] [--unguarded]

Runs each pipeline stage the node runs for a fetched page over a corpus (``benchmarks/corpora.py``:
pages of the ``small`` comparison web, and real documentation pages), in-process and without network,
then the floor's in-process stages (lexbor parse, SHA-256, zstd) over the same pages, and prints CPU
microseconds per page per stage and the ratio of the two totals. The HTTP stage is not here:
``python -m benchmarks.compare`` adds the bare GET loop's CPU to the floor, and
``python -m benchmarks.bench_fetch`` measures polecat's fetcher against that loop.

``--worst-case`` prints the worst case per stage on adversarial pages instead (benchmarks/worst_case.py).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import worst_case
from benchmarks.corpora import CORPORA, FLOOR_HASH, Corpus, blake2b_us, floor_stages
from polecat.config import Config, ScopeConfig, StoreConfig
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.minhash import fingerprint
from polecat.dedup.nearindex import NearDupIndex
from polecat.dedup.seen import SeenSet
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.robots import RobotsPolicy
from polecat.parse.charset import decode_html, utf8_body
from polecat.parse.guard import bound_body, bound_html, whole_utf8
from polecat.parse.html import ParsedPage, parse_html
from polecat.store.base import FetchRecord, content_hash
from polecat.store.segstore import ZSTD_LEVEL, open_store


def timed(name: str, n: int, fn: Callable[[int], object], rows: list[tuple[str, float]]) -> None:
    start = time.process_time()
    for i in range(n):
        fn(i)
    rows.append((name, (time.process_time() - start) / n * 1e6))


def stages(corpus: Corpus) -> list[tuple[str, float]]:
    """CPU µs a page of each of the node's per-page stages over ``corpus``, in a fresh frontier and store."""
    bodies, urls = corpus.bodies, corpus.urls
    n = len(bodies)
    work = Path(tempfile.mkdtemp(prefix="polecat-stages-"))
    cfg = Config(scope=ScopeConfig(mode="any"))
    db = FrontierDB(work / "frontier", map_size=1 << 32, params={})
    seen = SeenSet.restore(db.seen_keys, db.count("seen"), work / "seen.bloom", db.seq, 1_000_000, 0.01)
    frontier = Frontier(db, cfg, RobotsPolicy(cfg.robots, cfg.fetch.user_agent), seen, 0.0)
    near = NearDupIndex(db.near)
    store = open_store(work / "store", StoreConfig())
    canon = Canonicalizer()
    rows: list[tuple[str, float]] = []

    # As PagePipeline._parse: a UTF-8 page the bounds leave whole is parsed from its bytes; the others
    # are decoded, bounded as text and parsed from it.
    heads = [bound_body(body)[0] for body in bodies]
    whole: list[bytes | None] = []

    def check(i: int) -> None:
        data = utf8_body(heads[i], "utf-8")
        whole.append(data if data is not None and whole_utf8(data) else None)

    timed("UTF-8 check, parse bounds over the bytes", n, check, rows)
    htmls: dict[int, str] = {}

    def decode(i: int) -> None:
        if whole[i] is None:
            htmls[i] = bound_html(decode_html(heads[i], "utf-8")).html

    timed("charset decode, parse bounds (other pages)", n, decode, rows)

    def parse(i: int) -> ParsedPage:
        data = whole[i]
        return parse_html(htmls[i] if data is None else data, urls[i])

    parsed = [parse(i) for i in range(n)]
    timed("parse (links, text)", n, parse, rows)
    links: list[list[str]] = []
    timed("canonicalize links", n, lambda i: links.append(canon.canonicalize_links(parsed[i].links,
                                                                                   parsed[i].base)), rows)
    queued: list[int] = []
    timed("frontier add (seen-set)", n,
          lambda i: queued.append(db.applied(frontier.add_many(links[i], 1, 0.1, 0.0))), rows)
    digests: list[bytes] = []
    timed("content hash", n, lambda i: digests.append(content_hash(bodies[i])), rows)
    fps = []
    timed("near-dup fingerprint", n, lambda i: fps.append(fingerprint(parsed[i].text)), rows)
    def index(i: int) -> None:
        if near.find(db.txn, fps[i]) is None:
            db.apply(near.add(fps[i], digests[i]))

    timed("near-dup index", n, index, rows)
    timed("store put (WARC, zstd)", n, lambda i: store.put(
        FetchRecord(urls[i], 0.0, 200, (("Content-Type", "text/html"),), digests[i], len(bodies[i])),
        bodies[i]), rows)
    start = time.process_time()
    store.flush()
    frontier.commit()
    rows.append(("checkpoint (amortized)", (time.process_time() - start) / n * 1e6))
    store.close()
    db.close()
    shutil.rmtree(work)
    print(f"{corpus.name}: {n} pages, {sum(map(len, bodies)) / n / 1000:.1f} KB of HTML, "
          f"{sum(len(p.text.encode()) for p in parsed) / n / 1000:.1f} KB of text and "
          f"{sum(len(p.links) for p in parsed) / n:.0f} links on average, of which {sum(queued) / n:.1f} new "
          "(queued; a crawl of a whole site queues about one URL a page)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=400, help="pages of the synthetic corpus")
    ap.add_argument("--corpus", default=",".join(CORPORA), help="comma-separated: " + ",".join(CORPORA))
    ap.add_argument("--worst-case", action="store_true", help="worst case per stage on hostile pages")
    ap.add_argument("--size", type=int, default=10 * 2**20, help="--worst-case: hostile page size")
    ap.add_argument("--timeout", type=float, default=60.0, help="--worst-case: kill a class after")
    ap.add_argument("--unguarded", action="store_true", help="--worst-case: without polecat.parse.guard")
    args = ap.parse_args()
    if args.worst_case:
        worst_case.report(args.size, args.timeout, not args.unguarded)
        return
    for name in args.corpus.split(","):
        corpus = CORPORA[name](args.pages)
        if corpus is None:
            print(f"{name}: skipped, its pages are not installed (see benchmarks/corpora.py)\n")
            continue
        rows = stages(corpus)
        floor = floor_stages(corpus.bodies, ZSTD_LEVEL)
        total, floor_total = sum(us for _, us in rows), sum(us for _, us in floor)
        print("\n| stage | CPU µs/page | share |\n|---|---|---|")
        for stage, us in rows:
            print(f"| {stage} | {us:.0f} | {us / total:.0%} |")
        print(f"| **total (without HTTP)** | **{total:.0f}** | |")
        for stage, us in floor:
            print(f"| floor: {stage} | {us:.0f} | |")
        print(f"| **floor (without HTTP)** | **{floor_total:.0f}** | |")
        print(f"| **ratio** | **{total / floor_total:.2f}x** | |")
        blake2b = blake2b_us(corpus.bodies)
        with_blake2b = floor_total - dict(floor)[FLOOR_HASH] + blake2b
        print(f"| ratio with BLAKE2b ({blake2b:.0f}) as the floor's hash | {total / with_blake2b:.2f}x | |\n")


if __name__ == "__main__":
    main()
