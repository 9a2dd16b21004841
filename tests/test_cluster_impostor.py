"""Members prove they belong (cluster/member_records.py): the etcd impostor attack of issue 33. With a
two-node cluster paused on its seeds, someone who can write to etcd registers ``/<name>/members/evil``
(and a record with a forged signature) under a lease of their own, with the address of a listener they
own that acknowledges everything. No batch or bundle reaches that listener, the nodes' member lists
never name it, and no queued URL is lost; the records are counted and logged as ignored."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from polecat.cluster.aetcd_client import AetcdClient
from polecat.cluster.auth import hmac_signer, hmac_verifier
from polecat.cluster.member_records import MemberRecords
from polecat.cluster.membership import Member
from polecat.processes.machine import ClusterNode
from polecat.processes.service_runner import NodeService
from polecat.testing.etcd import EtcdServer
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config
from tests.service_helpers import start_node, wait_for

SECRET = "the secret of the impostor test cluster"
WATCH_AFTER = 5.0
"""Seconds the test keeps watching after both nodes ignored the impostors: more than two reconcile
rounds (machine.py RECONCILE_EVERY) and one lease renewal (its re-read of the member list)."""


def _port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _cluster(svc: NodeService) -> ClusterNode:
    assert svc.cluster is not None
    return svc.cluster


def _queued(nodes: list[NodeService]) -> int:
    total = 0
    for svc in nodes:
        assert svc._crawler is not None
        total += svc._crawler.frontier.queued
    return total


def _settled(nodes: list[NodeService]) -> bool:
    for svc in nodes:
        cluster, crawler = svc.cluster, svc._crawler
        assert cluster is not None and crawler is not None
        own = cluster.membership.ownership
        if own.wanted != own.held or own.strays(crawler.frontier.unowned_queued()) or cluster.outbox.peers():
            return False
    return True


async def test_an_impostor_registered_in_etcd_is_handed_nothing_and_no_url_is_lost(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="polecat.cluster.member_records")
    webs = test_web(SiteSpec(hosts=40, pages_per_host=5, seed=7))
    seen: list[str] = []

    async def everything(request: web.Request) -> web.Response:  # the attacker acknowledges it all
        seen.append(request.path)
        await request.read()
        return web.Response(text="adopted")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", everything)
    runner = web.AppRunner(app)
    await runner.setup()
    evil_port = _port("127.0.0.1")
    await web.TCPSite(runner, "127.0.0.1", evil_port).start()
    nodes: list[tuple[NodeService, asyncio.Future[int]]] = []
    attacker = AetcdClient(etcd_server.endpoint)
    try:
        for k in range(2):
            host = f"127.0.0.{20 + k}"
            listen = f"{host}:{_port(host)}"
            cfg = crawl_config(webs, tmp_path / f"n{k}", refresh={"enabled": False},
                               node={"listen": listen, "token": "operator-token-of-the-test"},
                               cluster={"etcd": etcd_server.endpoint, "name": "t", "node_id": f"n{k}",
                                        "advertise": f"http://{listen}", "secret": SECRET, "lease_ttl": 3})
            nodes.append(await start_node(cfg))
            assert nodes[-1][0]._crawler is not None
            nodes[-1][0]._crawler.pause()  # the cluster paused on its seeds
        services = [svc for svc, _ in nodes]
        await wait_for(lambda: all(len(_cluster(s).membership.members()) == 2 for s in services), 30,
                       "both nodes to see each other")
        await wait_for(lambda: _settled(services), 30, "the slices to settle")
        before = _queued(services)
        assert before > 0

        lease = await attacker.grant(30)
        evil = f"http://127.0.0.1:{evil_port}"
        record: dict[str, Any] = {"address": evil, "lease": lease, "leaving": False}
        await attacker.put("/t/members/evil", json.dumps(record).encode(), lease)
        forged = MemberRecords("t", hmac_signer("a guess at the secret, wrong"),
                               hmac_verifier("a guess at the secret, wrong"))
        await attacker.put("/t/members/evil2", forged.encode(Member("evil2", evil, lease=lease)), lease)
        await wait_for(lambda: all(_cluster(s).stats().members_ignored >= 2 for s in services), 30,
                       "both nodes to ignore both impostors")
        await asyncio.sleep(WATCH_AFTER)
        await attacker.revoke(lease)
        await asyncio.sleep(1.0)

        assert seen == [], f"the impostor's listener was sent {seen[:5]}"
        for svc in services:
            assert [m.id for m in _cluster(svc).membership.members()] == ["n0", "n1"]
        assert _queued(services) >= before, "queued URLs were lost"
        assert any("ignoring the member record of 'evil'" in r.getMessage() and "unsigned" in r.getMessage()
                   for r in caplog.records)
        assert any("'evil2'" in r.getMessage() and "does not verify" in r.getMessage()
                   for r in caplog.records)
    finally:
        await attacker.close()
        for svc, task in nodes:
            svc.stop()
            await asyncio.wait_for(task, 60)
        await runner.cleanup()
