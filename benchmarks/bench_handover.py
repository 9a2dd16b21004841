"""Slice hand-over alone (no network): export, bundle size and adopt at a million queued URLs.

    python -m benchmarks.bench_handover --urls 1000000 --hosts 10000 --batch 256

Fills frontier A with ``--urls`` queued URLs over ``--hosts`` hosts (as bench_frontier does), then moves
every slice to an empty frontier B in groups of ``--batch`` slices: ``export_slices`` on A, the bundle
written to and read back from bytes (checksums verified), ``adopt`` on B, a commit, ``release_slices``
on A and a commit. Reports slices/s and URLs/s of each side, and bundle bytes per queued URL.
"""

from __future__ import annotations

import argparse
import io
import random
import tempfile
import time
from pathlib import Path

from polecat.config import Config, FrontierConfig, PolitenessConfig, ScopeConfig
from polecat.dedup.seen import SeenSet
from polecat.frontier.bundle import SliceBundle
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.slices import SLICES


def open_frontier(path: Path, cfg: Config, expected: int) -> tuple[FrontierDB, Frontier]:
    db = FrontierDB(path / "frontier", map_size=cfg.frontier.map_size, params={})
    seen = SeenSet.restore(db.seen_keys, db.count("seen"), path / "seen.bloom", db.seq, expected, 0.01)
    return db, Frontier(db, cfg, RobotsPolicy(cfg.robots, cfg.fetch.user_agent), seen, 0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=256, help="slices per bundle")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="polecat-bench-handover-"))
    cfg = Config(
        scope=ScopeConfig(mode="any", max_queue_per_host=10**9, max_pages_per_host=10**9),
        politeness=PolitenessConfig(rate=1000.0),
        frontier=FrontierConfig(map_size=64 * 1024**3),
    )
    db_a, a = open_frontier(workdir / "a", cfg, args.urls)
    db_b, b = open_frontier(workdir / "b", cfg, args.urls)
    rng = random.Random(1)
    t0 = time.perf_counter()
    for i in range(args.urls):
        host = rng.randrange(args.hosts)
        db_a.applied(a.add(f"http://h{host}.bench.test/section/{i % 97}/page-{i}.html", 1 + i % 7, 0.5, 0.0))
        if a.pending_ops >= cfg.frontier.commit_ops:
            a.commit()
    a.commit()
    print(f"filled A: {a.queued:,} URLs over {args.hosts:,} hosts in {time.perf_counter() - t0:.1f}s")

    export_s = adopt_s = release_s = 0.0
    size = moved = 0
    for start in range(0, SLICES, args.batch):
        ids = range(start, min(SLICES, start + args.batch))
        t0 = time.perf_counter()
        raw = a.export_slices(ids, 10.0).to_bytes()
        t1 = time.perf_counter()
        bundle = SliceBundle.read(io.BytesIO(raw))
        report = db_b.applied(b.adopt(bundle, 10.0))
        b.commit()
        t2 = time.perf_counter()
        db_a.apply(a.release_slices(ids))
        a.commit()
        t3 = time.perf_counter()
        export_s += t1 - t0
        adopt_s += t2 - t1
        release_s += t3 - t2
        size += len(raw)
        moved += report.queued
    assert moved == args.urls and b.queued == args.urls and a.queued == 0, (moved, b.queued, a.queued)
    print(f"export (incl. serialize): {SLICES / export_s:,.0f} slices/s, {moved / export_s:,.0f} URLs/s "
          f"({export_s:.1f}s)")
    print(f"read+verify+adopt+commit: {SLICES / adopt_s:,.0f} slices/s, {moved / adopt_s:,.0f} URLs/s "
          f"({adopt_s:.1f}s)")
    print(f"release+commit: {SLICES / release_s:,.0f} slices/s ({release_s:.1f}s)")
    print(f"bundles: {size / 1024**2:,.1f} MB in all, {size / moved:.1f} B per queued URL")
    db_a.close()
    db_b.close()


if __name__ == "__main__":
    main()
