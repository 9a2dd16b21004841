"""A node cut off from etcd by a partition while a slow request of its own is in flight, with real
processes (issue 32). The node fences itself within ``ttl / 2``; its request runs on while its lease
lasts by its own clock, then is aborted (ownership rule 10: its URL stays queued); the heirs restore its
slices once etcd expires its lease and wait its abort bound before a restored host's first request
(rule 11). The server must never see the slow host asked by two owners at once or too close together
(Crawl-delay included); when the partition heals, the node registers again and gets its share back, and
every page is fetched. The cut runs alone, with a fourth node joining during it, or with the slow host's
heir leaving gracefully during it (SIGTERM: it hands what it restored to the one that stays)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from polecat.cluster.ring import Ring
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.testing import failover as fo
from polecat.testing.etcd import EtcdServer
from polecat.testing.partition import Partition
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import CLIENT_GONE
from tests.conftest import TestWebFactory

RATE = 20.0
TTL = 2
SEND_SLACK = 0.5
"""Seconds between a node's send and the test web's record of the request's start (loop turns)."""
SLOW_S = 10.0
"""The slow answer: far past the lease and the abort bound, so only the abort ends it before the heir
may ask the host (the issue's fleet test had pages taking 6 s against a 4 s lease)."""
DELAYED = tuple((f"h0{k}.test", 0.1) for k in range(1, 5))
NODES = ("c0", "c1", "c2")
DURING = {"alone": None, "a-node-joins-while-it-is-cut-off": "join",
          "a-node-leaves-while-it-is-cut-off": "leave"}
"""What else happens while the node is cut off: nothing, a fourth node joins, or the slow host's heir
leaves gracefully."""


@pytest.mark.parametrize("during", DURING.values(), ids=DURING.keys())
@pytest.mark.slow
async def test_a_node_cut_off_from_etcd_mid_request_loses_its_slices_politely(
        during: str | None, test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=35, crawl_delays=DELAYED))
    truth = web.ground_truth("host")
    ring = Ring(NODES)
    hosts = {host_key(u): urlsplit(u).hostname or "" for u in truth}
    cut = max(NODES, key=lambda n: sum(ring.owner(slice_of(h)) == n for h in hosts))
    slow_key = min(h for h in hosts if ring.owner(slice_of(h)) == cut)
    slow = hosts[slow_key]
    heir = Ring([n for n in NODES if n != cut]).owner(slice_of(slow_key))
    joiner = "c3" if during == "join" else None
    leaver = heir if during == "leave" else None
    others = tuple(n for n in NODES if n != cut) + ((joiner,) if joiner else ())
    proxy = await Partition.start("127.0.0.1", etcd_server.client_port)
    confs = fo.cluster_confs(web, etcd_server.endpoint, tmp_path, others, first_ip=80, rate=RATE, ttl=TTL)
    confs |= fo.cluster_confs(web, f"http://127.0.0.1:{proxy.port}", tmp_path, (cut,), first_ip=90,
                              rate=RATE, ttl=TTL)
    logs = {n: tmp_path / f"{n}.log" for n in confs}
    procs = {n: fo.start_node(confs[n], logs[n]) for n in NODES}
    try:
        await fo.until(lambda: len(set(fo.page_urls(web))) >= len(truth) // 3, 90, "a third of the pages")
        web.respond(slow, "*", None, delay=SLOW_S, times=1)  # the next request to it is slow
        await fo.until(lambda: web.in_flight(slow) == 1, 30, f"{cut}'s request to {slow}")
        proxy.cut()
        cut_at, cut_wall = time.monotonic(), time.time()
        if joiner:
            procs[joiner] = fo.start_node(confs[joiner], logs[joiner])
        await asyncio.sleep(1.5 * TTL)  # its lease has expired: the heirs are restoring its slices
        if leaver:
            procs[leaver].send_signal(signal.SIGTERM)
        await asyncio.sleep(1.5 * TTL)
        proxy.heal()
        if leaver:
            assert await fo.wait_exit(procs[leaver], 60) == 0, logs[leaver].read_text()[-3000:]
        await fo.every_page(web, truth, 120, "every page after the partition")
        await fo.stop_all({n: p for n, p in procs.items() if n != leaver}, logs)
    finally:
        fo.kill_rest(procs.values())
        await proxy.close()
    slow_one = next(r for r in web.log if r.host == slow and r.start < cut_at and r.end > cut_at)
    violations = politeness_violations(web.log, web.min_intervals(RATE))
    twice = fo.refetched(web)
    print(f"\n{cut} cut off from etcd for {3 * TTL} s{fo.also(joiner, leaver)}: its request to {slow} ended "
          f"{slow_one.end - cut_at:.2f} s after the cut (status {slow_one.status}), {len(violations)} "
          f"violations, {twice} of {len(truth)} pages fetched twice")
    if slow_one.status != CLIENT_GONE and _lease_lost_before(logs.values(), cut_wall):
        # The premise failed: a node's lease ran out before the cut (a loaded machine at TTL 2), slices
        # moved, and the slow request in flight at the cut was another node's, which rightly went on.
        pytest.skip("a lease expired before the cut: the slow request was not the cut node's")
    assert slow_one.status == CLIENT_GONE  # aborted (rule 10), not left to run its SLOW_S
    # No host asked by two owners at once or too close together: the abort ended the slow request
    # before the heir's first request to its host, which waited the abort bound (rule 11).
    assert violations == [], violations[:5]
    # What the node fetched after the snapshot of its last shipped checkpoint round, up to its fence, is
    # fetched again by its heirs (at-least-once), and nothing else: that snapshot is at most INTERVAL +
    # ROUND_S old, and the node sends nothing once its lease's deadline has passed (ownership rule 10: at
    # most TTL after the cut, its last renewal being before it; SEND_SLACK for the server's clock to see
    # the request start). How many pages that window holds grows with the crawl's speed (23-57 of 308
    # over the runs when this test had a flat 20 % bound, 29-83 once claims got cheaper), so the window is
    # the bound, not a share of the pages; and the rounds the node logged say how long its rounds took.
    firsts = fo.refetched_since(web, cut_at)
    assert firsts == [] or firsts[0] >= -fo.round_allowance(logs[cut], cut_wall), firsts[:5]
    assert firsts == [] or firsts[-1] <= TTL + SEND_SLACK, firsts[-5:]


def _lease_lost_before(logs: Iterable[Path], wall: float) -> bool:
    """Whether a node's log says its etcd lease expired before ``wall`` (seconds since the epoch)."""
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            stamp = line.split(" ", 1)[0]
            if "etcd lease expired" in line and datetime.fromisoformat(stamp).timestamp() < wall:
                return True
    return False
