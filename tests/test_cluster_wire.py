"""Rolling upgrades of a cluster (polecat/cluster/wire.py): nodes say which wire versions they speak; a
node refuses a peer it shares none with, by name and counted, and loses nothing it meant for it; a newer
node that still speaks the old wire works beside an older one."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from polecat.cluster.auth import AUTH_HEADER, hmac_signer, request_proof
from polecat.cluster.batch import encode_batch, encode_urls
from polecat.cluster.etcd import members_prefix, parse_members
from polecat.cluster.transport import PATH
from polecat.cluster.wire import OLD, RELEASE_HEADER, THIS, WIRE_HEADER, Wire, common, from_head
from polecat.commands.cluster import release_lines
from polecat.processes.service_runner import NodeService
from polecat.testing.etcd import EtcdServer
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests
from tests.service_helpers import wait_for
from tests.test_cluster_nodes import SECRET, _start

NEWER = Wire(THIS.newest + 1, THIS.newest + 1, "9.0.0")
"""A release that no longer speaks this one's wire."""
NEWER_STILL_SPEAKING_OURS = Wire(THIS.newest, THIS.newest + 1, "9.0.0")
V, V1 = str(THIS).rsplit(" ", 1)[1], THIS.newest + 1


def test_ranges_that_overlap_speak_the_newest_both_read() -> None:
    assert common(Wire(1, 2), Wire(1, 1)) == 1
    assert common(Wire(1, 3), Wire(2, 4)) == 3
    assert common(Wire(1, 1), Wire(2, 2)) is None
    # 0.2.0's replayable proofs and unsigned member records are not spoken (wire.py WIRE_OLDEST)
    assert common(THIS, OLD) is None


def test_heads_and_records_without_a_version_are_0_2_0s() -> None:
    assert from_head(None, None) == OLD
    assert from_head("1-2", "9.0.0") == Wire(1, 2, "9.0.0")
    assert from_head("2-1", None) is None and from_head("two", None) is None
    prefix = members_prefix("c")
    records = {
        prefix + "old": json.dumps({"address": "http://a", "lease": 5}).encode(),  # written by 0.2.0
        prefix + "new": json.dumps({"address": "http://b", "wire": 2, "wire_oldest": 1,
                                    "release": "9.0.0"}).encode(),
        prefix + "bad": json.dumps({"address": "http://c", "wire": "x"}).encode(),
    }
    members = {m.id: m for m in parse_members("c", records)}
    assert set(members) == {"old", "new"}  # the malformed record is skipped (logged)
    assert members["old"].wire == OLD and members["new"].wire == Wire(1, 2, "9.0.0")


def _others(svc: NodeService, urls: list[str]) -> list[str]:
    link = svc.cluster.link if svc.cluster is not None else None
    assert link is not None
    return [u for u in urls if not link.owns(u)]


Nodes = list[tuple[NodeService, asyncio.Future[int]]]


async def _both_see_each_other(nodes: Nodes, seeds: list[str]) -> None:
    await wait_for(lambda: all(svc.cluster is not None and len(svc.cluster.membership.members()) == 2
                               for svc, _ in nodes), 30, "both members in each list")
    # The link rebuilds its ring when it reads the change, a moment after members() shows it.
    await wait_for(lambda: bool(_others(nodes[0][0], seeds)), 30, "n0's ring to hold n1")


async def _seed_on(svc: NodeService, seeds: list[str]) -> None:
    for url in seeds:
        svc.crawler.add_seed(url, forward=True)
    await svc.crawler.commit()  # forwarded seeds: into the hand-off outbox


async def _stop(nodes: Nodes) -> None:
    for svc, _ in nodes:
        svc.stop()
    for _, task in nodes:
        assert await asyncio.wait_for(task, 60) == 0


@pytest.mark.slow
async def test_a_peer_of_no_shared_wire_is_refused_by_name_and_gets_what_waited_once_upgraded(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    web = test_web(SiteSpec(hosts=8, pages_per_host=6, seed=21))
    truth = web.ground_truth("host")
    nodes = [await _start(web, etcd_server, tmp_path, 0, 20.0, seeds=False),
             await _start(web, etcd_server, tmp_path, 1, 20.0, seeds=False, wire=NEWER)]
    try:
        n0 = nodes[0][0]
        await _both_see_each_other(nodes, web.seeds)
        assert n0.cluster is not None and nodes[1][0].cluster is not None
        assert n0.cluster.stats().incompatible_members == 1
        assert nodes[1][0].cluster.stats().incompatible_members == 1
        named = [r.getMessage() for r in caplog.records if "share no wire version" in r.getMessage()]
        assert (f"member n1 (polecat 9.0.0, wire {V1}) and this node (polecat {THIS.release}, wire {V}) "
                "share no wire version") in "\n".join(named), named
        n0_named = f"member n0 (polecat {THIS.release}, wire {V}) and this node (polecat 9.0.0, wire {V1})"
        assert any(n0_named in m for m in named), named

        theirs = _others(n0, web.seeds)
        await _seed_on(n0, web.seeds)
        own_hosts = {s.split("/")[2] for s in web.seeds if s not in theirs}
        mine = {u for u in truth if u.split("/")[2] in own_hosts}
        await wait_for(lambda: set(page_requests(web)) >= mine, 60, "n0's own hosts fetched")
        # n1's seeds wait in n0's outbox; n1 fetched nothing, and n0 kept fetching its own meanwhile.
        assert n0.cluster.handoff.backlog() >= len(theirs)  # the seeds, and links found on n0's pages
        assert not set(page_requests(web)) - mine

        # A request that names a wire n0 does not speak is refused before its body is read, and counted.
        batch = encode_batch("n1", 1, encode_urls([]), hmac_signer(SECRET))
        to = n0.cluster.me.address.rstrip("/")
        head = {AUTH_HEADER: request_proof(hmac_signer(SECRET), PATH, to, len(batch), time.time()),
                WIRE_HEADER: NEWER.header, RELEASE_HEADER: NEWER.release}
        async with aiohttp.ClientSession() as session, session.post(
                f"http://{n0.config.node.listen}{PATH}", data=batch, headers=head) as resp:
            assert resp.status == 426
            assert f"shares no wire version with the sender (polecat 9.0.0, wire {V1})" in await resp.text()
        assert n0.cluster.stats().wire_refused == 1

        # n1 is upgraded: stopped, and started again on its data dir speaking this release's wire.
        await _stop(nodes[1:])
        nodes[1] = await _start(web, etcd_server, tmp_path, 1, 20.0, seeds=False)
        await wait_for(lambda: set(page_requests(web)) >= truth, 90, "every page fetched")
        await wait_for(lambda: n0.cluster is not None and n0.cluster.handoff.backlog() == 0, 30,
                       "n0's outbox empty")
        assert n0.cluster.stats().incompatible_members == 0
    finally:
        await _stop(nodes)
    assert max(Counter(page_requests(web)).values()) == 1  # nothing fetched twice


async def test_a_newer_node_that_still_speaks_the_old_wire_works_beside_an_older_one(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=8, pages_per_host=6, seed=22))
    newer = NEWER_STILL_SPEAKING_OURS
    nodes = [await _start(web, etcd_server, tmp_path, 0, 20.0, seeds=False, wire=newer),
             await _start(web, etcd_server, tmp_path, 1, 20.0, seeds=False, wire=THIS)]
    try:
        await _both_see_each_other(nodes, web.seeds)
        n0 = nodes[0][0]
        assert _others(n0, web.seeds)  # some seeds cross to the older node
        await _seed_on(n0, web.seeds)
        await wait_for(lambda: set(page_requests(web)) >= web.ground_truth("host"), 60, "every page fetched")
        for svc, _ in nodes:
            assert svc.cluster is not None
            stats = svc.cluster.stats()
            assert (stats.incompatible_members, stats.wire_refused) == (0, 0)
    finally:
        await _stop(nodes)
    assert max(Counter(page_requests(web)).values()) == 1


@pytest.mark.slow
async def test_slices_whose_heir_shares_no_wire_stay_with_their_owner_until_it_is_upgraded(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """n0 crawls alone; n1 of a release that no longer speaks its wire joins: the slices the Ring gives n1
    are not handed to it (ownership rule 8) and nobody fetches them; once n1 speaks n0's wire, they go
    to it and every page is fetched once."""
    web = test_web(SiteSpec(hosts=8, pages_per_host=30, seed=23))
    truth = web.ground_truth("host")
    nodes = [await _start(web, etcd_server, tmp_path, 0, 5.0)]
    try:
        await wait_for(lambda: len(set(page_requests(web))) >= 16, 60, "the crawl to be under way")
        nodes.append(await _start(web, etcd_server, tmp_path, 1, 5.0, seeds=False, wire=NEWER))
        await _both_see_each_other(nodes, web.seeds)
        n0, n1 = nodes[0][0], nodes[1][0]
        assert n0.cluster is not None and n1.cluster is not None
        await asyncio.sleep(3.0)  # a hand-over and a reconciliation would have run by now
        assert n0.cluster.slices_handed_over == 0 and n1.cluster.slices_adopted == 0
        theirs = {s.split("/")[2] for s in _others(n0, web.seeds)}
        before = {u for u in page_requests(web) if u.split("/")[2] in theirs}
        await asyncio.sleep(1.0)
        assert {u for u in page_requests(web) if u.split("/")[2] in theirs} == before  # nobody fetches them
        assert n0.cluster.stats().stray_urls > 0  # they wait on n0

        await _stop(nodes[1:])
        nodes[1] = await _start(web, etcd_server, tmp_path, 1, 5.0, seeds=False)
        await wait_for(lambda: set(page_requests(web)) >= truth, 120, "every page fetched")
        assert nodes[1][0].cluster is not None and nodes[1][0].cluster.slices_adopted > 0
    finally:
        await _stop(nodes)
    assert max(Counter(page_requests(web)).values()) == 1


def test_cluster_status_names_the_releases_and_the_members_that_share_no_wire() -> None:
    assert release_lines({"n0": THIS, "n1": THIS}) == ("", [])
    line, apart = release_lines({"n0": THIS, "n1": OLD, "n2": NEWER})
    assert line == (f"releases: polecat {THIS.release}, wire {V}: n0; polecat 0.2.0 or older, wire 1: n1; "
                    f"polecat 9.0.0, wire {V1}: n2")
    assert apart == [f"n0 (polecat {THIS.release}, wire {V}) and n1 (polecat 0.2.0 or older, wire 1) share "
                     "no wire version: nothing goes between them until one is upgraded",
                     f"n0 (polecat {THIS.release}, wire {V}) and n2 (polecat 9.0.0, wire {V1}) share no wire "
                     "version: nothing goes between them until one is upgraded",
                     f"n1 (polecat 0.2.0 or older, wire 1) and n2 (polecat 9.0.0, wire {V1}) share no wire "
                     "version: nothing goes between them until one is upgraded"]
