"""Failover of a ``polecat node`` cluster: how long a dead node's hosts wait, what is fetched again, and
what moving a slice costs.

    python -m benchmarks.bench_failover --runs 3
    python -m benchmarks.bench_failover --runs 3 --hosts 40 --pages-per-host 60 --interval 2
    python -m benchmarks.bench_failover --runs 2 --s3 http://127.0.0.1:PORT   # moto, as .ci/run starts it

Each run is the scenario of polecat/testing/failover.py: three real node processes on 127.0.0.40-42 (a
private etcd, slice checkpoints in a ``file://`` store, lease ``--ttl``, checkpoints every
``--interval`` s) crawl a generated web; at a third of the pages the node owning the most hosts is
SIGKILLed and its data dir deleted; at the end one survivor leaves gracefully (SIGTERM: hand-over).
Figures per run:

- *lease expiry*: SIGKILL to the victim's member key leaving etcd (polled every 20 ms);
- *failover time*: lease expiry to the first request, at the server, to one of the victim's hosts;
- *restore*: seconds the new owners spent restoring the victim's slices from its checkpoint (manifest
  read, objects fetched, adopted, committed), per slice;
- *hand-over*: seconds the graceful leaver spent per slice handed over (in-flight leases, export, the
  new owner's adoption and its checkpoint of them, release);
- *refetched*: pages requested more than once (all of them the victim's, fetched after its last
  checkpoint), and politeness violations at the server (must be 0).

Round part (``--round-urls N``, no cluster): one frontier filled with N queued URLs over ``--round-hosts``
hosts ships checkpoint rounds to a ``file://`` store as a node does (a snapshot of the last commit,
exported one group at a time on the loop, digested and uploaded in a worker thread) while a 5 ms ticker
on the event loop measures how late it wakes (loop lag); then the same after ``--change`` hosts got one
new URL each (only their groups are uploaded again); then an heir restores half of the slices from the
manifest (fetch, adopt, commit on the loop, one object at a time). Figures: wall seconds, CPU seconds
of the process, objects and bytes uploaded, worst and 99th-percentile loop lag, URLs restored per
second and the longest single adoption (how long the loop is held at once).

    python -m benchmarks.bench_failover --round-urls 1000000 --round-hosts 10000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import obstore.store

from benchmarks.bench_handover import open_frontier
from polecat.cluster.checkpoint_plan import Manifest, groups
from polecat.cluster.checkpoints import CheckpointStore
from polecat.config import Config, FrontierConfig, PolitenessConfig, ScopeConfig
from polecat.frontier.slices import SLICES
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import FailoverRun, page_urls, run_failover
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb


async def one(args: argparse.Namespace, seed: int, work: Path) -> dict[str, float]:
    spec = SiteSpec(hosts=args.hosts, pages_per_host=args.pages_per_host, seed=seed)
    async with TestWeb(spec, dns_process=True) as web:
        with EtcdServer() as etcd:
            run = await run_failover(web, etcd, work, rate=args.rate, ttl=args.ttl,
                                     interval=args.interval, **s3_store(args.s3, seed))
        fetched = Counter(page_urls(web))
        return figures(run, fetched, len(web.ground_truth("host")),
                       len(politeness_violations(web.log, web.min_intervals(args.rate))))


def s3_store(endpoint: str, seed: int) -> dict[str, Any]:
    """Checkpoints in a new bucket of the loopback S3 server at ``endpoint`` (none: a file:// store)."""
    if not endpoint:
        return {}
    bucket = f"polecat-failover-{seed}-{uuid.uuid4().hex[:8]}"
    # moto accepts an unsigned bucket creation; obstore does not create buckets.
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=10):
        pass
    return {"checkpoints": f"s3://{bucket}/checkpoints",
            "options": (("endpoint", endpoint), ("region", "us-east-1"), ("access_key_id", "test"),
                        ("secret_access_key", "test"), ("allow_http", "true"))}


def figures(run: FailoverRun, fetched: Counter[str], pages: int, violations: int) -> dict[str, float]:
    restored = sum(n for _, n, _ in run.restored)
    handed = sum(n for n, _ in run.handed)
    return {
        "pages": pages, "covered": len(fetched), "expiry_s": run.expired - run.killed,
        "failover_s": run.first_fetch - run.expired, "restored_slices": restored,
        "restore_ms_per_slice": 1000 * sum(s for _, _, s in run.restored) / max(1, restored),
        "handed_slices": handed,
        "handover_ms_per_slice": 1000 * sum(s for _, s in run.handed) / max(1, handed),
        "refetched": sum(1 for n in fetched.values() if n > 1), "violations": violations,
    }


async def rounds(args: argparse.Namespace) -> None:
    cfg = Config(scope=ScopeConfig(mode="any", max_queue_per_host=10**9, max_pages_per_host=10**9),
                 politeness=PolitenessConfig(rate=1000.0), frontier=FrontierConfig(map_size=64 * 1024**3))
    work = Path(tempfile.mkdtemp(prefix="polecat-bench-rounds-"))
    try:
        db, front = open_frontier(work / "a", cfg, args.round_urls)
        rng = random.Random(1)
        for i in range(args.round_urls):
            host = rng.randrange(args.round_hosts)
            db.applied(front.add(f"http://h{host}.bench.test/s/{i % 97}/p-{i}.html", 1, 0.5, 0.0))
            if front.pending_ops >= cfg.frontier.commit_ops:
                front.commit()
        front.commit()
        store = CheckpointStore(obstore.store.from_url(f"file://{work}/store", mkdir=True), "b")
        every = frozenset(range(SLICES))
        manifest = Manifest("a")
        for label in ("first round", "after a change"):
            if label != "first round":
                for h in range(args.change):
                    db.applied(front.add(f"http://h{h}.bench.test/new", 1, 0.5, 0.0))
                front.commit()
            snapshot = front.snapshot()
            lags: list[float] = []
            ticker = asyncio.create_task(_tick(lags))
            cpu, t0 = time.process_time(), time.perf_counter()
            entries, size = [], 0
            for group, ids in groups(every).items():  # as Failover.ship: export here, upload in a thread
                bundle = snapshot.export(ids, 0.0)
                entry, sent = await asyncio.to_thread(store.ship_group, group, bundle, manifest)
                entries.append(entry)
                size += sent
            report = await asyncio.to_thread(store.finish_round, manifest, 1, entries, frozenset(), 0.0, size)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
            ticker.cancel()
            snapshot.close()
            manifest = report.manifest
            lags.sort()
            print(f"{label}: {args.round_urls:,} URLs, {wall:.2f} s wall, {cpu:.2f} s CPU, {report.uploaded} "
                  f"objects, {report.bytes / 1e6:.1f} MB; loop lag max {1000 * lags[-1]:.1f} ms, "
                  f"p99 {1000 * lags[int(0.99 * (len(lags) - 1))]:.1f} ms ({len(lags)} ticks)", flush=True)
        half = frozenset(range(0, SLICES, 2))
        heir_db, heir = open_frontier(work / "b", cfg, args.round_urls)
        t0 = time.perf_counter()
        bundles = await asyncio.to_thread(store.fetch, manifest, half)
        t1 = time.perf_counter()
        queued, stall = 0, 0.0
        for bundle in bundles:  # as Failover.restore does: one object at a time, the loop runs between
            t = time.perf_counter()
            queued += heir_db.applied(heir.adopt(bundle, 10.0)).queued
            stall = max(stall, time.perf_counter() - t)
        heir.commit()
        t2 = time.perf_counter()
        print(f"restore of {len(half)} slices: {queued:,} URLs; fetch+verify {t1 - t0:.2f} s (thread), "
              f"adopt+commit {t2 - t1:.2f} s on the loop ({queued / (t2 - t1):,.0f} URLs/s), longest "
              f"single object {1000 * stall:.0f} ms")
        db.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _tick(lags: list[float]) -> None:
    while True:
        t = time.perf_counter()
        await asyncio.sleep(0.005)
        lags.append(max(0.0, time.perf_counter() - t - 0.005))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=12)
    parser.add_argument("--pages-per-host", type=int, default=40)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--ttl", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--s3", default="", metavar="URL",
                        help="checkpoints in a loopback S3 server (moto) at URL instead of a file:// store")
    parser.add_argument("--round-urls", type=int, default=0, help="the round part instead (see above)")
    parser.add_argument("--round-hosts", type=int, default=10_000)
    parser.add_argument("--change", type=int, default=100, help="hosts given a new URL between rounds")
    args = parser.parse_args()
    if args.round_urls:
        asyncio.run(rounds(args))
        return
    rows = []
    for k in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="polecat-failover-") as tmp:
            row = asyncio.run(one(args, 14 + k, Path(tmp)))
        rows.append(row)
        print(" ".join(f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}"
                       for key, value in row.items()), flush=True)
    for key in ("expiry_s", "failover_s", "restore_ms_per_slice", "handover_ms_per_slice", "refetched"):
        values = [r[key] for r in rows]
        print(f"{key}: median {statistics.median(values):.3f}, min {min(values):.3f}, max {max(values):.3f}")


if __name__ == "__main__":
    main()
