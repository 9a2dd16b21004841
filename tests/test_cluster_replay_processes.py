"""Replay-proof messages between real ``polecat node`` processes (cluster/auth.py rule 3; issue 33 item
4): n1 advertises the address of a recording proxy in front of it, so every batch and slice bundle the
other node sends it is captured on the way. Each captured request, sent again as it was, is refused: by
n1 as a replay (401, logged, counted in its ``/metrics``), and by n0, for which it was not made."""

from __future__ import annotations

import subprocess
from pathlib import Path

import aiohttp
from aiohttp import web

from polecat.cluster.auth import AUTH_HEADER
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import (
    kill_rest,
    loopback_port,
    node_toml,
    page_urls,
    start_node,
    stop_all,
    until,
)
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

FORWARDED = ("X-Polecat-Ack", "X-Polecat-Round", "Retry-After")


class Recorder:
    """A proxy that forwards every request to ``target`` and keeps what it forwarded."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.seen: list[tuple[str, dict[str, str], bytes, int]] = []
        self._session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.Response:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(request.method, self.target + request.path_qs, data=body,
                                         headers=headers) as resp:
            answer = await resp.read()
            self.seen.append((request.path, headers, body, resp.status))
            return web.Response(status=resp.status, body=answer,
                                headers={k: resp.headers[k] for k in FORWARDED if k in resp.headers})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def captured(self, path: str) -> list[tuple[dict[str, str], bytes]]:
        return [(h, b) for p, h, b, status in self.seen if p == path and status == 200]


async def _send(address: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http, http.post(
            address + path, data=body, headers=headers) as resp:
        return resp.status, await resp.text()


async def _metric(address: str, name: str) -> float:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http, http.get(
            address + "/metrics") as resp:
        text = await resp.text()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


async def test_captured_batches_and_bundles_are_refused_when_replayed(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    webs = test_web(SiteSpec(hosts=12, pages_per_host=40, seed=11))
    listen = {k: f"127.0.0.{50 + k}:{loopback_port(f'127.0.0.{50 + k}')}" for k in range(2)}
    proxy_port = loopback_port("127.0.0.52")
    recorder = Recorder(f"http://{listen[1]}")
    app = web.Application(client_max_size=300 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.52", proxy_port).start()
    procs: list[subprocess.Popen[bytes]] = []
    n0, n1 = (f"http://{listen[k]}" for k in range(2))
    try:
        for k in range(2):
            toml = node_toml(webs, tmp_path / f"n{k}", listen[k], etcd_server.endpoint, f"n{k}", "", rate=5.0,
                             ttl=3, interval=60.0)
            if k == 1:  # its peers reach it through the recorder
                toml = toml.replace(f'advertise = "http://{listen[1]}"', f'advertise = "http://127.0.0.52:{proxy_port}"')
            conf = tmp_path / f"n{k}.toml"
            conf.write_text(toml)
            procs.append(start_node(conf, tmp_path / f"n{k}.log"))
            if k == 0:  # n0 holds queued URLs in every slice before n1 joins: they are handed over to n1
                await until(lambda: len(page_urls(webs)) >= 10, 60, "n0 to crawl")
        await until(lambda: bool(recorder.captured("/internal/adopt")), 60, "a bundle handed to n1")
        # Seeds of n1's hosts added on n0 are forwarded to n1 in a batch (link rule 2).
        async with aiohttp.ClientSession() as http, http.post(n0 + "/admin/seeds", json={
                "urls": [f"{u}?again=1" for u in webs.seeds]}) as resp:
            assert resp.status == 200, await resp.text()
        await until(lambda: bool(recorder.captured("/handoff")), 60, "a batch sent to n1")

        for path in ("/internal/adopt", "/handoff"):
            headers, body = recorder.captured(path)[0]
            assert AUTH_HEADER in headers
            status, text = await _send(n1, path, headers, body)
            assert status == 401 and "replay" in text, (path, status, text)
            status, text = await _send(n0, path, headers, body)  # made for n1, not for n0
            assert status == 401 and "does not verify" in text, (path, status, text)
        assert await _metric(n1, "polecat_cluster_replays_refused_total") == 2
        await stop_all({f"n{k}": p for k, p in enumerate(procs)},
                       {f"n{k}": tmp_path / f"n{k}.log" for k in range(len(procs))})
    finally:
        kill_rest(procs)
        await recorder.close()
        await runner.cleanup()
    assert "is a replay" in (tmp_path / "n1.log").read_text()
