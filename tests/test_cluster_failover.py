"""Failover with real processes: three ``polecat node`` processes share a crawl with slice checkpoints in
an object store; one is SIGKILLed mid-crawl and its data dir deleted. Its slices resume on the others
from its last checkpoint, and the URLs it had accepted since come back from the senders' outboxes: every
page is fetched, no host is asked too fast, and every stored record verifies.

Prints the failover figures of benchmarks/README.md (``python -m pytest -s tests/test_cluster_failover.py``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from polecat.cluster.aetcd_client import AetcdClient
from polecat.cluster.ring import Ring
from polecat.dedup.canon import host_key
from polecat.frontier.slices import slice_of
from polecat.testing.etcd import EtcdServer
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests
from tests.service_helpers import wait_for
from tests.test_cluster_nodes import _port
from tests.test_cluster_processes import _toml

RATE = 10.0
NODES = ["n0", "n1", "n2"]
RESTORED = re.compile(r"restored (\d+) slices of (\S+) from its checkpoint round (\d+) \((\d+) URLs queued\) "
                      r"in ([0-9.]+) s")


async def test_a_killed_node_with_its_disk_lost_resumes_on_the_others_from_object_storage(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=12, pages_per_host=40, seed=14))
    truth = web.ground_truth("host")
    env = {**os.environ, "POLECAT_CLUSTER_SECRET": "the secret of the failover test"}
    ring = Ring(NODES)
    victim = max(NODES, key=lambda n: sum(ring.owner(slice_of(host_key(u))) == n for u in truth))
    victim_hosts = {host_key(u) for u in truth if ring.owner(slice_of(host_key(u))) == victim}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for k, node in enumerate(NODES):
            host = f"127.0.0.{40 + k}"
            conf = tmp_path / f"{node}.toml"
            conf.write_text(_toml(web.seeds, web.dns_address, tmp_path / node, f"{host}:{_port(host)}",
                                  etcd_server.endpoint, node, ttl=2)
                            + f'checkpoints = "file://{tmp_path}/ckpt"\ncheckpoint_interval = 0.5\n')
            with (tmp_path / f"{node}.log").open("wb") as log:
                cmd = [sys.executable, "-m", "polecat.cli", "node", "--config", str(conf), "--log-level",
                       "info"]
                procs[node] = subprocess.Popen(cmd, env=env, stderr=log)  # noqa: ASYNC220 - started, not waited
        await wait_for(lambda: len(set(page_requests(web))) >= len(truth) // 3, 90, "a third of the pages")
        procs[victim].kill()
        procs[victim].wait(10)
        killed = time.monotonic()
        shutil.rmtree(tmp_path / victim)  # its disk is lost
        expired = await _lease_expiry(etcd_server, victim, 30)
        await wait_for(lambda: set(page_requests(web)) >= truth, 120, "every page")
        for node in NODES:
            if node != victim:
                procs[node].send_signal(signal.SIGTERM)
                assert procs[node].wait(60) == 0, (tmp_path / f"{node}.log").read_text()[-3000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    fetched = Counter(page_requests(web))
    assert set(fetched) == truth
    assert politeness_violations(web.log, web.min_intervals(RATE)) == []
    twice = [u for u, n in fetched.items() if n > 1]
    # Only the dead node's pages fetched after its last checkpoint are fetched again (at-least-once).
    assert sum(host_key(u) not in victim_hosts for u in twice) <= 0.02 * len(truth), twice
    for node in NODES:
        if node != victim:
            verify = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "polecat.cli", "store", "verify", str(tmp_path / node),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            out = (await asyncio.wait_for(verify.communicate(), 60))[0]
            assert verify.returncode == 0, out.decode()
    restores = [m for node in NODES if node != victim
                for m in RESTORED.finditer((tmp_path / f"{node}.log").read_text())]
    assert restores and all(m[2] == victim for m in restores)
    slices_moved = sum(int(m[1]) for m in restores)
    assert slices_moved == len(ring.slices_of(victim))  # every slice of the dead node was restored
    first = min(r.start for r in web.log if r.start > expired and host_key(r.url) in victim_hosts)
    print(f"\nfailover: lease expired {expired - killed:.2f} s after SIGKILL (ttl 2 s); first fetch on a new "
          f"owner {first - expired:.2f} s after expiry; {slices_moved} slices restored in "
          f"{max(float(m[5]) for m in restores):.3f} s "
          f"({1000 * sum(float(m[5]) for m in restores) / slices_moved:.2f} ms per slice); "
          f"{len(twice)} of {len(truth)} pages fetched twice")


async def _lease_expiry(etcd: EtcdServer, node: str, within: float) -> float:
    """When ``node``'s member key disappeared from etcd (its lease expired), by polling every 20 ms."""
    client = AetcdClient(etcd.endpoint)
    try:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            kvs, _ = await client.get_prefix("/p/members/")
            if f"/p/members/{node}" not in kvs:
                return time.monotonic()
            await asyncio.sleep(0.02)
    finally:
        await client.close()
    raise AssertionError(f"{node}'s lease did not expire within {within} s")
