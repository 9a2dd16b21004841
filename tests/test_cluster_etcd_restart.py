"""etcd stopped under a running 3-node cluster and started again with its data (issue 32), with real
processes. No node died, so no slice may change owner: the nodes fence themselves while etcd is down
(ownership rule 5), then renew the same leases, or register again, and keep their slices; fetching
resumes soon after etcd is back, every page is fetched, and the server sees no host asked too fast.
The restart runs alone, with a fourth node started while etcd is down (it tries to reach etcd again and
again, each try logged at WARNING, polecat/processes/machine.py rule 12; once etcd is back it registers
and gets its share), or with a node leaving gracefully while etcd is down (SIGTERM: it
cannot flag itself leaving nor hand over while fenced, so it exits 0 and its slices go to the others,
restored from its checkpoint). With a join or a leave slices do change owner: those variants check
coverage, violations, a refetch bound (a fifth of the pages; with a leave, the leaver's share), that
every slice is owned by the members left at the end, and the leaver's exit (0, within 3 TTLs of
SIGTERM, etcd still down: its fenced hand-over stops at once and each etcd call of its close is bounded
by ttl / 3)."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

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
DURING = {"alone": (None, TTL), "a-node-joins-while-etcd-is-down": ("join", TTL),
          "a-node-leaves-while-etcd-is-down": ("leave", TTL), "alone-at-ttl-2": (None, 2)}
"""What else happens while etcd is down (nothing, a fourth node joins, or a node is SIGTERMed), and the
lease TTL. At TTL 2 a renewal is in flight most of the time while etcd is down, so a connection closed
under it by another call's failure (cluster/aetcd_client.py rule 6) ended the renew loop silently: a
node lost its lease after the restart with its event loop running."""


async def owners(endpoint: str) -> dict[str, str]:
    """Owner key -> node, read from etcd."""
    client = AetcdClient(endpoint)
    try:
        kvs, _ = await client.get_prefix(f"/{fo.CLUSTER}/owner/")
    finally:
        await client.close()
    return {k: v.decode() for k, v in kvs.items()}


async def settled_owners(endpoint: str, members: set[str]) -> dict[str, str]:
    """Owner keys once every slice is owned by exactly ``members`` (polled, bounded)."""
    found: dict[str, str] = {}
    for _ in range(150):  # bounded: the join's or leave's hand-overs settle within seconds
        found = await owners(endpoint)
        if len(found) == SLICES and set(found.values()) == members:
            break
        await asyncio.sleep(0.2)
    return found


@pytest.mark.parametrize(("during", "ttl"), DURING.values(), ids=DURING.keys())
@pytest.mark.slow
async def test_etcd_restarted_under_a_running_cluster_moves_no_slice(
        during: str | None, ttl: int, test_web: TestWebFactory, etcd_server: EtcdServer,
        tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=34, crawl_delays=DELAYED))
    truth = web.ground_truth("host")
    joiner = "e3" if during == "join" else None
    leaver = NODES[1] if during == "leave" else None
    every = NODES + ((joiner,) if joiner else ())
    stay = set(every) - {leaver}
    logs = {n: tmp_path / f"{n}.log" for n in every}
    confs = fo.cluster_confs(web, etcd_server.endpoint, tmp_path, every, first_ip=70, rate=RATE, ttl=ttl)
    procs = {n: fo.start_node(confs[n], logs[n]) for n in NODES}
    try:
        await fo.until(lambda: len(set(fo.page_urls(web))) >= len(truth) // 3, 90, "a third of the pages")
        before = await settled_owners(etcd_server.endpoint, set(NODES))
        assert len(before) == SLICES and set(before.values()) == set(NODES)
        offsets = {n: logs[n].stat().st_size for n in NODES}
        await asyncio.to_thread(etcd_server.halt)
        await asyncio.sleep(ttl)  # every node is fenced (no renewal for ttl / 2)
        exit_task = None
        if joiner:  # no etcd at start: it tries again and again (machine rule 12)
            procs[joiner] = fo.start_node(confs[joiner], logs[joiner])
        if leaver:
            procs[leaver].send_signal(signal.SIGTERM)
            exit_task = asyncio.create_task(fo.wait_exit(procs[leaver], 3 * ttl))
        await asyncio.sleep(2 * ttl)  # every lease's TTL runs out while etcd is down
        if exit_task:  # it exits while etcd is still down
            code = await exit_task
            assert code == 0, logs[leaver].read_text()[-3000:]
        await asyncio.to_thread(etcd_server.start)
        healthy = time.monotonic()
        if joiner:  # still trying (cluster.etcd_start_wait, 60 s), it registers and gets its share
            assert procs[joiner].poll() is None, logs[joiner].read_text()[-3000:]
            assert "etcd not reachable at start-up (try 2)" in logs[joiner].read_text()
        await fo.every_page(web, truth, 120, "every page after etcd came back")
        after = await settled_owners(etcd_server.endpoint, stay)
        since = {n: logs[n].read_bytes()[offsets[n]:].decode() for n in NODES}  # before the stop's hand-over
        await fo.stop_all({n: p for n, p in procs.items() if n != leaver}, logs)
    finally:
        fo.kill_rest(procs.values())
    # A member lost from the list (its lease expired) shows as a restore of its slices, or URLs re-routed
    # away from it; a node that lost its own lease says it re-registers. (A hand-over may still ship
    # stray URLs, ownership rule 7: that moves no slice.)
    churn = [m[0] for text in since.values() for m in re.finditer(
        f"{fo.RESTORED.pattern}|re-registering|for members that left|before it left", text)]
    resumed = min(r.start for r in web.log if r.start > healthy) - healthy
    violations = politeness_violations(web.log, web.min_intervals(RATE))
    twice = fo.refetched(web)
    print(f"\netcd down {3 * ttl} s{fo.also(joiner, leaver)}: fetching resumed {resumed:.2f} s after it "
          f"was back, {len(churn)} lost leases or members, {twice} of {len(truth)} pages fetched twice, "
          f"{len(violations)} violations")
    assert violations == [], violations[:5]
    # A join or a leave moves slices. At TTL 2 a node must renew within 2 s of etcd's return; on a loaded
    # machine it may not, and then fences and re-registers as it must: that is timing, not a rule, so
    # this variant checks what holds whatever the load (the lost leases are printed above).
    if during or ttl < TTL:  # each slice is owned by a member left, and few pages twice
        assert len(after) == SLICES and set(after.values()) == stay, Counter(after.values())
        # A leaver, fenced while etcd is down, cannot hand over: its slices restart from its last
        # checkpoint round, so what it fetched after that round is fetched again; on a loaded machine its
        # rounds lag (78 of 310 once in CI), but at most its own share (a third of the slices) restarts.
        assert twice <= (0.35 if leaver else 0.2) * len(truth)
        return
    assert after == before  # no slice changed owner
    assert churn == [], churn
    assert resumed <= ttl + 1.0  # within one lease (and a second of a loaded machine) of etcd's return
