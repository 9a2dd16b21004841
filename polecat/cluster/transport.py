"""The hand-off on the wire: ``POST /handoff`` over HTTP, on a unix socket (``unix:/path``) or TCP
(``http://host:port``, the multi-machine cluster; ``--workers`` on one machine use the lighter
:mod:`polecat.cluster.unixwire`). aiohttp errors are mapped to a
:class:`~polecat.cluster.receiver.Reply` here, once; the sender's state machine decides what follows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import aiohttp
from aiohttp import web

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.auth import ACK_HEADER, AUTH_HEADER, RequestAuth, ack_proves, request_proof
from polecat.cluster.batch import FENCE_HEADER, MAX_BATCH_BYTES, Signer, Verifier, fence_header
from polecat.cluster.receiver import SHUTDOWN_TIMEOUT, HandoffReceiver, Reply
from polecat.cluster.wire import RELEASE_HEADER, THIS, WIRE_HEADER, Wire
from polecat.frontier.bundle import Fence

PATH = "/handoff"
ROUND_HEADER = "X-Polecat-Round"
"""On a 200: the receiver's checkpoint round that will hold the batch (Reply.round)."""
_STATUS = {"ok": 200, "bad": 400, "unauthorized": 401, "busy": 503, "error": 500}


class Transport(Protocol):
    """Delivers one framed batch to the receiver at ``address`` and reports its answer."""

    async def post(self, address: str, data: bytes) -> Reply: ...

    async def close(self) -> None: ...


class HttpTransport:
    """aiohttp client; one connection pool per address. With ``sign``, each request's head proves the
    secret to the receiver at that address (:mod:`polecat.cluster.auth` rules 1, 3) at ``clock.wall()``;
    with ``verify`` too, a 200 counts only with an acknowledgement that proves it back (rule 4). It names
    the sender's ``wire`` (:mod:`polecat.cluster.wire` rule 2). With ``fence`` too (the etcd cluster),
    each batch carries the sender's fencing token read at send time (:data:`FENCE_HEADER`); while it
    reads None (fenced, or not registered) nothing is sent: the batch is answered "error" here and stays
    in the outbox for a later try."""

    def __init__(self, *, timeout: float = 30.0, sign: Signer | None = None, verify: Verifier | None = None,
                 clock: Clock = SYSTEM_CLOCK, wire: Wire = THIS,
                 fence: Callable[[], Fence | None] | None = None) -> None:
        self._sign = sign
        self._verify = verify
        self._fence = fence
        self._clock = clock
        self._wire_headers = {WIRE_HEADER: wire.header, RELEASE_HEADER: wire.release}
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
        headers = {"Content-Type": "application/x-polecat-batch", **self._wire_headers}
        if self._sign is not None:
            headers[AUTH_HEADER] = request_proof(self._sign, PATH, address.rstrip("/"), len(data),
                                                 self._clock.wall())
            if self._fence is not None:
                token = self._fence()
                if token is None:
                    return Reply("error", detail="not sent: this node is fenced (no lease to send under)")
                headers[FENCE_HEADER] = fence_header(self._sign, token, data)
        try:
            async with session.post(url, data=data, headers=headers) as resp:
                detail = (await resp.read())[:500].decode("utf-8", "replace")
                if resp.status == 200:
                    if self._verify is not None and not ack_proves(self._verify, PATH, headers[AUTH_HEADER],
                                                                   resp.headers.get(ACK_HEADER)):
                        return Reply("error", detail=f"{address} answered 200 without proving the cluster "
                                                     f"secret ({ACK_HEADER}): not counted as delivered")
                    return Reply("ok", round=_round(resp.headers.get(ROUND_HEADER)))
                if resp.status == 503:
                    return Reply("busy", _retry_after(resp.headers.get("Retry-After")), detail)
                if resp.status == 401:  # the peer does not share our secret: retrying will not help soon
                    return Reply("unauthorized", detail=f"HTTP 401 {detail}")
                # 410: the receiver refused this node's token as stale; it is sent again under the
                # token of the node's next registration (sender rule 4: nothing is dropped).
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


async def read_body(request: web.Request, max_bytes: int, auth: RequestAuth | None, clock: Clock, *,
                    head_check: Callable[[web.Request], None] | None = None) -> bytes:
    """The body of ``request``, read only once its head allows it: a Content-Length of at most
    ``max_bytes`` and, with ``auth``, an :data:`~polecat.cluster.auth.AUTH_HEADER` that proves the
    secret for this route, receiver and length and was not used before (:mod:`polecat.cluster.auth`
    rules 1, 3); then ``head_check``, which raises the HTTP error to answer for a head the caller
    refuses. Raises the HTTP error to answer otherwise (401 for the proof, so callers count it as
    unauthorized)."""
    length = request.content_length
    if length is None:
        raise web.HTTPLengthRequired(text="a Content-Length is required")
    if length > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=length)
    if auth is not None:
        why = auth.check(request.path, length, request.headers.get(AUTH_HEADER, ""), clock.wall())
        if why is not None:
            raise web.HTTPUnauthorized(text=why)
    if head_check is not None:
        head_check(request)
    try:
        return await request.content.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise web.HTTPBadRequest(text=f"the body ended after {len(exc.partial)} of {length} bytes") from exc


async def serve(receiver: HandoffReceiver, address: str, *, verify: Verifier | None = None,
                sign: Signer | None = None, clock: Clock = SYSTEM_CLOCK) -> web.AppRunner:
    """Start answering ``POST /handoff`` at ``address``; stop with ``await runner.cleanup()``. With
    ``verify``, a body is read only after its request's head proves the secret to ``address``, once
    (:func:`read_body`); with ``sign`` too, an accepted batch is acknowledged with a proof back."""
    auth = RequestAuth(verify, address.rstrip("/"), sign=sign) if verify is not None else None

    async def handle(request: web.Request) -> web.Response:
        try:
            data = await read_body(request, MAX_BATCH_BYTES, auth, clock)
        except web.HTTPUnauthorized:
            receiver.unauthorized += 1
            raise
        reply = await receiver.receive(data)
        headers = {"Retry-After": f"{reply.retry_after:.3f}"} if reply.status == "busy" else {}
        if reply.status == "ok" and auth is not None:
            headers.update(auth.ack(PATH, request.headers.get(AUTH_HEADER, "")))
        return web.Response(status=_STATUS[reply.status], text=reply.detail, headers=headers)

    app = web.Application()
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
