"""One benchmark server worker: a minimal HTTP/1.1 keep-alive server on a uvloop ``asyncio.Protocol``,
serving a rendered site (benchmarks/server.py) from a shared mmap.

Why not aiohttp here: an aiohttp server on one core tops out near 2,000 pages/s of 35 KB pages, which
made the server, not the crawler, the limit of the bare runner. This worker parses only what the site
needs (request line, Host, Connection, If-None-Match), answers from pre-built headers, and resolves URLs
with the same rules as the test web (``Site.lookup`` after ``normalize_path``), so both serve the same
site. It logs every request (:class:`~polecat.testing.serverlog.RequestRecord`) to
``LOGDIR/log-PID.jsonl`` when it gets SIGTERM.
"""

from __future__ import annotations

import array
import asyncio
import mmap
import os
import signal
import time
from pathlib import Path
from typing import Protocol, cast
from urllib.parse import parse_qsl, unquote

from polecat.testing.serverlog import RequestRecord
from polecat.testing.sitegen import Site, SiteSpec
from polecat.testing.siteserve import bind_loopback, etag_of, normalize_path

__all__ = ["App", "Connection", "head", "serve"]

_MAX_HEAD = 64 * 1024
_NOT_FOUND = b"not found\n"


def head(status: str, content_type: str, length: int, etag: str | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", f"Content-Length: {length}"]
    if etag:
        lines.append(f"ETag: {etag}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class _SiteApp:
    """Request heads in, response bytes out, one log entry per request."""

    def __init__(self, site: Site, port: int, bodies: memoryview, offsets: array.array[int],
                 served: memoryview) -> None:
        """``served``: one int64, the page requests answered so far (``LOGDIR/served-PID``)."""
        self.site, self.port, self._bodies, self._offsets = site, port, bodies, offsets
        self._served = served
        self._heads: dict[int, tuple[bytes, bytes]] = {}
        self.log: list[tuple[str, str, str, str, float, float, int]] = []
        self._robots = {}
        for host in site.hosts:
            status, text = site.robots(host)
            reason = {200: "200 OK", 404: "404 Not Found"}.get(status, f"{status} Error")
            self._robots[host] = head(reason, "text/plain", len(text)) + text.encode()
        self._not_found = head("404 Not Found", "text/plain", len(_NOT_FOUND)) + _NOT_FOUND

    def _page(self, page: int) -> tuple[bytes, bytes]:
        cached = self._heads.get(page)
        if cached is None:
            etag = etag_of(self._bodies[self._offsets[page] : self._offsets[page + 1]])
            length = self._offsets[page + 1] - self._offsets[page]
            response = head("200 OK", "text/html; charset=utf-8", length, etag)
            cached = self._heads[page] = (response, etag.encode())
        return cached

    def handle(self, head: bytes, transport: asyncio.Transport) -> bool:
        """Answer one request; returns whether to close the connection."""
        start = time.monotonic()
        lines = head.split(b"\r\n")
        method, target, version = [*lines[0].split(b" ", 2), b"", b""][:3]
        host = b""
        close = version != b"HTTP/1.1"
        if_none_match = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"host":
                host = value.strip()
            elif name == b"connection":
                close = value.strip().lower() == b"close"
            elif name == b"if-none-match":
                if_none_match = value.strip()
        host_name = host.decode("latin-1").rpartition(":")[0].lower() or host.decode("latin-1").lower()
        raw = target.decode("latin-1")
        raw_path, _, query = raw.partition("?")
        path = normalize_path(unquote(raw_path))
        page = self.site.lookup(host_name, path, parse_qsl(query, keep_blank_values=True))
        body: bytes | memoryview = b""
        if path == "/robots.txt" and host_name in self._robots:
            response = self._robots[host_name]
            status = int(response[9:12])
        elif page is None:
            response, status = self._not_found, 404
        else:
            self._served[0] += 1
            response, etag = self._page(page)
            if if_none_match == etag:
                response, status = f"HTTP/1.1 304 Not Modified\r\nETag: {etag.decode()}\r\n\r\n".encode(), 304
            else:
                status = 200
                if method != b"HEAD":
                    body = self._bodies[self._offsets[page] : self._offsets[page + 1]]
        url = self.site.url(page, self.port) if page is not None else f"http://{host_name}:{self.port}{raw}"
        self.log.append((host_name, raw, url, method.decode("latin-1"), start, time.monotonic(), status))
        transport.write(response)
        if body:
            transport.write(body)
        return close


class App(Protocol):
    log: list[tuple[str, str, str, str, float, float, int]]
    """One entry per request: the fields of :class:`RequestRecord`, without ``wall``."""

    def handle(self, head: bytes, transport: asyncio.Transport) -> bool:
        """Answer one request; returns whether to close the connection."""
        ...


class Connection(asyncio.Protocol):
    """One keep-alive connection: splits request heads and hands each to ``app``."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._buffer += data
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEAD:
                    self._transport.close()
                return
            head, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
            if self._app.handle(head, self._transport):
                self._transport.close()
                return


async def serve(spec: SiteSpec, site_dir: Path, port: int, addresses: int, log_dir: Path) -> None:
    """Serve until SIGTERM, then write the log."""
    offsets = array.array("q")
    offsets.frombytes((site_dir / "offsets.bin").read_bytes())
    with (site_dir / "pages.bin").open("rb") as f:
        pages = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    counter = log_dir / f"served-{os.getpid()}"
    counter.write_bytes(bytes(8))
    with counter.open("r+b") as f:
        served = mmap.mmap(f.fileno(), 8)
    app = _SiteApp(Site(spec), port, memoryview(pages), offsets, memoryview(served).cast("q"))
    await run_app(app, port, addresses, log_dir)


async def run_app(app: App, port: int, addresses: int, log_dir: Path) -> None:
    """Serve ``app`` on ``addresses`` loopback addresses until SIGTERM, then write its log and the CPU
    seconds it spent serving (``cpu-PID.txt``)."""
    loop = asyncio.get_running_loop()
    servers = []
    for sock in bind_loopback([f"127.0.0.{i + 1}" for i in range(addresses)], port, reuse_port=True):
        servers.append(await loop.create_server(lambda: Connection(app), sock=sock, backlog=4096))
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    (log_dir / f"ready-{os.getpid()}").touch()
    cpu0 = time.process_time()
    await stop.wait()
    for server in servers:
        server.close()
    # What serving cost (the log below not included): a crawl and its server share this machine's cores.
    (log_dir / f"cpu-{os.getpid()}.txt").write_text(f"{time.process_time() - cpu0:.6f}\n")
    with (log_dir / f"log-{os.getpid()}.jsonl").open("w") as f:
        f.writelines(RequestRecord(*entry).to_json() + "\n" for entry in app.log)
