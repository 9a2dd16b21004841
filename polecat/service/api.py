"""The node's HTTP API: operator routes (``/admin/...``), internal routes, ``/metrics``, ``/openapi.json``
and the status page at ``/``.

Rules:
- Every operator change goes to the frontier and is committed before the answer: a 2xx means it is
  durable and in force for the next lease.
- Bad input is a 400 whose JSON ``{"error", "field"}`` names the field; an unknown host or pattern a 404.
- Auth: with a token configured, every route but the status page's HTML shell (which holds no data and
  asks the browser for the token) needs ``Authorization: Bearer <token>``, compared in constant time;
  otherwise 401. Without a token the node only listens on loopback (see :func:`check_listen`). The
  ``/internal/`` routes need the cluster secret instead, even on loopback, proven in the request's head
  (:mod:`polecat.cluster.auth` rule 1); a node without ``cluster.secret`` answers them 401: any local
  user could otherwise put pages in its archive.
- Browsers (CSRF and DNS rebinding): a request that changes state (POST, PUT, DELETE) carries an
  ``Origin``, when it has one, of this node (``http://`` + its ``Host``, else 403), and a POST outside
  ``/internal/`` says its body is JSON (``Content-Type: application/json``, else 415): a page elsewhere
  can make a browser send neither without the node's consent (CORS), which it never gives. Without a
  token, every request's ``Host`` must be ``localhost`` or a loopback address (``127.0.0.1``,
  ``[::1]``; any port; else 421): a rebound DNS name reaches the socket but not the routes. The
  cluster's signed routes are called by peers, not browsers, and skip these checks.
- The shapes of requests and answers are declared in polecat/service/openapi.py; a test checks every
  route's real answers against it.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.auth import AUTH_HEADER, RequestAuth, hmac_verifier
from polecat.config import Config, is_host_pattern, split_listen
from polecat.errors import ConfigError, PolecatError
from polecat.service.activity import Activity
from polecat.service.openapi import OPENAPI
from polecat.service.status_data import host_detail, internal_host, totals
from polecat.store.http import page_routes

if TYPE_CHECKING:
    from polecat.node.crawler import Crawler

log = logging.getLogger(__name__)

MAX_BODY = 4 * 1024 * 1024
"""The largest body of an operator request, on every node (a cluster's internal routes have their own)."""
MAX_SEEDS_PER_CALL = 10_000
UNBLOCK_NOTE = ("URLs the block dropped stay done (skipped: blocked); add them again as seeds to fetch them; "
                "URLs found from now on are accepted")
MAX_RATE = 1000.0
OPEN_PATHS = frozenset({"/"})
"""Served without a token: the status page's shell (its script sends the token with every call)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def check_listen(cfg: Config) -> None:
    """Refuse to serve off loopback without a token (ConfigError naming the setting)."""
    host, _ = split_listen(cfg.node.listen)
    if cfg.node.token or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(f"node.token (POLECAT_TOKEN): required when node.listen ({cfg.node.listen}) is "
                          "not a loopback address")


class BadRequest(web.HTTPBadRequest):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(text=json.dumps({"error": f"{field}: {message}", "field": field}),
                         content_type="application/json")


def _json_error(exc: web.HTTPException, message: str) -> web.HTTPException:
    exc.text = json.dumps({"error": message})
    exc.content_type = "application/json"
    return exc


WRITES = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def _loopback_name(name: str) -> bool:
    """``localhost`` or a loopback address (``127.0.0.11``, ``[::1]``)."""
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def auth_middleware(token: str, signed: frozenset[str] = frozenset(), *, auth: RequestAuth | None = None,
                    clock: Clock = SYSTEM_CLOCK) -> Any:
    """Bearer-token auth for every path but :data:`OPEN_PATHS` and ``signed`` (routes that check the
    cluster's signature themselves), after the browser checks of the module's rules; the other
    ``/internal/`` routes prove the cluster secret to ``auth`` instead, each proof once (cluster/auth.py
    rules 1, 3; none: they are closed). A refusal there is logged at WARNING."""
    expected = f"Bearer {token}".encode()
    unchecked = OPEN_PATHS | signed

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in signed:
            return await handler(request)
        _check_browser(request, token)
        if request.path.startswith("/internal/"):
            why = "closed: this node has no cluster.secret" if auth is None else auth.check(
                request.path, request.content_length or 0, request.headers.get(AUTH_HEADER, ""), clock.wall())
            if why is not None:
                log.warning("refused %s %s from %s: %s", request.method, request.path[:200], request.remote,
                            why)
                raise _json_error(web.HTTPUnauthorized(), f"internal route: {why}")
            return await handler(request)
        if token and request.path not in unchecked:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                raise _json_error(web.HTTPUnauthorized(headers={"WWW-Authenticate": "Bearer"}),
                                  "missing or wrong bearer token")
        return await handler(request)

    return middleware


def _check_browser(request: web.Request, token: str) -> None:
    """The CSRF and DNS-rebinding rules (module rules)."""
    host = request.headers.get("Host", "")
    if not token:
        # Any port: a tunnel (ssh -L 9000:127.0.0.1:8470) reaches the node under another one.
        name = host[:host.find("]") + 1] if host.startswith("[") else host.partition(":")[0]
        if not _loopback_name(name):
            raise _json_error(web.HTTPMisdirectedRequest(),
                              f"Host {host[:100]!r} is not localhost or a loopback address")
    if request.method in WRITES:
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"http://{host}":
            raise _json_error(web.HTTPForbidden(), f"Origin {origin[:100]!r} is not this node")
        internal = request.path.startswith("/internal/")
        if request.method == "POST" and request.content_type != "application/json" and not internal:
            raise _json_error(web.HTTPUnsupportedMediaType(), "Content-Type: expected application/json")


async def _body(request: web.Request) -> dict[str, Any]:
    if (request.content_length or 0) > MAX_BODY:  # refused before a byte of it is read
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY, actual_size=request.content_length or 0)
    raw = await request.read()  # at most MAX_BODY however it is sent: aiohttp answers 413 past it
    try:
        # Up to 4 MiB of JSON is tens of milliseconds: parsed off the loop, which goes on serving.
        data = await asyncio.to_thread(json.loads, raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested 100,000 deep
        raise BadRequest("body", f"not JSON: {str(exc)[:200]}") from exc
    if not isinstance(data, dict):
        raise BadRequest("body", "expected a JSON object")
    return data


def _pattern(value: Any, field: str = "host_pattern") -> str:
    if not isinstance(value, str) or not is_host_pattern(value.strip()):
        raise BadRequest(field, f"expected a host pattern such as example.com or *.example.com, got "
                                f"{value!r}")
    return value.strip().lower()


def _number(data: dict[str, Any], field: str, low: float, high: float, default: float | None) -> float:
    value = data.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(field, f"expected a number, got {value!r}")
    if not low < value <= high:
        raise BadRequest(field, f"must be in ({low:g}, {high:g}], got {value!r}")
    return float(value)


class Api:
    """The routes over one running :class:`~polecat.node.crawler.Crawler`. ``clock.wall()`` is the
    ``now`` of the status answers (give it the crawler's clock)."""

    def __init__(self, crawler: Crawler, activity: Activity, registry: CollectorRegistry, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._crawler = crawler
        self._activity = activity
        self._registry = registry
        self._clock = clock

    def app(self, token: str, *, signed: frozenset[str] = frozenset(), secret: str = "",
            auth: RequestAuth | None = None) -> web.Application:
        """The API; ``signed``: paths the caller mounts afterwards that authenticate by signature (the
        cluster's internal routes, which read their bodies with their own bounds); ``auth``: what checks
        the other ``/internal/`` routes' proofs of the secret (a cluster node's own: one memory of nonces
        and one count of replays); without it, ``secret`` makes one for a node outside a cluster
        (receiver ``""``), and with neither those routes are closed."""
        if auth is None and secret:
            auth = RequestAuth(hmac_verifier(secret), "")
        middleware = auth_middleware(token, signed, auth=auth, clock=self._clock)
        app = web.Application(middlewares=[middleware], client_max_size=MAX_BODY)
        c = self
        app.add_routes([
            web.get("/", c.page), web.get("/openapi.json", c.openapi), web.get("/metrics", c.metrics),
            web.post("/admin/seeds", c.add_seeds),
            web.get("/admin/throttles", c.list_throttles), web.post("/admin/throttles", c.set_throttle),
            web.delete("/admin/throttles/{pattern}", c.remove_throttle),
            web.get("/admin/blocks", c.list_blocks), web.post("/admin/blocks", c.add_block),
            web.delete("/admin/blocks/{pattern}", c.remove_block),
            web.get("/admin/crawl/status", c.status),
            web.post("/admin/pause", c.pause), web.post("/admin/resume", c.resume),
            web.get("/internal/hosts/{host}", c.internal_host),
            *page_routes(self._crawler.store),
        ])
        return app

    async def page(self, request: web.Request) -> web.Response:
        html = resources.files("polecat.service").joinpath("status.html").read_text()
        return web.Response(text=html, content_type="text/html")

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self._registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def add_seeds(self, request: web.Request) -> web.Response:
        data = await _body(request)
        urls = data.get("urls")
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise BadRequest("urls", "expected a non-empty list of URL strings")
        if len(urls) > MAX_SEEDS_PER_CALL:
            raise BadRequest("urls", f"at most {MAX_SEEDS_PER_CALL} per call, got {len(urls)}")
        priority = _number(data, "priority", 0.0, 1.0, 1.0)
        results = []
        for url in urls:
            try:
                decision = self._crawler.add_seed(url, importance=priority, forward=True)
            except PolecatError as exc:
                results.append({"url": url, "result": "refused", "reason": str(exc)})
                continue
            if decision == "accepted":
                results.append({"url": url, "result": "queued"})
            elif decision in ("seen", "forwarded"):  # forwarded: to its owner in the cluster
                results.append({"url": url, "result": decision})
            else:
                results.append({"url": url, "result": "refused", "reason": decision})
        await self._crawler.commit()  # also commits forwarded seeds to the hand-off outbox
        return web.json_response({"results": results})

    async def list_throttles(self, request: web.Request) -> web.Response:
        return web.json_response({"throttles": [{"host_pattern": p, "req_per_s": r}
                                                for p, r in self._crawler.frontier.throttles()]})

    async def set_throttle(self, request: web.Request) -> web.Response:
        data = await _body(request)
        pattern = _pattern(data.get("host_pattern"))
        rate = _number(data, "req_per_s", 0.0, MAX_RATE, None)
        self._crawler.throttle_now(pattern, rate)
        await self._crawler.commit()
        return web.json_response({"host_pattern": pattern, "req_per_s": rate})

    async def remove_throttle(self, request: web.Request) -> web.Response:
        return await self._remove(request, self._crawler.unthrottle, "throttle")

    async def _remove(self, request: web.Request, remove: Callable[[str], bool], what: str,
                      **extra: str) -> web.Response:
        pattern = _pattern(request.match_info["pattern"], "pattern")
        if not remove(pattern):
            raise _json_error(web.HTTPNotFound(), f"no {what} for {pattern}")
        await self._crawler.commit()
        return web.json_response({"removed": pattern, **extra})

    async def list_blocks(self, request: web.Request) -> web.Response:
        return web.json_response({"blocks": self._crawler.frontier.blocks()})

    async def add_block(self, request: web.Request) -> web.Response:
        pattern = _pattern((await _body(request)).get("host_pattern"))
        dropped = self._crawler.block(pattern)
        await self._crawler.commit()
        return web.json_response({"host_pattern": pattern, "dropped": dropped})

    async def remove_block(self, request: web.Request) -> web.Response:
        return await self._remove(request, self._crawler.unblock, "block", note=UNBLOCK_NOTE)

    async def status(self, request: web.Request) -> web.Response:
        now = self._clock.wall()
        host = request.query.get("host")
        if host is None:
            return web.json_response(totals(self._crawler, self._activity, now))
        detail = host_detail(self._crawler, self._activity, host.strip().lower(), now)
        if detail is None:
            raise _json_error(web.HTTPNotFound(), f"host: {host!r} is not known to this node")
        return web.json_response(detail)

    async def pause(self, request: web.Request) -> web.Response:
        self._crawler.pause(True)
        await self._crawler.commit()
        return web.json_response({"paused": True})

    async def resume(self, request: web.Request) -> web.Response:
        self._crawler.pause(False)
        await self._crawler.commit()
        return web.json_response({"paused": False})

    async def internal_host(self, request: web.Request) -> web.Response:
        host = request.match_info["host"].lower()
        detail = internal_host(self._crawler, host, self._clock.wall())
        if detail is None:
            raise _json_error(web.HTTPNotFound(), f"host: {host!r} is not known to this node")
        return web.json_response(detail)
