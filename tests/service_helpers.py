"""Helpers for tests of the service mode: a node running in the test's event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from polecat.cluster.auth import AUTH_HEADER, hmac_signer, request_proof
from polecat.cluster.wire import THIS, WIRE_HEADER, Wire
from polecat.config import Config
from polecat.processes.service_runner import NodeService
from polecat.testing.web import TestWeb
from tests.crawl_helpers import crawl_config

SECRET = "the cluster secret of the test nodes"
"""What :func:`running_node` sets as ``cluster.secret``: :func:`internal` proves it."""


def internal(path: str, length: int = 0, receiver: str = "") -> dict[str, str]:
    """The head that lets a request to an ``/internal/`` route of ``receiver`` (its advertised address;
    ``""``: a node outside a cluster) through, once (api.py's auth rule)."""
    return {AUTH_HEADER: request_proof(hmac_signer(SECRET), path, receiver, length, time.time()),
            WIRE_HEADER: THIS.header}


async def start_node(cfg: Config, wire: Wire = THIS) -> tuple[NodeService, asyncio.Future[int]]:
    """A NodeService started in this loop, once its API listens (or its start-up error raised);
    ``wire``: the wire versions it speaks (another release's to play one)."""
    svc = NodeService(cfg, wire=wire)
    task = asyncio.ensure_future(svc.run(handle_signals=False))
    ready = asyncio.ensure_future(svc.ready.wait())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    return svc, task


@asynccontextmanager
async def running_node(web: TestWeb, data: Path, *, seeds: bool = True,
                       **over: Any) -> AsyncIterator[tuple[NodeService, aiohttp.ClientSession]]:
    """A NodeService over ``web`` on an ephemeral loopback port, and a client session for its API
    (base URL set). Stopped (drained) on exit."""
    over = {**over, "node": {"listen": "127.0.0.1:0", **over.get("node", {})},
            "cluster": {"secret": SECRET, **over.get("cluster", {})}}
    if not seeds:
        over["scope"] = {**over.get("scope", {}), "seeds": []}
    cfg = crawl_config(web, data, **over)
    svc, task = await start_node(cfg)
    headers = {"Authorization": f"Bearer {cfg.node.token}"} if cfg.node.token else {}
    try:
        async with aiohttp.ClientSession(svc.url, headers=headers) as session:
            yield svc, session
    finally:
        svc.stop()
        assert await asyncio.wait_for(task, 30) == 0


async def wait_for(cond: Callable[[], bool], within: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def get_json(session: aiohttp.ClientSession, method: str, path: str,
                   body: Any = None) -> tuple[int, Any]:
    if body is None and method == "POST":
        body = {}  # the node takes a POST only as JSON (api.py rules)
    async with session.request(method, path, json=body) as resp:
        return resp.status, await resp.json()
