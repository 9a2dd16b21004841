"""Time and peak memory of the frontier log's readers (polecat/frontier/wal.py rule 8): the replay at open,
a :class:`~polecat.frontier.wal.LogOverlay` over the log, and ``polecat status``'s read of the log, each
in a child process over a copy of a crashed frontier whose log holds one 150,000-write entry ("big") or
1,000 entries of 150 writes ("small").

    timeout 600 python -m benchmarks.bench_wal_read DIR [--tracemalloc]

``--tracemalloc`` traces Python allocations (peak of traced objects; it slows the readers 2-5x):
time the readers without it. VmHWM is the child's peak resident set, the interpreter's included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from polecat.frontier.db import FrontierDB
from polecat.frontier.slices import slice_prefix
from polecat.frontier.status import _snapshot
from polecat.frontier.tables import Snapshot
from polecat.frontier.wal import LOG_NAME, LogOverlay, WriteLog
from polecat.writes import Put, Write

SHAPES = {"big": (1, 150_000), "small": (1000, 150)}
"""Entries and writes per entry of each log."""


def build(path: Path, entries: int, per: int) -> None:
    """A frontier in ``path`` whose log holds ``entries`` commits of ``per`` writes (a URL's queue row,
    record and seen key, as a sitemap queues it), left as kill -9 leaves it."""
    db = FrontierDB(path, map_size=1 << 30, params={}, log_bytes=1 << 30)
    n = 0
    for _ in range(entries):
        writes: list[Write] = []
        for _ in range(per // 3):
            key = slice_prefix(n % 4096) + n.to_bytes(16, "big")
            writes += [Put("queue", key + b"q" * 20, b"v" * 30), Put("urls", key, b"u" * 40),
                       Put("seen", key, b"")]
            n += 1
        db.apply(writes)
        db.commit()
    db._entry.add([Put("meta", b"uncommitted", b"1")])  # close then makes no LMDB commit: a crash
    db.close()


def read(kind: str, path: Path) -> object:
    """Read the log of the frontier in ``path`` as the reader ``kind`` does."""
    if kind == "replay":
        db = FrontierDB(path, map_size=1 << 30, params={}, log_bytes=1 << 30)
        replayed = db.replayed
        db.close()
        return replayed
    if kind == "overlay":
        wal = WriteLog(path / LOG_NAME)
        wal.size = (path / LOG_NAME).stat().st_size
        base: Snapshot = None  # type: ignore[assignment]  # the overlay's rows only: no base is read
        return LogOverlay(base, wal.rows(0)).added("seen")
    with _snapshot(path, ("urls",)) as (_, _, counts):
        return counts


def child(kind: str, path: Path, trace: bool) -> None:
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    answer = read(kind, path)
    took = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] if trace else 0
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
    print(json.dumps({"reader": kind, "s": round(took, 3), "traced_peak_mb": round(peak / 2**20, 1),
                      "vmhwm_mb": round(hwm / 1024, 1), "answer": answer}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("READER", "FRONTIER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), args.tracemalloc)
        return
    shutil.rmtree(args.dir, ignore_errors=True)
    for shape, (entries, per) in SHAPES.items():
        built = args.dir / shape / "built"
        build(built, entries, per)
        size = (built / LOG_NAME).stat().st_size
        print(f"{shape}: {entries} entries of {per} writes, log {size:,} B", flush=True)
        for kind in ("replay", "overlay", "status"):
            copy = args.dir / shape / kind
            shutil.copytree(built, copy)
            cmd = [sys.executable, "-m", "benchmarks.bench_wal_read", str(args.dir), "--child", kind,
                   str(copy)]
            out = subprocess.run(cmd + ["--tracemalloc"] * args.tracemalloc, capture_output=True, text=True,
                                 check=True)
            print(f"{shape}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
