"""``polecat cluster cat HASH`` and ``cluster cat URL`` (polecat/commands/cluster.py): a body from whichever
node of a running cluster stored it, asked through the nodes' signed ``GET /internal/pages/{hash}`` and
``GET /internal/pages/url/{key}`` (the owner of the URL's slice first)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import aiohttp

from polecat.cluster.auth import AUTH_HEADER, hmac_signer, request_proof
from polecat.cluster.wire import THIS, WIRE_HEADER
from polecat.store.base import FetchRecord
from polecat.store.http import encode_page
from polecat.testing.etcd import EtcdServer
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests
from tests.service_helpers import wait_for
from tests.test_cluster_nodes import SECRET, host_owners
from tests.test_cluster_nodes import _start as start_cluster_node


async def _cat(conf: Path, digest: str, secret: str = SECRET) -> tuple[int, bytes]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "polecat", "cluster", "cat", "--config", str(conf), digest,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "POLECAT_CLUSTER_SECRET": secret})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out if proc.returncode == 0 else err


async def _run(*args: str) -> bytes:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "polecat", *args,
                                                stdout=asyncio.subprocess.PIPE)
    out = (await asyncio.wait_for(proc.communicate(), 60))[0]
    assert proc.returncode == 0
    return out


async def _rows(data: Path) -> list[dict[str, str]]:
    """One node's pages (read by another process: the node runs here)."""
    return list(map(json.loads, (await _run("pages", str(data), "--format", "jsonl")).decode().splitlines()))


async def _stored(data: Path) -> set[str]:
    """The hashes of the bodies one node's store holds."""
    return {row["hash"] for row in await _rows(data) if row["outcome"] == "fetched"}


async def test_cluster_cat_finds_each_body_on_the_node_that_stored_it(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    # Each node must crawl some host (a body only it holds): not so for about one port in 128.
    web = next(w for w in (test_web(SiteSpec(hosts=8, pages_per_host=8, seed=21)) for _ in range(20))
               if len(set(host_owners(w, ["n0", "n1"]).values())) == 2)
    truth = web.ground_truth("host")
    # Near claims off: a near copy is stored in the store of its original's node (claims rule 12), which
    # could leave a node with no body of its own to find.
    nodes = [await start_cluster_node(web, etcd_server, tmp_path, k, 50.0, near_duplicates="full")
             for k in range(2)]
    conf = tmp_path / "cli.toml"
    conf.write_text(f'[cluster]\netcd = "{etcd_server.endpoint}"\nname = "t"\nnode_id = "cli"\n'
                    'advertise = "http://127.0.0.1:9"\n')
    try:
        await wait_for(lambda: set(page_requests(web)) >= truth, 60, "every page fetched")
        # A page fetched is stored after its claim is answered and its store flushes, so each node's own
        # bodies show a little later: read until each holds one the other does not (bounded).
        for _ in range(60):
            stored = [await _stored(tmp_path / f"n{k}") for k in range(2)]
            if stored[0] - stored[1] and stored[1] - stored[0]:
                break
            await asyncio.sleep(0.5)
        for k in range(2):
            digest = min(stored[k] - stored[1 - k])  # a body only node k holds
            assert await _cat(conf, digest) == (0, await _run("cat", str(tmp_path / f"n{k}"), digest))
        # By URL: a page stored in full on each node, asked of the owner of its slice first.
        rows = [await _rows(tmp_path / f"n{k}") for k in range(2)]
        for k in range(2):
            only_here = stored[k] - stored[1 - k]
            page = next(r for r in rows[k] if r["outcome"] == "fetched" and r["hash"] in only_here)
            own = await _run("cat", str(tmp_path / f"n{k}"), page["hash"])
            assert await _cat(conf, page["url"]) == (0, own)
        # A revisit on n0 of a body only n1 holds (what a copy found first by n1 is): n0 names the hash,
        # which n1 answers.
        digest = min(stored[1] - stored[0])
        copy = FetchRecord("http://copy.test/x", time.time(), 200, (), bytes.fromhex(digest), 0,
                           duplicate_of="http://a.test/", kind="revisit")
        page_put = encode_page(copy, None)
        address = f"http://{nodes[0][0].config.node.listen}"
        async with aiohttp.ClientSession() as http, http.put(
                address + "/internal/pages", data=page_put,
                headers={AUTH_HEADER: request_proof(hmac_signer(SECRET), "/internal/pages", address,
                                                    len(page_put), time.time()),
                         WIRE_HEADER: THIS.header}) as resp:
            assert resp.status in (200, 201), await resp.text()
        assert await _cat(conf, copy.url) == (0, await _run("cat", str(tmp_path / "n1"), digest))
        unknown = await _cat(conf, "http://never.test/")
        assert unknown[0] != 0 and b"no member has a page of http://never.test/" in unknown[1]
        missing = await _cat(conf, "ab" * 32)
        assert missing[0] != 0 and b"no member has a body with hash" in missing[1]
        # Without the secret no member record proves itself (member_records rule 2): nobody is asked.
        refused = await _cat(conf, digest, secret="not the secret of this cluster")
        assert refused[0] != 0 and b"the cluster has no members" in refused[1]
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0
