"""Slice balance and movement of the Ring (polecat/cluster/ring.py), sans-IO.

    python -m benchmarks.bench_ring --sets 200 --members 4 16

For each member count, builds the Ring over ``--sets`` random member-id sets (ids like a node's:
``node-<8 hex>``) and reports the largest and smallest share as a deviation from the mean ``S / n``
(the issue asks for within +-10 %), then for each set a join (one more random id) and a leave (the first
id goes) as slices moved per least possible move (the newcomer's share; the leaver's share). Both Ring
versions are measured: 1 is plain rendezvous, 2 (the current) the capacity-bounded one.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter

from polecat.cluster.ring import RING_VERSION, Ring
from polecat.frontier.slices import SLICES


def _ids(rng: random.Random, n: int) -> list[str]:
    return [f"node-{rng.getrandbits(32):08x}" for _ in range(n)]


def measure(n: int, sets: int, version: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    devs: list[float] = []
    joins: list[float] = []
    leaves: list[float] = []
    built = 0.0
    mean = SLICES / n
    for _ in range(sets):
        ids = _ids(rng, n)
        started = time.perf_counter()
        ring = Ring(ids, version=version)
        built += time.perf_counter() - started
        counts = Counter(ring.owner(s) for s in range(SLICES))
        devs += [(counts[m] - mean) / mean for m in ids]
        newcomer = _ids(rng, 1)
        joined = Ring([*ids, *newcomer], version=version)
        joins.append(len(ring.moves(joined)) / len(joined.slices_of(newcomer[0])))
        left = Ring(ids[1:], version=version) if n > 1 else ring
        leaves.append(len(ring.moves(left)) / max(1, counts[ids[0]]))
    return {"max_dev": max(devs), "min_dev": min(devs), "join_mean": statistics.mean(joins),
            "join_max": max(joins), "leave_mean": statistics.mean(leaves), "leave_max": max(leaves),
            "build_ms": 1000 * built / sets}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=200, help="random member-id sets per member count")
    ap.add_argument("--members", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print("| members | ring | max share | min share | join moves / least (mean, max) | "
          "leave moves / least (mean, max) | build ms |")
    print("|---|---|---|---|---|---|---|")
    for n in args.members:
        for version in (1, RING_VERSION):
            r = measure(n, args.sets, version, args.seed)
            print(f"| {n} | v{version} | {r['max_dev']:+.1%} | {r['min_dev']:+.1%} | "
                  f"{r['join_mean']:.3f}, {r['join_max']:.3f} | "
                  f"{r['leave_mean']:.3f}, {r['leave_max']:.3f} | {r['build_ms']:.1f} |")


if __name__ == "__main__":
    main()
