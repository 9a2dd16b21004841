"""A loopback web of spider traps, one host per trap, for tests and benchmarks of frontier/traps.py.

Hosts (all on 127.0.0.1, names served by a :class:`~polecat.testing.dns.LocalDnsServer`):

- ``calendar.test``: ``/cal/YYYY/MM/`` links the previous and next month and the next year, forever.
- ``pages.test``: ``/list?page=N`` links ``?page=N+1`` forever.
- ``session.test``: ``/s/<session id>/page-K`` links pages 0-4, each under a fresh session id.
- ``loops.test``: every page links ``a/`` and ``b/`` relatively (``/a/b/a/b/...``).
- ``soft404.test``: ``/`` links three pages that do not exist; every URL answers 200 with the same
  "not found" page, which links three more random pages.
- ``r0.test`` ... ``r{chain-1}.test``: ``/`` redirects to the next host's ``/``, across the chain.

Every request is counted per host (:attr:`TrapWeb.requests`); robots.txt answers 404 everywhere.
"""

from __future__ import annotations

import secrets
from collections import Counter
from types import TracebackType

from aiohttp import web

from polecat.testing.dns import LocalDnsServer

__all__ = ["TRAP_HOSTS", "TrapWeb"]

TRAP_HOSTS = ("calendar.test", "pages.test", "session.test", "loops.test", "soft404.test")
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta")


def _page(title: str, hrefs: list[str], text: str = "") -> web.Response:
    links = "".join(f'<a href="{h}">more</a> ' for h in hrefs)
    body = (f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{text}</p>{links}"
            "</body></html>")
    return web.Response(text=body, content_type="text/html")


def _random_path() -> str:
    return "/" + "-".join(secrets.choice(_WORDS) for _ in range(3)) + "-" + "".join(
        secrets.choice("qwrtypsdfghjklzxcvbnm") for _ in range(6))


_NOT_FOUND = "Sorry, the page you asked for could not be found. " + " ".join(
    f"{a}{b}" for a in _WORDS for b in ("news", "shop", "help", "about", "blog", "forum", "docs", "jobs"))
"""The "not found" template: the site's chrome (64 distinct words) around one sentence."""


class TrapWeb:
    """Serves the trap hosts of the module docstring on 127.0.0.1 (an ephemeral port)."""

    __test__ = False

    def __init__(self, chain: int = 30) -> None:
        self.chain = chain
        self.requests: Counter[str] = Counter()
        """Requests per host name, robots.txt included."""
        self.dns = LocalDnsServer()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def seeds(self) -> list[str]:
        return [f"http://{h}:{self.port}/" for h in (*TRAP_HOSTS, "r0.test")]

    def page_requests(self, host: str) -> int:
        """Requests to ``host`` other than robots.txt."""
        return self.requests[host] - self.requests[f"{host} robots"]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        host = (request.host or "").rsplit(":", 1)[0].lower()
        self.requests[host] += 1
        path = request.path
        if path == "/robots.txt":
            self.requests[f"{host} robots"] += 1
            return web.Response(status=404)
        if host == "calendar.test":
            parts = [p for p in path.split("/") if p]
            year, month = (int(parts[1]), int(parts[2])) if len(parts) == 3 else (2026, 12)
            nxt = (year + month // 12, month % 12 + 1)
            prev = (year - (month == 1), (month - 2) % 12 + 1)
            return _page(f"{year}-{month}", [f"/cal/{y}/{m:02d}/" for y, m in (nxt, prev, (year + 1, month))])
        if host == "pages.test":
            n = int(request.query.get("page", "0"))
            return _page(f"page {n}", [f"/list?page={n + 1}"], " ".join(_WORDS) * (n % 7 + 1))
        if host == "session.test":
            k = path.rsplit("-", 1)[-1] if "page-" in path else "0"
            return _page(f"page {k}", [f"/s/{secrets.token_hex(12)}/page-{i}" for i in range(5)])
        if host == "loops.test":
            return _page(path, ["a/", "b/"])
        if host == "soft404.test":
            if path == "/":
                return _page("home", [_random_path() for _ in range(3)], "Welcome home, " + " ".join(_WORDS))
            return _page("Not found", [_random_path() for _ in range(3)], _NOT_FOUND)
        if host.startswith("r") and host.endswith(".test"):
            i = int(host[1:-5])
            raise web.HTTPMovedPermanently(f"http://r{i + 1}.test:{self.port}/")
        return web.Response(status=404)

    async def start(self) -> TrapWeb:
        self.dns.start()
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        for name in (*TRAP_HOSTS, *(f"r{i}.test" for i in range(self.chain + 1))):
            self.dns.add(name, ["127.0.0.1"])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self.dns.stop()

    async def __aenter__(self) -> TrapWeb:
        return await self.start()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()
