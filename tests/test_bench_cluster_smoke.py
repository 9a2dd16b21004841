"""Smoke tests of the cluster benchmarks' plumbing (benchmarks/bench_ring.py, bench_nodes.py) at tiny
sizes; the figures themselves are only checked for what must hold in any correct run."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.bench_nodes import one
from benchmarks.bench_ring import measure
from polecat.testing.etcd import EtcdServer


def test_bench_ring_measures_the_balanced_ring_exactly_and_the_old_one_drifting() -> None:
    balanced = measure(16, 2, 2, seed=1)
    assert balanced["max_dev"] == balanced["min_dev"] == 0.0  # 16 divides 4096
    assert 1.0 <= balanced["join_mean"] <= balanced["join_max"]
    legacy = measure(16, 2, 1, seed=1)
    assert legacy["max_dev"] > 0 > legacy["min_dev"] and legacy["join_max"] == 1.0


async def test_bench_nodes_runs_one_node_to_full_coverage(etcd_server: EtcdServer, tmp_path: Path) -> None:
    # The benchmark starts an etcd of its own; the fixture skips where etcd is not installed.
    args = argparse.Namespace(hosts=4, pages_per_host=3, seed=7, rate=20.0, ttl=3, within=60.0)
    row = await one(1, args, tmp_path)
    assert row["pages"] > 0 and row["pages_per_s"] > 0 and row["cpu_ms_per_page"] >= 0
    assert row["violations"] == 0 and row["twice"] == 0 and row["exit_codes_nonzero"] == 0
