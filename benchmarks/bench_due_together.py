"""A working set of hosts falling due together, as after an open (polecat/frontier/host_table.py rule 6:
each host read back waits one interval from the open), then lease calls: the loop thread's CPU in each
call, the largest first, and whether the ready and waiting gauges have caught up (rule 17).

    python -m benchmarks.bench_due_together --hosts 50000 --calls 200

A frontier in memory (no LMDB: the pops of rule 17's due heap are the cost looked at), ``--hosts`` hosts
with one URL each, all due at one time; each lease call is a robots.txt lease (no robots answer is given).
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import replace

from polecat.config import Config, FrontierConfig
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.seen import SeenSet
from polecat.frontier.frontier import Frontier
from polecat.frontier.robots import RobotsPolicy
from polecat.testing.fakes import MemoryFrontierDB

BATCH = 1_000
"""Hosts admitted a call: a page brings 1,000 new hosts at most (``max_new_hosts_per_page``)."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=50_000)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    base = Config()
    cfg = replace(base, scope=replace(base.scope, mode="any"),
                  frontier=replace(base.frontier, working_hosts=max(FrontierConfig().working_hosts,
                                                                    args.hosts + BATCH)))
    db = MemoryFrontierDB()
    seen = SeenSet.rebuild((), 0, 2 * args.hosts, 0.01)
    frontier = Frontier(db, cfg, RobotsPolicy(cfg.robots, cfg.fetch.user_agent), seen, 0.0,
                        rng=random.Random(0))
    canon = Canonicalizer().canonicalize
    now = 1_000.0
    for start in range(0, args.hosts, BATCH):
        urls = [canon(f"http://h{i}.due.test/") for i in range(start, min(start + BATCH, args.hosts))]
        db.applied(frontier.add_many([u for u in urls if u is not None], 1, 0.5, now))
    costs: list[float] = []
    now += 1.0  # every host due
    for _ in range(args.calls):
        cpu = time.thread_time()
        db.applied(frontier.lease(now))
        costs.append(time.thread_time() - cpu)
    stats = frontier.stats(now)
    largest = ", ".join(f"{c * 1e3:.1f}" for c in sorted(costs, reverse=True)[:3])
    print(f"{args.hosts:,} hosts due together: first lease call {costs[0] * 1e3:.1f} ms CPU, largest "
          f"{largest} ms, {args.calls} calls {sum(costs) * 1e3:.1f} ms; then ready {stats.hosts_ready:,}, "
          f"waiting {stats.hosts_waiting:,}")


if __name__ == "__main__":
    main()
