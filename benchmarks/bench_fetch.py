"""Per-request cost of Fetcher.fetch against a bare aiohttp loop, on one client core.

    python -m benchmarks.bench_fetch [--requests 6000] [--concurrency 64] [--rounds 3]

A loopback server in a child process (aiohttp under uvloop, keep-alive) serves a 35 KB HTML page, plain
and gzip-encoded. The client runs under uvloop in this process and fetches the page ``--requests``
times with ``--concurrency`` tasks, first with a bare ``aiohttp.ClientSession`` loop (``async with
s.get(url) as r: await r.read()``, aiohttp's defaults, so it decodes gzip itself), then with
``polecat.fetch.Fetcher``, and for the plain page with a minimal HTTP/1.1 client (``_MinimalConn``:
keep-alive GETs over asyncio protocols, Content-Length bodies only, no limits, timeouts or errors
handled): what a request costs on this event loop without a client library, a floor for any
client. Figures: client CPU time per request (``time.process_time``, which is what
limits a one-core crawler) and wall-clock requests/s; the best of ``--rounds`` rounds each. Then the
same page across 50 host names answered by a loopback DNS server (resolver hit ratio), and the cost of
one ``RobotsRules.allowed`` call. Only 127.0.0.1 is contacted; every loop is bounded in count.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import multiprocessing
import random
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from multiprocessing.synchronize import Event
from typing import Any, cast

import aiohttp
import uvloop
from aiohttp import web
from yarl import URL

from polecat.config import DnsConfig, FetchConfig
from polecat.fetch.http import Fetcher
from polecat.parse.robots import RobotsRules
from polecat.testing.dns import LocalDnsServer

PAGE_BYTES = 35_000


def _page() -> bytes:
    rng = random.Random(7)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(3000)]
    parts = ["<html><head><title>bench</title></head><body>"]
    while sum(map(len, parts)) < PAGE_BYTES:
        parts.append(f'<p>{" ".join(rng.choices(words, k=40))} <a href="/p{rng.randint(0, 999)}">x</a></p>\n')
    return "".join(parts).encode()[:PAGE_BYTES]


def _serve(port: int, ready: Event) -> None:
    body = _page()
    gz = gzip.compress(body, 6)

    async def plain(_req: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/html")

    async def encoded(_req: web.Request) -> web.Response:
        return web.Response(body=gz, content_type="text/html", headers={"Content-Encoding": "gzip"})

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/page", plain)
        app.router.add_get("/gz", encoded)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
        ready.set()
        await asyncio.Event().wait()

    uvloop.run(main())


async def _drive(one: Callable[[], Awaitable[int]], requests: int, concurrency: int) -> tuple[float, float]:
    """Run ``requests`` calls of ``one`` on ``concurrency`` tasks; (cpu seconds, wall seconds)."""
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.process_time() - cpu, time.perf_counter() - wall


async def _bare(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> int:
            async with session.get(url) as resp:
                return len(await resp.read())

        await _drive(one, concurrency * 2, concurrency)  # warm the pool
        return await _drive(one, requests, concurrency)


async def _polecat(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    cfg = FetchConfig(concurrency=concurrency, connections_per_host=concurrency)
    async with Fetcher(cfg, DnsConfig(allow_private=True)) as fetcher:

        async def one() -> int:
            return len((await fetcher.fetch(url)).body)

        await _drive(one, concurrency * 2, concurrency)
        return await _drive(one, requests, concurrency)


class _MinimalConn(asyncio.Protocol):
    """One keep-alive connection of the minimal client: the response head found by its blank line, the
    body by Content-Length. Not a client (no chunked bodies, limits, timeouts or errors): a floor."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.status = 0
        self.need = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if self.need < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status_line, *fields = bytes(buf[:end]).split(b"\r\n")
            self.status = int(status_line.split(b" ", 2)[1])
            self.need = next((int(v) for k, _, v in (f.partition(b":") for f in fields)
                              if k.strip().lower() == b"content-length"), 0)
            del buf[: end + 4]
        if len(buf) >= self.need and self.waiter is not None:
            body = bytes(buf[: self.need])
            del buf[: self.need]
            self.need = -1
            self.waiter.set_result((self.status, body))
            self.waiter = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))


async def _minimal(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    target = URL(url)
    host, port = target.host or "", target.port or 80
    request = f"GET {target.raw_path_qs} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: */*\r\n\r\n".encode()
    idle: list[_MinimalConn] = []
    loop = asyncio.get_running_loop()

    async def one() -> int:
        conn = idle.pop() if idle else (await loop.create_connection(_MinimalConn, host, port))[1]
        assert conn.transport is not None
        conn.waiter = loop.create_future()
        conn.transport.write(request)
        _, body = await conn.waiter
        idle.append(conn)
        return len(body)

    await _drive(one, concurrency * 2, concurrency)
    result = await _drive(one, requests, concurrency)
    for conn in idle:
        if conn.transport is not None:
            conn.transport.close()
    return result


async def _dns_names(port: int, dns: LocalDnsServer, hosts: int, requests: int, concurrency: int) -> str:
    """Fetch across ``hosts`` names served by a loopback DNS server; the resolver's figures."""
    names = [f"h{i:03d}.test" for i in range(hosts)]
    for name in names:
        dns.add(name, ["127.0.0.1"], ttl=300)
    cfg = FetchConfig(concurrency=concurrency, connections_per_host=2)
    rng = random.Random(3)
    async with Fetcher(cfg, DnsConfig(nameservers=(dns.address,), allow_private=True)) as fetcher:

        async def one() -> int:
            return len((await fetcher.fetch(f"http://{rng.choice(names)}:{port}/page")).body)

        cpu, wall = await _drive(one, requests, concurrency)
        s = fetcher.resolver.stats()
    return (
        f"{requests} fetches over {hosts} names: {cpu / requests * 1e6:.1f} us CPU/req, "
        f"{requests / wall:.0f} req/s; resolver lookups {s.hits + s.misses + s.coalesced} "
        f"(hits {s.hits}, misses {s.misses}, coalesced {s.coalesced}), hit ratio {s.hit_ratio:.3f}, "
        f"DNS queries sent {sum(dns.queries.values())}"
    )


def _robots_allowed() -> str:
    text = "User-agent: *\n" + "".join(f"Disallow: /d{i}/\nAllow: /d{i}/open\n" for i in range(40))
    text += "Disallow: /*.pdf$\nDisallow: /search?\n"
    rules = RobotsRules(text, "polecat/0.1")
    urls = [f"http://h.test/d{i % 60}/page{i}.html?q={i}" for i in range(1000)]
    n = 200
    t = time.perf_counter()
    for _ in range(n):
        for url in urls:
            rules.allowed(url)
    per = (time.perf_counter() - t) / (n * len(urls)) * 1e6
    return f"RobotsRules.allowed, 82-rule file: {per:.2f} us/call"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    requests = max(100, min(args.requests, 200_000))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(30):
            raise SystemExit("benchmark server did not start")
        print(f"{requests} requests, concurrency {args.concurrency}, {PAGE_BYTES} B page, "
              f"best of {args.rounds}")
        print(f"{'body':<6} {'client':<8} {'CPU us/req':>11} {'req/s':>8}")
        for path in ("/page", "/gz"):
            url = f"http://127.0.0.1:{port}{path}"
            best: dict[str, tuple[float, float]] = {}
            clients: list[tuple[str, Callable[[str, int, int], Coroutine[Any, Any, tuple[float, float]]]]] = [
                ("aiohttp", _bare), ("polecat", _polecat)]
            if path == "/page":
                clients.append(("minimal", _minimal))
            for _ in range(args.rounds):
                for name, run in clients:
                    cpu, wall = uvloop.run(run(url, requests, args.concurrency))
                    prev = best.get(name)
                    if prev is None or cpu < prev[0]:
                        best[name] = (cpu, wall)
            for name, (cpu, wall) in best.items():
                print(f"{path[1:]:<6} {name:<8} {cpu / requests * 1e6:>11.1f} {requests / wall:>8.0f}")
            overhead = (best["polecat"][0] - best["aiohttp"][0]) / requests * 1e6
            print(f"{path[1:]:<6} overhead {overhead:>+11.1f} us/req")
        with LocalDnsServer() as dns:
            print(uvloop.run(_dns_names(port, dns, 50, requests, args.concurrency)))
        print(_robots_allowed())
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
