"""``polecat node`` in a cluster over a private etcd: nodes on 127.0.0.x share one crawl; a node joins
mid-crawl and another leaves gracefully; every page is fetched, politely, and none twice."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from polecat.cluster.auth import AUTH_HEADER, hmac_signer, request_proof
from polecat.cluster.batch import FENCE_HEADER, HandoffUrl, encode_batch, encode_urls, fence_header
from polecat.cluster.ownership import ABORT_BOUND
from polecat.cluster.ring import Ring
from polecat.cluster.transport import PATH, HttpTransport
from polecat.cluster.wire import THIS, WIRE_HEADER, Wire
from polecat.commands.cluster import _warnings
from polecat.config import config_from_mapping
from polecat.errors import ConfigError
from polecat.frontier.bundle import BundleWriter, Fence, SliceBundle
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.processes.machine import ADOPT_PATH, SIGNATURE_HEADER, ClusterNode
from polecat.processes.service_runner import NodeService
from polecat.testing.etcd import EtcdServer
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests
from tests.frontier_helpers import Rig, canon
from tests.service_helpers import start_node, wait_for
from tests.test_frontier_handover import CFG, serve

SECRET = "a shared secret of the test cluster"
UNFENCED = Path(__file__).parent / "fixtures" / "bundle_unfenced.pcsb"


def _port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def _start(web: Any, etcd: EtcdServer, tmp: Path, k: int, rate: float, ttl: int = 3, *,
                 seeds: bool = True, wire: Wire = THIS, near_duplicates: str = "delta"
                 ) -> tuple[NodeService, asyncio.Future[int]]:
    host = f"127.0.0.{10 + k}"
    listen = f"{host}:{_port(host)}"
    cfg = crawl_config(web, tmp / f"n{k}", politeness={"rate": rate}, refresh={"enabled": False},
                       dedup={"near_duplicates": near_duplicates},
                       scope={"seeds": web.seeds if seeds else []},
                       node={"listen": listen, "token": "operator-token-of-the-test"},
                       cluster={"etcd": etcd.endpoint, "name": "t", "node_id": f"n{k}",
                                "advertise": f"http://{listen}", "secret": SECRET, "lease_ttl": ttl})
    return await start_node(cfg, wire)


def host_owners(web: Any, members: list[str]) -> dict[str, str]:
    """The member of ``members`` (node ids, as :func:`_start` names them) whose slice holds each host of
    ``web``. A host key is ``host:port`` and the web's port is drawn anew each run, so which node crawls
    a host changes between runs: a test that needs each node to crawl some host checks it with this."""
    ring = Ring(members)
    return {h: ring.owner(slice_of(f"{h}:{web.port}")) for h in web.site.hosts}


async def _owning_every_slice(svc: NodeService) -> tuple[ClusterNode, Fence]:
    """The cluster side of ``svc``, alone in its cluster, once it owns every slice, and its token."""
    node = svc.cluster
    assert node is not None and node.membership.fence is not None
    await wait_for(lambda: node.stats().slices_owned == 4096, 30, "n0 to own every slice")
    assert node.membership.fence is not None
    return node, node.membership.fence


async def test_nodes_join_and_leave_mid_crawl_fetching_everything_once_and_politely(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    rate = 10.0
    web = test_web(SiteSpec(hosts=16, pages_per_host=40, seed=3))
    truth = web.ground_truth("host")
    nodes = [await _start(web, etcd_server, tmp_path, k, rate) for k in range(3)]
    try:
        await wait_for(lambda: len(set(page_requests(web))) >= len(truth) // 4, 60, "a quarter fetched")
        nodes.append(await _start(web, etcd_server, tmp_path, 3, rate))  # a 4th node joins mid-crawl
        await wait_for(lambda: len(set(page_requests(web))) >= len(truth) // 2, 60, "half fetched")
        leaving, task = nodes.pop(1)
        t0 = time.monotonic()
        leaving.stop()  # graceful: its slices go to the others before it exits
        assert await asyncio.wait_for(task, 60) == 0
        assert leaving.cluster is not None and leaving.cluster.slices_handed_over > 0
        print(f"graceful leave: {leaving.cluster.slices_handed_over} slices handed over (join + leave), "
              f"stopped in {time.monotonic() - t0:.2f} s")
        await wait_for(lambda: set(page_requests(web)) >= truth, 120, "every page fetched")
        out = await _cluster_status(etcd_server)
        assert "3 members, 4096/4096 slices owned" in out, out
        table = [line for line in out.splitlines()[1:] if not line.startswith("warning:")][:-1]
        lines = {line.split()[0]: line.split() for line in table}
        assert set(lines) == {"n0", "n2", "n3"}
        assert all(cols[3].isdigit() for cols in lines.values()), out  # every node answered with its queue
        # fetches/s is the last minute's (the crawl ended moments ago: some node fetched in it)
        assert any(float(cols[5]) > 0 for cols in lines.values()), out
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0
    fetched = Counter(page_requests(web))
    assert set(fetched) == truth
    twice = [u for u, n in fetched.items() if n > 1]
    assert len(twice) <= 0.02 * len(truth), twice[:10]
    assert politeness_violations(web.log, web.min_intervals(rate)) == []
    assert sum(svc.cluster.slices_adopted for svc, _ in nodes if svc.cluster is not None) > 0


@pytest.mark.slow
async def test_a_node_cut_off_from_etcd_stops_fetching_within_half_its_lease(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    ttl = 4
    web = test_web(SiteSpec(hosts=12, pages_per_host=200, seed=4))
    svc, task = await _start(web, etcd_server, tmp_path, 0, 4.0, ttl)
    try:
        await wait_for(lambda: len(web.log) >= 40, 60, "the crawl to be under way")
        etcd_server.pause()  # etcd stops answering: the node cannot renew its lease
        cut = time.monotonic()
        await asyncio.sleep(ttl)  # the lease itself would run out here
        last = max(r.start for r in web.log)
        # Renewed at most ttl/3 before the cut, fenced ttl/2 after that renewal; plus one sync period
        # and the request that was already being sent.
        assert last - cut <= ttl / 2 + 0.5, last - cut
        print(f"last request {last - cut:.2f} s after etcd stopped (lease {ttl} s)")
        assert set(page_requests(web)) < web.ground_truth("host")  # it did stop short of the end
    finally:
        etcd_server.resume()
        svc.stop()
        assert await asyncio.wait_for(task, 60) == 0


async def test_a_request_in_flight_when_the_node_is_cut_off_from_etcd_is_aborted_when_its_lease_runs_out(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Ownership rule 10: a request in flight when the node is cut off goes on while its lease lasts by
    the node's clock, then is aborted within the abort bound (its URL stays queued), not left to run to
    its 60 s timeout while an heir takes the host."""
    ttl = 4
    web = test_web(SiteSpec(hosts=4, pages_per_host=10, seed=4))
    slow = web.site.hosts[0]
    web.delay(slow, "*", 30.0)  # every request to it runs past the test: only an abort ends it here
    svc, task = await _start(web, etcd_server, tmp_path, 0, 4.0, ttl)
    try:
        crawler = svc.crawler
        slow_slice = slice_of(host_key(next(u for u in web.seeds if f"//{slow}:" in u)))
        await wait_for(lambda: crawler.frontier.in_flight_in([slow_slice]) == 1, 60, "a request to it")
        with caplog.at_level(logging.WARNING, logger="polecat.processes.machine"):
            etcd_server.pause()  # cut off: no renewal from now on
            cut = time.monotonic()
            await wait_for(lambda: crawler.frontier.in_flight_in([slow_slice]) == 0, 2 * ttl, "the abort")
            aborted_after = time.monotonic() - cut
        print(f"request in flight aborted {aborted_after:.2f} s after etcd stopped (lease {ttl} s)")
        # The lease runs out ttl after the last renewal (at most ttl / 3 before the cut, a keepalive
        # taking at most ttl / 3 more), then the abort comes within the abort bound; the fence alone
        # (ttl / 2) aborts nothing.
        assert ttl / 2 < aborted_after <= ttl + ABORT_BOUND, aborted_after
        assert any("aborted 1 requests in flight" in r.getMessage() for r in caplog.records)
        assert crawler.frontier.queued > 0  # its URL stays queued for the host's owner
    finally:
        etcd_server.resume()
        svc.stop()
        assert await asyncio.wait_for(task, 60) == 0


async def test_seeds_added_on_a_node_that_does_not_own_them_reach_their_owner(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=16, pages_per_host=3, seed=21))
    nodes = [await _start(web, etcd_server, tmp_path, k, 20.0, seeds=False) for k in range(2)]
    try:
        n0 = nodes[0][0]
        await wait_for(lambda: all(svc.cluster is not None and len(svc.cluster.membership.members()) == 2
                                   for svc, _ in nodes), 30, "both members in each list")
        link = n0.cluster.link if n0.cluster is not None else None
        assert link is not None
        # The link rebuilds its ring when it reads the membership change, after members() shows it: the
        # 16 hosts over two members put some on n1 once it has (all of them on n0 by chance: 1 run in
        # 65,536; with the 8 hosts this test had, 1 in 256).
        await wait_for(lambda: any(not link.owns(u) for u in web.seeds), 30, "n0's ring to hold n1")
        others = [u for u in web.seeds if not link.owns(u)]
        proc = await asyncio.create_subprocess_exec(  # the operator's CLI, aimed at the wrong node
            sys.executable, "-m", "polecat", "seeds", "add", *web.seeds, "--node",
            f"http://{n0.config.node.listen}", stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "POLECAT_TOKEN": "operator-token-of-the-test"})
        out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
        assert proc.returncode == 0, out
        assert sorted(line.split()[1] for line in out.splitlines() if line.startswith("forwarded")) == \
            sorted(others), out
        await wait_for(lambda: set(page_requests(web)) >= web.ground_truth("host"), 60, "every page fetched")
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0
    by_host = {r.host for r in web.log if r.target != "/robots.txt"}
    assert len(by_host) == 16
    assert max(Counter(page_requests(web)).values()) == 1


async def test_a_hand_over_to_a_member_that_left_gives_up_instead_of_retrying_for_ever(
        etcd_server: EtcdServer, tmp_path: Path) -> None:
    cfg = config_from_mapping({"data_dir": str(tmp_path / "d"), "cluster": {
        "etcd": etcd_server.endpoint, "name": "t", "node_id": "a", "advertise": "http://127.0.0.1:1",
        "secret": SECRET}})
    node = ClusterNode(cfg)
    node._session = aiohttp.ClientSession()  # as start() makes it, without a crawler
    try:
        nobody = f"http://127.0.0.1:{_port('127.0.0.1')}"  # every node stopping at once: it exited
        assert await asyncio.wait_for(node._send_bundle("gone", nobody, b"a chunk"), 10) is False
    finally:
        await node.close()


async def test_a_bundle_from_a_lease_that_is_gone_is_refused_and_one_from_before_tokens_adopted(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Ownership rule 9 at the receiver: a bundle whose sender is not registered under its lease (it
    froze, its lease expired) is refused with 410, a WARNING and a count; a current one is adopted, and
    so is one written before bundles carried tokens (tests/fixtures/bundle_unfenced.pcsb)."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=2, seed=32))
    svc, task = await _start(web, etcd_server, tmp_path, 0, 10.0, seeds=False)
    sign = hmac_signer(SECRET)
    try:
        node, mine = await _owning_every_slice(svc)
        old = SliceBundle.read(io.BytesIO(UNFENCED.read_bytes()))
        assert old.fence is None and old.ids == {2730, 3166} and old.records_count > 0

        def fenced(token: Fence | None) -> bytes:
            out = BundleWriter(old.ids, old.tables, created=old.created, fence=token)
            for table, key, value in old.records():
                out.add(table, key, value)
            return out.finish().to_bytes()

        url = f"http://{svc.config.node.listen}{ADOPT_PATH}"
        async with aiohttp.ClientSession() as http:
            async def post(body: bytes) -> tuple[int, str]:
                proof = request_proof(sign, ADOPT_PATH, f"http://{svc.config.node.listen}", len(body),
                                      time.time())
                head = {SIGNATURE_HEADER: sign(body).hex(), AUTH_HEADER: proof, WIRE_HEADER: THIS.header}
                async with http.post(url, data=body, headers=head) as r:
                    return r.status, await r.text()

            with caplog.at_level(logging.WARNING, logger="polecat.processes.machine"):
                expired = Fence("n0", mine.lease + 1, mine.revision - 1)  # n0's lease before a re-register
                assert (await post(fenced(expired)))[0] == 410
                ghost = Fence("n9", 7, 1)  # a member whose lease expired: not registered at all
                status, text = await post(fenced(ghost))
                assert status == 410 and "n9 is not registered" in text
            refused = [r for r in caplog.records if "refused a stale bundle" in r.getMessage()]
            assert len(refused) == 2 and all(r.levelno == logging.WARNING for r in refused)
            assert (await post(fenced(mine)))[0] == 200
            assert (await post(UNFENCED.read_bytes()))[0] == 200  # a bundle written before tokens
            async with http.get(f"http://{svc.config.node.listen}/metrics",
                                headers={"Authorization": "Bearer operator-token-of-the-test"}) as resp:
                scrape = await resp.text()
        assert (node.bundles_refused, node.bundles_adopted) == (2, 2)
        for line in ('polecat_cluster_bundles_total{outcome="refused"} 2.0',
                     'polecat_cluster_bundles_total{outcome="adopted"} 2.0', "polecat_cluster_fenced 0.0",
                     'polecat_cluster_slices{state="owned"} 4096.0', "polecat_cluster_stray_urls 0.0"):
            assert line in scrape.splitlines(), scrape
        assert "polecat_cluster_lease_age_seconds " in scrape
        assert 'polecat_cluster_claims_total{event="sent"} ' in scrape  # claims on: counted by event
    finally:
        svc.stop()
        assert await asyncio.wait_for(task, 60) == 0


async def test_a_batch_from_a_lease_that_is_gone_is_refused_and_one_without_a_token_received(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Ownership rule 9 for hand-off batches (machine rule 8): a batch carries its sender's token read
    when it is sent, a fenced sender sends none, and a receiver refuses a stale token with 410, a
    WARNING and a count; a token moved to another batch does not verify (401); a batch without a token
    (a node of 0.2.0) is received."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=2, seed=32))
    svc, task = await _start(web, etcd_server, tmp_path, 0, 10.0, seeds=False)
    sign = hmac_signer(SECRET)
    address = f"http://{svc.config.node.listen}"

    def frame(seq: int) -> bytes:
        return encode_batch("n7", seq, encode_urls([HandoffUrl(f"http://b{seq}.test/", 1, 0.5)]), sign)

    try:
        node, mine = await _owning_every_slice(svc)
        stale = HttpTransport(sign=sign, fence=lambda: Fence("n0", mine.lease + 1, mine.revision - 1))
        ghost = HttpTransport(sign=sign, fence=lambda: Fence("n9", 7, 1))
        fenced = HttpTransport(sign=sign, fence=lambda: None)
        current = HttpTransport(sign=sign, fence=lambda: mine)
        old = HttpTransport(sign=sign)  # a node of 0.2.0: no token
        try:
            with caplog.at_level(logging.WARNING, logger="polecat.processes.machine"):
                for transport in (stale, ghost):
                    reply = await transport.post(address, frame(1))
                    assert reply.status == "error" and "HTTP 410" in reply.detail, reply
            refused = [r for r in caplog.records if "refused a stale hand-off batch" in r.getMessage()]
            assert len(refused) == 2 and all(r.levelno == logging.WARNING for r in refused)
            received = node.receiver.batches
            reply = await fenced.post(address, frame(2))
            assert reply.status == "error" and "fenced" in reply.detail  # nothing sent
            # A token made for one batch, sent with another.
            body, other = frame(3), frame(4)
            head = {AUTH_HEADER: request_proof(sign, PATH, address, len(body), time.time()),
                    FENCE_HEADER: fence_header(sign, mine, other), WIRE_HEADER: THIS.header}
            async with aiohttp.ClientSession() as http, http.post(address + PATH, data=body,
                                                                  headers=head) as resp:
                assert resp.status == 401
            assert node.receiver.batches == received
            assert (await current.post(address, frame(5))).status == "ok"
            assert (await old.post(address, frame(6))).status == "ok"
            assert node.receiver.batches == received + 2
        finally:
            for transport in (stale, ghost, fenced, current, old):
                await transport.close()
        assert node.stats().batches_refused == 2
        async with aiohttp.ClientSession() as http, http.get(
                f"{address}/metrics", headers={"Authorization": "Bearer operator-token-of-the-test"}) as resp:
            assert "polecat_cluster_batches_refused_total 2.0" in (await resp.text()).splitlines()
    finally:
        svc.stop()
        assert await asyncio.wait_for(task, 60) == 0


async def test_a_leaving_node_refuses_hand_off_batches(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """Machine rule 7: a leaving node no longer follows the member list, so its Ring still names it the
    owner of the slices it hands over; it took its peers' batches for them and queued their URLs where
    no bundle carried them (deleted by the release, or left on the node that went): pages never fetched
    in the join-and-leave test. It refuses them now (the sender keeps them and re-routes them)."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=2, seed=33))
    svc, task = await _start(web, etcd_server, tmp_path, 0, 10.0, seeds=False)
    sign = hmac_signer(SECRET)
    try:
        node, token = await _owning_every_slice(svc)
        transport = HttpTransport(sign=sign, fence=lambda: token)
        try:
            frame = encode_batch("n7", 1, encode_urls([HandoffUrl("http://late.test/", 1, 0.5)]), sign)
            await node.leave()  # what a stop does first (its slices stay: no member stays)
            received = node.receiver.batches
            reply = await transport.post(f"http://{svc.config.node.listen}", frame)
            assert reply.status == "error" and "leaving" in reply.detail, reply
            assert node.receiver.batches == received
        finally:
            await transport.close()
    finally:
        svc.stop()
        assert await asyncio.wait_for(task, 60) == 0


async def test_a_chunk_is_sent_again_when_urls_were_queued_in_it_while_it_was_on_the_wire(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Machine rule 3 with frontier handover rule 5: a URL queued in a chunk's slice while its bundle
    was on the wire (here, as the POST goes) is in no bundle sent, so the chunk is exported and sent
    again, then released; before, the release deleted that URL."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=2, seed=34))
    svc, task = await _start(web, etcd_server, tmp_path, 0, 10.0, seeds=False)
    try:
        node, token = await _owning_every_slice(svc)
        crawler = node._crawler
        assert crawler is not None
        chunk = frozenset({slice_of("late.test")})
        bodies: list[bytes] = []

        async def send(owner: str, address: str, body: bytes) -> bool:
            if not bodies:  # a hand-off batch taken in while this one is on the wire
                crawler.member.queue_handed([HandoffUrl("http://late.test/", 0, 1.0, seed=True)], 0.0)
            bodies.append(body)
            return True

        monkeypatch.setattr(node, "_send_bundle", send)
        first = crawler.frontier.export_slices(chunk, 0.0, token).to_bytes()
        assert await node._deliver("n1", "http://127.0.0.1:9", chunk, first, token, True)
        assert len(bodies) == 2 and bodies[0] == first
        again = SliceBundle.read(io.BytesIO(bodies[1]))
        queued = [key for table, key, _ in again.records() if table == "queue"]
        assert len(queued) == 1 and b"late.test" in queued[0]
        await crawler.member.release_slices(chunk)  # nothing left that no bundle sent holds
    finally:
        svc.stop()
        assert await asyncio.wait_for(task, 60) == 0


async def test_urls_held_for_a_slice_another_node_owns_are_shipped_to_it(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """Ownership rule 7: n0 adopts a bundle of two slices, one of them n1's under the Ring of both (as a
    node does that a peer handed its slices to before a whole-cluster stop); within a reconciliation
    period n0 ships that slice to n1 and holds no stray URL any more."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=2, seed=32))
    nodes = [await _start(web, etcd_server, tmp_path, k, 10.0, seeds=False) for k in range(2)]
    try:
        n0, n1 = (svc.cluster for svc, _ in nodes)
        assert n0 is not None and n1 is not None
        await wait_for(lambda: n0.stats().slices_owned + n1.stats().slices_owned == 4096, 30,
                       "the two nodes to own every slice")
        sent, adopted, moved = n0.bundles_sent, n1.bundles_adopted, n1.slices_adopted  # the join's
        # slices 2730 (n1's) and 3166 (n0's), 4 URLs queued in each
        await _adopt(f"http://{nodes[0][0].config.node.listen}", UNFENCED.read_bytes())
        await wait_for(lambda: n1.bundles_adopted == adopted + 1, 10, "n0 to ship n1's slice to it")
        assert n0.stats().stray_urls == 0 and n0.bundles_sent == sent + 1 and n1.slices_adopted == moved + 1
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0


async def test_a_leave_hands_over_the_urls_it_holds_in_slices_another_node_owns(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """Machine rule 7: a URL queued on n1 in a slice n0 owns (a stray, which the reconcile loop ships
    within a period) when n1 begins to leave is handed to n0 with n1's own slices; the leave stops the
    reconcile loop, so it stayed on n1, never fetched."""
    # A host's slice hangs on its port too, a new one each run: with 8 hosts, 1 run in 256 had none of
    # n0's (StopIteration below). Nothing is seeded, so more hosts cost nothing.
    web = test_web(SiteSpec(hosts=32, pages_per_host=2, seed=35))
    ring = Ring(["n0", "n1"])
    stray = next(u for u in sorted(web.ground_truth("host")) if ring.owner(slice_of(host_key(u))) == "n0")
    nodes = [await _start(web, etcd_server, tmp_path, k, 10.0, seeds=False) for k in range(2)]
    try:
        n0, n1 = (svc.cluster for svc, _ in nodes)
        assert n0 is not None and n1 is not None and n1._crawler is not None
        await wait_for(lambda: n0.stats().slices_owned + n1.stats().slices_owned == 4096, 30,
                       "the two nodes to own every slice")
        n1._crawler.member.queue_handed([HandoffUrl(stray, 0, 1.0, seed=True)], time.time())
        await n1.leave()  # at once: no reconciliation in between
        await wait_for(lambda: stray in set(page_requests(web)), 30, "n0 to fetch the stray")
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0


async def test_a_slice_handed_here_with_every_url_finished_is_shipped_to_its_owner(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """Ownership rule 7: a slice adopted here that another node owns goes to it even with nothing
    queued. Its finished URLs are what the owner lacks when it holds the slice's queue as it was before
    a freeze (a peer that left meanwhile handed the heir's restore of it here): kept here, the owner
    fetched them again, one host's worth of pages in the freeze test with a leave."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=2, seed=32))
    nodes = [await _start(web, etcd_server, tmp_path, k, 10.0, seeds=False) for k in range(2)]
    ring = Ring(["n0", "n1"])
    host = next(h for h in (f"x{i}.test" for i in range(100)) if ring.owner(slice_of(h)) == "n1")
    rig = Rig(tmp_path / "rig", cfg=CFG)
    rig.frontier.add_seed(canon(f"http://{host}/"), 1000.0)
    rig.frontier.add_many([canon(f"http://{host}/p{i}") for i in range(2)], 1, 0.5, 1000.0)
    now = serve(rig, 1000.0, 3)
    assert rig.frontier.queued == 0  # every URL of the slice finished
    body = rig.frontier.export_slices([slice_of(host)], now).to_bytes()
    try:
        n0, n1 = (svc.cluster for svc, _ in nodes)
        assert n0 is not None and n1 is not None
        await wait_for(lambda: n0.stats().slices_owned + n1.stats().slices_owned == 4096, 30,
                       "the two nodes to own every slice")
        adopted = n1.bundles_adopted
        await _adopt(f"http://{nodes[0][0].config.node.listen}", body)
        await wait_for(lambda: n1.bundles_adopted == adopted + 1, 10, "n0 to ship n1's slice to it")
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0


async def _adopt(address: str, body: bytes) -> None:
    """POST a slice bundle to the node at ``address``, signed; it must be adopted."""
    proof = request_proof(hmac_signer(SECRET), ADOPT_PATH, address, len(body), time.time())
    async with aiohttp.ClientSession() as http, http.post(
            address + ADOPT_PATH, data=body,
            headers={SIGNATURE_HEADER: hmac_signer(SECRET)(body).hex(), AUTH_HEADER: proof,
                     WIRE_HEADER: THIS.header}) as resp:
        assert resp.status == 200


async def _cluster_status(etcd: EtcdServer) -> str:
    """``polecat cluster status`` until every slice is owned again (claims follow releases)."""
    for _ in range(50):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "polecat", "cluster", "status", "--etcd", etcd.endpoint, "--name", "t",
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "POLECAT_TOKEN": "operator-token-of-the-test"})
        out = (await proc.communicate())[0].decode()
        assert proc.returncode == 0, out
        if "4096/4096" in out:
            break
        await asyncio.sleep(0.2)
    return out


def test_cluster_status_warns_of_stray_and_stranded_queues() -> None:
    clean = {"stray_urls": 0, "stray_slices": 0}
    assert _warnings("n0", 1365, 40, clean) == [] and _warnings("n0", 0, 0, clean) == []
    assert _warnings("n1", 0, 670, clean) == ["n1 has 670 URLs queued and owns no slice: they are stranded"]
    (stray,) = _warnings("n2", 1365, 900, {"stray_urls": 320, "stray_slices": 4})
    assert stray.startswith("n2 holds 320 URLs in 4 slices it does not own")


def test_cluster_settings_are_validated_naming_the_field(tmp_path: Path) -> None:
    good = {"etcd": "http://127.0.0.1:2379", "node_id": "n1", "advertise": "http://127.0.0.1:8470",
            "secret": SECRET}
    assert config_from_mapping({"cluster": good}).cluster.node_id == "n1"
    for field, value, words in [("etcd", "127.0.0.1:2379", "http://host:port"),
                                ("etcd", ["http://127.0.0.1:2379", "h:1"], "[1]: must be http://host:port"),
                                ("etcd", "http://127.0.0.1:2379,http://127.0.0.1:2379", "twice"),
                                ("etcd", 2379, "expected a list"),
                                ("node_id", "", "required"), ("node_id", "a/b", "A-Z"),
                                ("advertise", "http://h", "http://host:port"),
                                ("secret", "short", "16 characters"), ("lease_ttl", 1, "[2, 300]"),
                                ("name", "a b", "A-Z"), ("checkpoints", "/tmp/x", "s3://bucket"),
                                ("checkpoint_interval", 0, "[0.1, 86400]")]:
        with pytest.raises(ConfigError, match=re.escape(f"cluster.{field}") + ".*" + re.escape(words)):
            config_from_mapping({"cluster": {**good, field: value}})
    assert config_from_mapping({"cluster": {"node_id": ""}}).cluster.etcd == ()  # no etcd: no cluster
    assert config_from_mapping({"cluster": {**good, "etcd": "http://127.0.0.1:2379, http://127.0.0.2:2379"}}
                               ).cluster.etcd == ("http://127.0.0.1:2379", "http://127.0.0.2:2379")
    got = config_from_mapping({"cluster": {**good, "checkpoints": "s3://b/p", "checkpoint_options": {
        "endpoint": "http://127.0.0.1:9000"}}}).cluster
    assert got.checkpoint_options == (("endpoint", "http://127.0.0.1:9000"),)
    assert got.checkpoint_interval == 60
    with pytest.raises(ConfigError, match=r"cluster\.checkpoints.*needs cluster\.etcd"):
        config_from_mapping({"cluster": {"checkpoints": "file:///tmp/ckpt"}})
