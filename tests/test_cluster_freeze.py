"""A node frozen for three lease TTLs (SIGSTOP, then SIGCONT: a GC pause, a paused VM), with real
processes (issue 32). Its lease expires while it sleeps; its slices move to the others, restored from its
checkpoint. When it wakes it must not fetch for what it no longer owns (not even a request leased just
before the freeze: ownership rule 10), nor hand over what it decided under the lease that is gone: the
server sees no host asked too fast, and every page is fetched."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import pytest

from polecat.cluster.ring import Ring
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import (
    cluster_confs,
    kill_rest,
    page_urls,
    start_node,
    stop_all,
    until,
)
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

RATE = 20.0
DELAYED = tuple((f"h0{k}.test", 0.1) for k in range(1, 5))
"""Half the hosts ask for a Crawl-delay of twice the rate's interval (the issue's fleet test)."""
TTL = 2
NODES = ("f0", "f1", "f2")


@pytest.mark.parametrize("joiner", [None, "f3"], ids=["alone", "a-node-joins-during-it"])
async def test_a_node_frozen_for_three_ttls_wakes_without_fetching_what_it_lost(
        joiner: str | None, test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """With ``joiner``, a fourth node joins while the frozen one sleeps: slices move to it from the
    heirs (restored a moment ago) and from the frozen node once it wakes and registers again."""
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=33, crawl_delays=DELAYED))
    truth = web.ground_truth("host")
    ring = Ring(NODES)
    frozen = max(NODES, key=lambda n: sum(ring.owner(slice_of(host_key(u))) == n for u in truth))
    every = NODES + ((joiner,) if joiner else ())
    logs = {n: tmp_path / f"{n}.log" for n in every}
    confs = cluster_confs(web, etcd_server.endpoint, tmp_path, every, first_ip=60, rate=RATE, ttl=TTL)
    procs = {n: start_node(confs[n], logs[n]) for n in NODES}
    try:
        await until(lambda: len(set(page_urls(web))) >= len(truth) // 3, 90, "a third of the pages")
        procs[frozen].send_signal(signal.SIGSTOP)
        if joiner:
            await asyncio.sleep(1.5 * TTL)  # its lease has expired: the heirs are restoring its slices
            procs[joiner] = start_node(confs[joiner], logs[joiner])
            await asyncio.sleep(1.5 * TTL)
        else:
            await asyncio.sleep(3 * TTL)
        procs[frozen].send_signal(signal.SIGCONT)
        await until(lambda: set(page_urls(web)) >= truth, 120, "every page after the freeze")
        await stop_all(procs, logs)
    finally:
        kill_rest(procs.values())
    violations = politeness_violations(web.log, web.min_intervals(RATE))
    twice = sum(n > 1 for n in Counter(page_urls(web)).values())
    print(f"\nfreeze of {frozen} for {3 * TTL} s{f', {joiner} joining' if joiner else ''}: {len(violations)} "
          f"violations, {twice} of {len(truth)} pages fetched twice")
    # What the frozen node fetched after its last checkpoint is fetched again by its heirs (at-least-once).
    assert twice <= 0.2 * len(truth)
    # The woken node sends nothing under its expired lease (ownership rule 10: the send gate, the abort
    # of requests in flight) and its heirs wait its abort bound before a restored host's first request
    # (rule 11): no host is asked by two owners too close together, Crawl-delay included.
    assert violations == [], violations[:5]
