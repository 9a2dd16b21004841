"""Time ``polecat upgrade`` on a data dir written by an earlier release (issue 36).

    mkdir -p /tmp/effc808 && git archive effc808 | tar -x -C /tmp/effc808
    python -m benchmarks.bench_upgrade --release-tree /tmp/effc808 --urls 1000000 --pages 10000

The release's own code (a subprocess with its tree on PYTHONPATH, through its ``Crawler``) writes a data
dir: ``--urls`` queued URLs over ``--urls / 100`` hosts, and ``--pages`` stored HTML pages of ~2,000
random words (about 12 KB) with their near-duplicate index entries. Nothing is fetched: the generator
calls the release's frontier and store directly. Then today's ``polecat upgrade`` runs on it, and the
wall and CPU time of the command (its start-up included: it runs a second time, on the upgraded
dir, which does nothing) are printed with what it reported.

With ``--resume``, today's code opens the data dir as a resumed crawl does instead (no ``polecat
upgrade``): the time to open it, then the background near-duplicate rebuild (polecat/node/commits.py rule
7; past ``AUTO_REBUILD_RECORDS`` stored pages) run to its end beside a 1 ms ticker, whose worst lateness
is how long the rebuild held the loop at once (and, for comparison, its worst lateness over 5 s of the
same loop before the rebuild starts):

    python -m benchmarks.bench_upgrade --release-tree /tmp/effc808 --urls 100000 --pages 30000 --resume
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_WRITE = r"""
import asyncio, hashlib, random, sys, time
from pathlib import Path
from polecat.config import config_from_mapping
from polecat.dedup.simhash import fingerprint
from polecat.node import Crawler
from polecat.store.base import FetchRecord

data, urls, pages = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(36)
words = ["w%d" % i for i in range(5000)]

async def main():
    cfg = config_from_mapping({"data_dir": str(data), "scope": {"mode": "any"},
                               "dedup": {"expected_urls": max(urls, 10000)}})
    async with Crawler(cfg) as c:
        now = time.time()
        hosts = max(1, urls // 100)
        for h in range(hosts):
            c._frontier.add_many([f"http://h{h}.example/p{j}" for j in range(urls // hosts)], 1, 0.5, now)
            if h % 500 == 499:
                c._db.commit()
        for p in range(pages):
            text = " ".join(rng.choices(words, k=2000))
            body = f"<html><body><p>{text}</p></body></html>".encode()
            url = f"http://h{p % hosts}.example/stored{p}"
            rec = FetchRecord.for_body(url, body, fetched_at=now, headers=(("content-type", "text/html"),))
            c._store.put(rec, body)
            c._pipeline._index(url, rec.content_hash, fingerprint(text))
            if p % 1000 == 999:
                c._store.flush()
                c._db.commit()
        c._store.flush()
        c._db.commit()

asyncio.run(main())
"""

_RESUME = r"""
import asyncio, sys, time
from polecat import Crawler, runloop
from polecat.config import config_from_mapping

async def main():
    cfg = config_from_mapping({"data_dir": sys.argv[1], "scope": {"mode": "any"},
                               "dedup": {"expected_urls": int(sys.argv[2])}})
    wall, cpu = time.monotonic(), time.process_time()
    async with Crawler(cfg) as c:
        print(f"opened in {time.monotonic() - wall:.2f}s wall, {time.process_time() - cpu:.2f}s CPU: "
              f"{c.opened.near_left} store records left to the background rebuild")
        worst, done = 0.0, asyncio.Event()

        async def tick():
            nonlocal worst
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.001)
                now = time.monotonic()
                worst, last = max(worst, now - last - 0.001), now

        longest = [0.0, 0.0]  # one batch's CPU of the loop's thread, and its wall time
        reindex = c._pipeline.reindex

        def timed(records):
            cpu, wall = time.thread_time(), time.monotonic()
            try:
                return reindex(records)
            finally:
                longest[0] = max(longest[0], time.thread_time() - cpu)
                longest[1] = max(longest[1], time.monotonic() - wall)

        c._pipeline.reindex = timed
        ticker, committer = asyncio.create_task(tick()), c._commits.start()
        await asyncio.sleep(5.0)  # the same loop without the rebuild: what the machine alone costs
        idle, worst = worst, 0.0
        wall, cpu = time.monotonic(), time.process_time()
        await c._commits.rebuild_in_background(c._pipeline)
        spent, spent_cpu = time.monotonic() - wall, time.process_time() - cpu
        done.set()
        c._commits.stop()
        await asyncio.gather(ticker, committer)
        print(f"background rebuild: {spent:.2f}s wall, {spent_cpu:.2f}s CPU (ticker included); "
              f"loop held at most {worst * 1000:.1f} ms at once (5 s before it, idle: {idle * 1000:.1f} ms); "
              f"longest batch {longest[0] * 1000:.1f} ms CPU, {longest[1] * 1000:.1f} ms wall")

runloop.run(main())  # the loop and collector settings of a crawl (polecat/runloop.py)
"""


def _timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the child) and stdout of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    run = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{run.stderr}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, run.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release-tree", type=Path, required=True, help="the release's source tree")
    ap.add_argument("--urls", type=int, default=100_000)
    ap.add_argument("--pages", type=int, default=2_000)
    ap.add_argument("--resume", action="store_true",
                    help="open as a resumed crawl does; the rebuild in the background")
    args = ap.parse_args()
    today = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        old = {**os.environ, "PYTHONPATH": str(args.release_tree)}
        wall, cpu, _ = _timed([sys.executable, "-c", _WRITE, str(data), str(args.urls), str(args.pages)],
                              old, args.release_tree)
        print(f"release wrote {args.urls} queued URLs and {args.pages} stored pages in {wall:.1f}s "
              f"({cpu:.1f}s CPU)")
        new = {**os.environ, "PYTHONPATH": str(today)}
        if args.resume:
            expected = str(max(args.urls, 10_000))
            wall, cpu, out = _timed([sys.executable, "-c", _RESUME, str(data), expected], new, today)
            print(f"{out.strip()}\nin all: {wall:.2f}s wall, {cpu:.2f}s CPU")
            return 0
        upgrade = [sys.executable, "-m", "polecat", "upgrade", str(data)]
        wall, cpu, out = _timed(upgrade, new, today)
        print(f"polecat upgrade: {wall:.2f}s wall, {cpu:.2f}s CPU\n{out.strip()}")
        wall, cpu, out = _timed(upgrade, new, today)
        print(f"again (nothing to do: start-up and open): {wall:.2f}s wall, {cpu:.2f}s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
