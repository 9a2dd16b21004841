"""The cluster's look for stray URLs (URLs queued in slices a node does not own), at many hosts.

    python -m benchmarks.bench_strays --hosts 200000

Fills a frontier with one queued URL per host, the first half of the hosts while every slice is owned
(no per-slice counting) and the second half while half the slices are owned (host_table rule 9 counts
them per slice), and reports the CPU time of an ``add`` each way (CPU, not wall: the machine is
shared). Then times ``set_owned`` (which rebuilds the counts in the pass it makes over the hosts
anyway), ``unowned_queued()`` (what the reconciliation and every ``/metrics`` scrape read: a look at the
fenced slices), and, for comparison, the pass over every host record that ``unowned_queued()`` made
before (issue 32).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.bench_handover import open_frontier
from polecat.config import Config, FrontierConfig, PolitenessConfig, ScopeConfig
from polecat.frontier.slices import SLICES, slice_of


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=200_000)
    ap.add_argument("--looks", type=int, default=20, help="calls timed of each look")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="polecat-bench-strays-"))
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=PolitenessConfig(rate=1000.0),
                 frontier=FrontierConfig(map_size=16 * 1024**3))
    db, frontier = open_frontier(workdir, cfg, args.hosts)
    hosts = [f"h{i}.bench.test" for i in range(args.hosts)]
    half = args.hosts // 2
    owned = frozenset(range(0, SLICES, 2))

    def fill(part: list[str]) -> float:
        t0 = time.process_time()
        for host in part:
            db.applied(frontier.add(f"http://{host}/", 1, 0.5, 0.0))
            if frontier.pending_ops >= cfg.frontier.commit_ops:
                frontier.commit()
        frontier.commit()
        return (time.process_time() - t0) / len(part) * 1e6

    all_owned = fill(hosts[:half])
    t0 = time.process_time()
    frontier.set_owned(owned, 0.0)
    set_owned_s = time.process_time() - t0
    counted = fill(hosts[half:])
    fenced = frozenset(range(SLICES)) - owned

    t0 = time.process_time()
    for _ in range(args.looks):
        now = frontier.unowned_queued()
    look_s = (time.process_time() - t0) / args.looks
    t0 = time.process_time()
    for _ in range(args.looks):
        before: Counter[int] = Counter()
        for host in hosts:
            st = frontier.host_state(host)
            if st is not None and st.queued > 0 and (s := slice_of(host)) in fenced:
                before[s] += st.queued
    pass_s = (time.process_time() - t0) / args.looks
    assert now == before and sum(now.values()) > 0
    print(f"{args.hosts:,} hosts, one URL queued each; {sum(now.values()):,} in slices not owned")
    print(f"add: {all_owned:.1f} us with every slice owned, {counted:.1f} us with half fenced (counted)")
    print(f"set_owned (half the slices), counts rebuilt: {set_owned_s * 1000:.0f} ms")
    print(f"unowned_queued(): {look_s * 1000:.2f} ms; the pass over every host it replaces: "
          f"{pass_s * 1000:.1f} ms")
    db.close()


if __name__ == "__main__":
    main()
