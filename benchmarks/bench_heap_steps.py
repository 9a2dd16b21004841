"""The heaps' rebuild of polecat/frontier/host_table.py (rules 18, 20 and 23) at the working-set bound:
the three heaps at once, as a commit on the loop makes it, against each step of the periodic commit's.

    python -m benchmarks.bench_heap_steps --hosts 50000 --repeat 7

A host table (over a memory database: the rebuild reads none) holds ``--hosts`` scheduled hosts at
random times, a third of them warm and a tenth parked, each scheduled twice (so half the ready heap's
entries are stale, as at a rebuild of rule 20); the heaps are rebuilt ``--repeat`` times each way. Times
are CPU seconds of this thread (``time.thread_time``), the median and the longest.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from polecat.config import PolitenessConfig
from polecat.frontier.host_table import HostTable
from polecat.frontier.traps import ShapeBudget
from polecat.testing.fakes import MemoryFrontierDB


def table_of(hosts: int, rng: random.Random) -> HostTable:
    """A table with ``hosts`` hosts scheduled twice each (the module docstring)."""
    table = HostTable(MemoryFrontierDB(), PolitenessConfig(), ShapeBudget(100), working_hosts=hosts)
    names = [f"h{i}.breadth.test" for i in range(hosts)]
    for i, host in enumerate(names):
        if i % 3 == 0:
            table.warm[host] = 0.0
        if i % 10 == 0:
            table.parked[host] = ""
    for host in names + names:
        table.schedule(host, 1.7e9 + rng.random() * 600)
    return table


def timed(work: Callable[[], object]) -> float:
    began = time.thread_time()
    work()
    return time.thread_time() - began


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    rng = random.Random(1)
    whole: list[float] = []
    steps: list[list[float]] = [[], [], []]
    for _ in range(args.repeat):
        table = table_of(args.hosts, rng)
        whole.append(timed(table._rebuild_heaps))
        table = table_of(args.hosts, rng)
        table.heaps_in_steps = True
        table._rebuild_heaps()
        for kept in steps:
            kept.append(timed(table.heaps_step))

    def line(name: str, times: list[float]) -> str:
        return f"{name}: median {1000 * statistics.median(times):.1f} ms, longest {1000 * max(times):.1f} ms"

    print(f"{args.hosts} hosts scheduled, {args.repeat} rebuilds each way (CPU of this thread)")
    print(line("three heaps at once", whole))
    names = ("step 1: the ready heap", "step 2: the due heap", "step 3: the warm heap")
    for name, times in zip(names, steps, strict=True):
        print(line(name, times))


if __name__ == "__main__":
    main()
