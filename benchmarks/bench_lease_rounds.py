"""Lease and complete on the data dir that ``bench_periodic --dir DIR`` left, in rounds, right after the
open: each round's CPU per operation with the page faults it took, so that the cost of a frontier's size
(deeper B-trees) is told apart from the first touch of a big LMDB's pages by a process that just opened it.

    python -m benchmarks.bench_periodic --urls 50000000 --per-host 50 --due 1000 --skip-before --dir DIR
    python -m benchmarks.bench_lease_rounds DIR --urls 50000000

2,000 hosts of the dir (robots.txt answered) are given 10 new URLs each, then each round leases 4,000
URLs and completes them (one commit a round, as bench_periodic's ``lease``/``complete`` figures do)."""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from benchmarks.bench_periodic import SCAN_AT, reopen
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease

ROUND = 4_000
"""Leases a round."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path, help="a data dir bench_periodic --dir left")
    ap.add_argument("--urls", type=int, required=True, help="the --urls it was built with")
    ap.add_argument("--per-host", type=int, default=50, help="the --per-host it was built with")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    hosts = args.urls // args.per_host
    db, frontier, robots = reopen(args.dir, args.urls)
    # Hosts bench_periodic's own admits and leases did not touch (it takes the last 2,000).
    given = [f"h{h}.bench.test" for h in range(hosts - 6_000, hosts - 4_000)]
    for host in given:
        robots.record_response(f"http://{host}", 404, b"", 0.0)
    stamp = time.time_ns()  # new paths on every run of the same dir
    for host in given:
        db.applied(frontier.add_many([f"http://{host}/r{stamp}/{k}" for k in range(10)], 1, 0.5, SCAN_AT))
    frontier.commit()
    now = SCAN_AT + 1.0
    for r in range(1, args.rounds + 1):
        leases: list[Lease] = []
        before = resource.getrusage(resource.RUSAGE_SELF)
        c0 = time.process_time()
        calls = 0
        while len(leases) < ROUND and calls < 5 * ROUND:
            calls += 1
            got = db.applied(frontier.lease(now))
            if isinstance(got, Lease):
                leases.append(got)
            else:
                now += 0.01
        c1 = time.process_time()
        for lease in leases:
            db.apply(frontier.complete(lease, Completion(Attempt(now, now, now, 200), "fetched", "200"), now))
        c2 = time.process_time()
        after = resource.getrusage(resource.RUSAGE_SELF)
        frontier.commit()
        print(f"round {r}: {len(leases):,} leases in {calls:,} calls, lease {(c1 - c0) / calls * 1e6:.1f} us "
              f"CPU a call, complete {(c2 - c1) / max(1, len(leases)) * 1e6:.1f} us; page faults "
              f"{after.ru_majflt - before.ru_majflt:,} major, {after.ru_minflt - before.ru_minflt:,} minor",
              flush=True)


if __name__ == "__main__":
    main()
