"""A checkpoint object's restore in steps, on the data dir that ``bench_periodic --dir DIR`` left, the
longest step's CPU (and without a full collection of the garbage collector, which a node's frozen
heap makes rarer: polecat/runloop.py rule 8) (polecat/frontier/handover.py rules 9-10).

    python -m benchmarks.bench_periodic --urls 50000000 --per-host 50 --due 1000 --skip-before --dir DIR
    python -m benchmarks.bench_restore_steps DIR --urls 50000000 --group 20

The group's 64 slices are exported and released, then adopted back in steps of ``ADOPT_STEP`` records
with the restore's hold, as an heir restores a checkpoint object (polecat/cluster/failover.py rule 6),
with a commit every four steps as a node's ``frontier.commit_ops`` (2,000 changes) makes between them
(bench_periodic's own "in steps" figure makes none, so its open transaction grows through the restore).
The data dir ends as it was.

``--chunks`` then hands the first two chunks of a hand-over over as a node sends them (their exports and
releases in steps, bench_periodic's ``chunk_handover``) and adopts both back in steps (``adopt_chunk``),
so the dir again ends as it was. ``--node-gc`` sets the garbage collector as a node's process does
(polecat/runloop.py rules 2, 3 and 8: what is alive after the open frozen, and what survives each pass):
the steps' CPU is then what a node's loop sees, without the full passes over the open frontier's objects
that the interpreter's own settings make."""

from __future__ import annotations

import argparse
import asyncio
import io
import time
from pathlib import Path

from benchmarks.bench_periodic import SCAN_AT, Steps, adopt_chunk, chunk_handover, group_slices, reopen
from polecat.cluster.ownership import Ownership
from polecat.frontier.bundle import SliceBundle
from polecat.runloop import COLLECTOR, tune_gc

COMMIT_EVERY = 4
"""Steps between two commits (~500 records a step, ~2,000 changes: ``frontier.commit_ops``)."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path, help="a data dir bench_periodic --dir left")
    ap.add_argument("--urls", type=int, required=True, help="the --urls it was built with")
    ap.add_argument("--group", type=int, default=20, help="the group of 64 slices restored (0-63)")
    ap.add_argument("--chunks", action="store_true", help="then two chunks of a hand-over, out and back")
    ap.add_argument("--node-gc", action="store_true", help="the garbage collector set as a node's process")
    args = ap.parse_args()
    c0 = time.process_time()
    db, frontier, _ = reopen(args.dir, args.urls)
    print(f"open: {time.process_time() - c0:.1f} s CPU", flush=True)
    if args.node_gc:
        tune_gc()
    slices = group_slices(args.group)
    body = frontier.export_slices(slices, SCAN_AT).to_bytes()
    db.apply(frontier.release_slices(slices))
    frontier.commit()
    adoption = frontier.begin_adopt(SliceBundle.read(io.BytesIO(body)), SCAN_AT,
                                    wait_from=Ownership.restore_hold(SCAN_AT))
    steps = Steps()
    while (report := steps.run(lambda: db.applied(adoption.step()))) is None:
        if steps.count % COMMIT_EVERY == 0:
            frontier.commit()
    adoption.close()
    frontier.commit()
    steps.report(f"restore of group {args.group} in steps", f"({len(body):,} B)")
    print(report, flush=True)
    if args.chunks:
        for chunk in asyncio.run(chunk_handover(frontier, db)):
            adopt_chunk(frontier, db, chunk)
    if args.node_gc:
        print(f"collector: {COLLECTOR.line()}", flush=True)


if __name__ == "__main__":
    main()
