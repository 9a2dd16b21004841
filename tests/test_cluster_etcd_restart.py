"""etcd stopped under a running 3-node cluster and started again with its data (issue 32), with real
processes. No node died, so no slice may change owner: the nodes fence themselves while etcd is down
(ownership rule 5), then renew the same leases, or register again, and keep their slices; fetching
resumes soon after etcd is back, every page is fetched, and the server sees no host asked too fast."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from pathlib import Path

from polecat.cluster.aetcd_client import AetcdClient
from polecat.frontier.slices import SLICES
from polecat.testing import failover as fo
from polecat.testing.etcd import EtcdServer
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

RATE = 20.0
TTL = 4
"""The issue's fleet test: with a lease of a few seconds, every node must reach etcd again within
TTL + its election timeout of etcd's return, which leases get then (etcd promotes them)."""
NODES = ("e0", "e1", "e2")
DELAYED = tuple((f"h0{k}.test", 0.1) for k in range(1, 5))


async def owners(endpoint: str) -> dict[str, str]:
    """Owner key -> node, read from etcd."""
    client = AetcdClient(endpoint)
    try:
        kvs, _ = await client.get_prefix(f"/{fo.CLUSTER}/owner/")
    finally:
        await client.close()
    return {k: v.decode() for k, v in kvs.items()}


async def test_etcd_restarted_under_a_running_cluster_moves_no_slice(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=34, crawl_delays=DELAYED))
    truth = web.ground_truth("host")
    logs = {n: tmp_path / f"{n}.log" for n in NODES}
    confs = fo.cluster_confs(web, etcd_server.endpoint, tmp_path, NODES, first_ip=70, rate=RATE, ttl=TTL)
    procs = {n: fo.start_node(confs[n], logs[n]) for n in NODES}
    try:
        await fo.until(lambda: len(set(fo.page_urls(web))) >= len(truth) // 3, 90, "a third of the pages")
        before: dict[str, str] = {}
        for _ in range(100):  # bounded: the join's hand-overs settle within seconds
            before = await owners(etcd_server.endpoint)
            if len(before) == SLICES:
                break
            await asyncio.sleep(0.2)
        assert len(before) == SLICES and set(before.values()) == set(NODES)
        offsets = {n: logs[n].stat().st_size for n in NODES}
        await asyncio.to_thread(etcd_server.halt)
        await asyncio.sleep(3 * TTL)  # every lease's TTL runs out while etcd is down
        await asyncio.to_thread(etcd_server.start)
        healthy = time.monotonic()
        await fo.until(lambda: set(fo.page_urls(web)) >= truth, 120, "every page after etcd came back")
        after = await owners(etcd_server.endpoint)
        since = {n: logs[n].read_bytes()[offsets[n]:].decode() for n in NODES}  # before the stop's hand-over
        await fo.stop_all(procs, logs)
    finally:
        fo.kill_rest(procs.values())
    # A member lost from the list (its lease expired) shows as a restore of its slices, or URLs re-routed
    # away from it; a node that lost its own lease says it re-registers. (A hand-over may still ship
    # stray URLs, ownership rule 7: that moves no slice.)
    churn = [m[0] for text in since.values() for m in re.finditer(
        f"{fo.RESTORED.pattern}|re-registering|for members that left|before it left", text)]
    resumed = min(r.start for r in web.log if r.start > healthy) - healthy
    violations = politeness_violations(web.log, web.min_intervals(RATE))
    twice = sum(n > 1 for n in Counter(fo.page_urls(web)).values())
    print(f"\netcd down {3 * TTL} s: fetching resumed {resumed:.2f} s after it was back, {len(churn)} lost "
          f"leases or members, {twice} of {len(truth)} pages fetched twice, {len(violations)} violations")
    assert after == before  # no slice changed owner
    assert churn == [], churn
    assert violations == [], violations[:5]
    assert resumed <= TTL + 1.0  # within one lease (and a second of a loaded machine) of etcd's return
