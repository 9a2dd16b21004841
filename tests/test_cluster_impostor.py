"""Members prove they belong (cluster/member_records.py): the etcd impostor attack of issue 33, against
real ``polecat node`` processes. With a two-node cluster paused on its seeds, someone who can write to
etcd registers ``/<name>/members/evil`` (and ``evil2``, with a forged signature) under a lease of their
own, with the address of a listener they own that acknowledges everything. No batch or bundle reaches
that listener, every slice stays owned, no queued URL is lost, and each node counts and logs the records
it ignores. (Before signed records: 28 bundles were POSTed to the listener within seconds.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from polecat.cluster.aetcd_client import AetcdClient
from polecat.cluster.auth import hmac_signer, hmac_verifier
from polecat.cluster.member_records import MemberRecords
from polecat.cluster.membership import Member
from polecat.frontier.slices import SLICES
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import CLUSTER, kill_rest, loopback_port, node_toml, start_node, stop_all
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

WATCH_AFTER = 5.0
"""Seconds the test keeps watching after both nodes ignored the impostors: more than two reconcile
rounds (machine.py RECONCILE_EVERY) and one lease renewal (its re-read of the member list)."""


async def _get(http: aiohttp.ClientSession, address: str, path: str) -> Any:
    async with http.get(address + path) as resp:
        assert resp.status == 200, await resp.text()
        return await (resp.json() if path != "/metrics" else resp.text())


async def _standing(http: aiohttp.ClientSession, nodes: list[str]) -> tuple[int, int, int, float]:
    """Slices owned, stray URLs and URLs queued, summed over ``nodes``, and the fewest member records
    one of them ignored."""
    owned = stray = queued = 0
    ignored = float("inf")
    for address in nodes:
        cluster = await _get(http, address, "/admin/cluster/status")
        owned, stray = owned + cluster["slices_owned"], stray + cluster["stray_urls"]
        queued += (await _get(http, address, "/admin/crawl/status"))["queued"]
        metrics = await _get(http, address, "/metrics")
        ignored = min(ignored, sum(float(line.split()[-1]) for line in metrics.splitlines()
                                   if line.startswith("polecat_cluster_members_ignored_total ")))
    return owned, stray, queued, ignored


async def test_an_impostor_registered_in_etcd_is_handed_nothing_and_no_url_is_lost(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    webs = test_web(SiteSpec(hosts=40, pages_per_host=5, seed=7))
    seen: list[str] = []

    async def everything(request: web.Request) -> web.Response:  # the attacker acknowledges it all
        seen.append(request.path)
        await request.read()
        return web.Response(text="adopted")

    app = web.Application(client_max_size=300 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", everything)
    runner = web.AppRunner(app)
    await runner.setup()
    evil = f"http://127.0.0.1:{loopback_port('127.0.0.1')}"
    await web.TCPSite(runner, "127.0.0.1", int(evil.rsplit(":", 1)[1])).start()
    listen = [f"127.0.0.{60 + k}:{loopback_port(f'127.0.0.{60 + k}')}" for k in range(2)]
    nodes = [f"http://{a}" for a in listen]
    procs: list[subprocess.Popen[bytes]] = []
    attacker = AetcdClient(etcd_server.endpoint)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            for k in range(2):
                conf = tmp_path / f"n{k}.toml"
                conf.write_text(node_toml(webs, tmp_path / f"n{k}", listen[k], etcd_server.endpoint, f"n{k}",
                                          "", rate=0.2, ttl=3, interval=60.0))
                procs.append(start_node(conf, tmp_path / f"n{k}.log"))
            for address in nodes:  # the cluster paused on its seeds
                await _until_answers(http, address)
                async with http.post(address + "/admin/pause", json={}) as resp:
                    assert resp.status == 200, await resp.text()
            settled: list[tuple[int, int, int, float]] = []

            async def settle() -> bool:
                settled.append(await _standing(http, nodes))
                return len(settled) >= 3 and settled[-1][:2] == (SLICES, 0) and settled[-1] == settled[-3]

            await _until(settle, 60, "the two nodes to own every slice, with no stray URL")
            before = settled[-1][2]
            assert before > 0

            lease = await attacker.grant(30)
            record: dict[str, Any] = {"address": evil, "lease": lease, "leaving": False}
            await attacker.put(f"/{CLUSTER}/members/evil", json.dumps(record).encode(), lease)
            guess = "a guess at the secret, but wrong"
            forged = MemberRecords(CLUSTER, hmac_signer(guess), hmac_verifier(guess))
            await attacker.put(f"/{CLUSTER}/members/evil2", forged.encode(Member("evil2", evil, lease=lease)),
                               lease)

            async def noticed() -> bool:  # the forged one at least (the logs show both, below)
                return (await _standing(http, nodes))[3] >= 1

            await _until(noticed, 30, "both nodes to ignore the impostors")
            await asyncio.sleep(WATCH_AFTER)
            await attacker.revoke(lease)
            await asyncio.sleep(1.0)
            owned, stray, queued, _ = await _standing(http, nodes)
        assert seen == [], f"the impostor's listener was sent {seen[:5]}"
        assert (owned, stray) == (SLICES, 0)
        assert queued >= before, f"queued URLs were lost: {before} before, {queued} after"
        await stop_all({f"n{k}": p for k, p in enumerate(procs)},
                       {f"n{k}": tmp_path / f"n{k}.log" for k in range(len(procs))})
    finally:
        kill_rest(procs)
        await attacker.close()
        await runner.cleanup()
    for k in range(2):
        log = (tmp_path / f"n{k}.log").read_text()
        assert "ignoring the member record of 'evil': unsigned" in log
        assert "ignoring the member record of 'evil2': its signature does not verify" in log


async def _until_answers(http: aiohttp.ClientSession, address: str) -> None:
    """Wait (60 s at most) for a node's API to answer."""

    async def answers() -> bool:
        try:
            async with http.get(address + "/admin/crawl/status") as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False

    await _until(answers, 60, f"{address} to answer")


async def _until(cond: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    """Poll ``cond`` every 0.2 s (AssertionError naming ``what`` after ``within`` seconds)."""
    deadline = time.monotonic() + within
    while not await cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)
