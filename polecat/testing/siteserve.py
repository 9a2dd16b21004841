"""Serving a generated site over HTTP: shared by the test web (polecat/testing/web.py) and the
multi-process benchmark server (benchmarks/server.py), which differ only in where bodies come from."""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import socket
import time
from collections.abc import Callable

from aiohttp import web

from polecat.testing.serverlog import RequestRecord
from polecat.testing.sitegen import Site

__all__ = ["SiteHandler", "bind_loopback", "etag_of", "http_date", "normalize_path", "serve_until_stopped"]

_BIND_ATTEMPTS = 50

BodySource = Callable[[int], tuple[bytes | memoryview, str]]
"""page id -> (body, ETag)."""


def http_date(seconds_from_now: float) -> str:
    """An HTTP-date (for Retry-After) this many seconds from now."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


def serve_until_stopped(loop: asyncio.AbstractEventLoop, runner: web.AppRunner) -> None:
    """Run a server thread's ``loop`` until it is stopped, then clean ``runner`` up and close the loop."""
    try:
        loop.run_forever()
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()


def etag_of(body: bytes | memoryview) -> str:
    return '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"'


def normalize_path(path: str) -> str:
    """Resolve ``.`` and ``..`` segments of a decoded path (what a correct client would have sent)."""
    out: list[str] = []
    segments = path.split("/")[1:]
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        elif seg == ".":
            if last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


_RESERVED: list[socket.socket] = []


def reserve_port(addresses: list[str]) -> int:
    """A TCP port free on every one of ``addresses``, held for the life of this process by sockets bound
    to it (with ``SO_REUSEPORT``, not listening), so that servers started later in child processes can
    bind it with ``bind_loopback(..., reuse_port=True)`` and nothing else can take it meanwhile: a port
    found free and let go (a benchmark stops and starts its server on it between crawls) was taken once
    by another test's socket in CI, and the server's workers failed with "Address already in use"."""
    socks = _bind_common(addresses, 0, reuse_port=True, listen=False)
    _RESERVED.extend(socks)
    return int(socks[0].getsockname()[1])


def bind_loopback(addresses: list[str], port: int = 0, reuse_port: bool = False) -> list[socket.socket]:
    """Listening TCP sockets on one common port across ``addresses`` (an ephemeral one when 0)."""
    return _bind_common(addresses, port, reuse_port=reuse_port, listen=True)


def _bind_common(addresses: list[str], port: int, *, reuse_port: bool, listen: bool) -> list[socket.socket]:
    for _ in range(_BIND_ATTEMPTS):
        socks: list[socket.socket] = []
        try:
            for addr in addresses:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind((addr, port or (socks[0].getsockname()[1] if len(socks) > 1 else 0)))
                if listen:
                    sock.listen(1024)
                    sock.setblocking(False)
            return socks
        except OSError:
            for sock in socks:
                sock.close()
            if port:
                raise
    raise OSError(f"could not bind one port on all of {addresses}")


class SiteHandler:
    """The normal content of a site on ``port``: robots.txt per host, pages (ETag, If-None-Match -> 304),
    404 for anything else; and the log record of each request."""

    def __init__(self, site: Site, port: int, bodies: BodySource) -> None:
        self.site = site
        self.port = port
        self._bodies = bodies

    def locate(self, request: web.Request) -> tuple[str, str, int | None]:
        """``(host, normalized path, page id or None)``: tracking parameters and query order ignored."""
        host = (request.url.host or "").lower()
        path = normalize_path(request.path)
        return host, path, self.site.lookup(host, path, request.query.items())

    def respond(self, request: web.Request, host: str, path: str, page: int | None) -> web.Response:
        if path == "/robots.txt" and host in self.site.hosts:
            status, text = self.site.robots(host)
            return web.Response(status=status, text=text, content_type="text/plain")
        if page is None:
            return web.Response(status=404, text="not found\n")
        body, etag = self._bodies(page)
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        response = web.Response(body=body, content_type="text/html", charset="utf-8")
        response.headers["ETag"] = etag
        return response

    def record(
        self, request: web.Request, host: str, page: int | None, start: float, status: int, wall: float
    ) -> RequestRecord:
        """The log record, its end time taken now (call it just before handing the response over)."""
        if page is not None:
            url = self.site.url(page, self.port)
        else:
            url = f"http://{host}:{self.port}{request.raw_path}"
        end = time.monotonic()
        return RequestRecord(host, request.raw_path, url, request.method, start, end, status, wall)
