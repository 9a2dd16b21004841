"""The hand-off on the wire: ``POST /handoff`` over HTTP, on a unix socket (``unix:/path``) or TCP
(``http://host:port``, the multi-machine cluster; ``--workers`` on one machine use the lighter
:mod:`polecat.cluster.unixwire`). aiohttp errors are mapped to a
:class:`~polecat.cluster.receiver.Reply` here, once; the sender's state machine decides what follows."""

from __future__ import annotations

from typing import Protocol

import aiohttp
from aiohttp import web

from polecat.cluster.batch import MAX_BATCH_BYTES
from polecat.cluster.receiver import SHUTDOWN_TIMEOUT, HandoffReceiver, Reply

PATH = "/handoff"
ROUND_HEADER = "X-Polecat-Round"
"""On a 200: the receiver's checkpoint round that will hold the batch (Reply.round)."""
_STATUS = {"ok": 200, "bad": 400, "unauthorized": 401, "busy": 503, "error": 500}


class Transport(Protocol):
    """Delivers one framed batch to the receiver at ``address`` and reports its answer."""

    async def post(self, address: str, data: bytes) -> Reply: ...

    async def close(self) -> None: ...


class HttpTransport:
    """aiohttp client; one connection pool per address."""

    def __init__(self, *, timeout: float = 30.0) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._sessions: dict[str, tuple[aiohttp.ClientSession, str]] = {}

    def _session(self, address: str) -> tuple[aiohttp.ClientSession, str]:
        got = self._sessions.get(address)
        if got is None:
            if address.startswith("unix:"):
                connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path=address[len("unix:") :])
                url = "http://localhost" + PATH
            else:
                connector = aiohttp.TCPConnector(limit=16)
                url = address.rstrip("/") + PATH
            got = self._sessions[address] = (aiohttp.ClientSession(connector=connector,
                                                                   timeout=self._timeout), url)
        return got

    async def post(self, address: str, data: bytes) -> Reply:
        session, url = self._session(address)
        try:
            async with session.post(url, data=data,
                                    headers={"Content-Type": "application/x-polecat-batch"}) as resp:
                detail = (await resp.read())[:500].decode("utf-8", "replace")
                if resp.status == 200:
                    return Reply("ok", round=_round(resp.headers.get(ROUND_HEADER)))
                if resp.status == 503:
                    return Reply("busy", _retry_after(resp.headers.get("Retry-After")), detail)
                if resp.status == 401:  # the peer does not share our secret: retrying will not help soon
                    return Reply("unauthorized", detail=f"HTTP 401 {detail}")
                return Reply("bad" if resp.status == 400 else "error", detail=f"HTTP {resp.status} {detail}")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return Reply("error", detail=f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        for session, _ in self._sessions.values():
            await session.close()
        self._sessions.clear()


def _round(value: str | None) -> int:
    try:
        return max(0, int(value)) if value else 0
    except ValueError:
        return 0


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0


async def serve(receiver: HandoffReceiver, address: str) -> web.AppRunner:
    """Start answering ``POST /handoff`` at ``address``; stop with ``await runner.cleanup()``."""

    async def handle(request: web.Request) -> web.Response:
        reply = await receiver.receive(await request.read())
        headers = {"Retry-After": f"{reply.retry_after:.3f}"} if reply.status == "busy" else None
        return web.Response(status=_STATUS[reply.status], text=reply.detail, headers=headers)

    app = web.Application(client_max_size=MAX_BATCH_BYTES)
    app.router.add_post(PATH, handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    site: web.BaseSite
    if address.startswith("unix:"):
        site = web.UnixSite(runner, address[len("unix:") :])
    else:
        host, _, port = address.removeprefix("http://").rstrip("/").rpartition(":")
        site = web.TCPSite(runner, host.strip("[]"), int(port))
    await site.start()
    return runner
