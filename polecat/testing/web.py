"""The loopback test web: a generated multi-host site served by one aiohttp server, with its own DNS.

Mode of operation (one, on purpose): the server and its :class:`~polecat.testing.dns.LocalDnsServer` run
in a background thread with their own event loop. A crawler in the test's event loop, in another thread
or in a subprocess can use it alike, and a test may block (e.g. ``subprocess.run``) without starving the
server. ``with TestWeb(spec) as web`` and ``async with TestWeb(spec) as web`` both start that thread. A
benchmark whose crawlers keep this process busy serving them runs the DNS server in a child process
instead (``dns_process=True``: :class:`~polecat.testing.dns.DnsServerProcess`), so its answers do not wait
on this process.

The server listens on ONE port bound on several loopback addresses (127.0.0.1 .. 127.0.0.K) and serves by
the ``Host`` header; the DNS server maps each site host to one of those addresses (``h01.test`` ->
127.0.0.1, ``h02.test`` -> 127.0.0.2, ...). Every request is logged (:class:`RequestRecord`) with its
server-side arrival and end times, so politeness is measured at the server.

Knobs, settable at any time from any thread: :meth:`TestWeb.respond` (a fixed status, headers, body,
delay, optionally for the first N requests only), :meth:`TestWeb.redirect`, :meth:`TestWeb.delay`,
:meth:`TestWeb.set_robots` (status, body, Crawl-delay, delay; a long delay is a timeout),
:meth:`TestWeb.change_every` (a page whose content changes on a schedule). A delayed request whose
client goes away during the delay ends there, logged with status :data:`CLIENT_GONE`;
:meth:`TestWeb.in_flight` counts the requests to a host being answered now.
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import TracebackType

from aiohttp import web

from polecat.testing.dns import DnsServerProcess, LocalDnsServer
from polecat.testing.serverlog import (
    PolitenessViolation,
    RequestRecord,
    fetch_counts,
    politeness_violations,
    robots_violations,
)
from polecat.testing.sitegen import Scope, Site, SiteSpec, ground_truth
from polecat.testing.siteserve import (
    SiteHandler,
    bind_loopback,
    etag_of,
    http_date,
    normalize_path,
    serve_until_stopped,
)

__all__ = [
    "CLIENT_GONE",
    "PolitenessViolation",
    "RequestRecord",
    "TestWeb",
    "bind_loopback",
    "http_date",
    "normalize_path",
    "politeness_violations",
]


CLIENT_GONE = 499
"""The status logged for a delayed request whose client closed the connection before the delay ran out
(an aborted fetch): its ``end`` is when the server saw it go, the moment it stopped being in flight."""


async def _unless_gone(request: web.Request, seconds: float) -> bool:
    """Sleep ``seconds``; False at once if the client goes away first (polled every 20 ms)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if request.transport is None or request.transport.is_closing():
            return False
        await asyncio.sleep(min(left, 0.02))
    return True


@dataclass(frozen=True, slots=True)
class _Rule:
    status: int | None = None
    """None: serve the normal content (after ``delay``)."""
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    delay: float = 0.0
    times: int | None = None
    """Apply to this many more requests only (None: forever)."""


class TestWeb:
    """A generated site on loopback with its DNS server; see the module docstring."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, spec: SiteSpec | None = None, addresses: int = 4, port: int = 0, *,
                 dns_process: bool = False) -> None:
        """``port``: 0 for an ephemeral one; a fixed one serves data dirs whose URLs name it (the release
        fixtures of tests/fixtures/releases). ``dns_process``: the DNS server in a child process
        (polecat/testing/dns.py), for crawlers that ask it many names while this process serves them."""
        self.site = Site(spec or SiteSpec())
        self.addresses = [f"127.0.0.{i + 1}" for i in range(addresses)]
        self.dns: LocalDnsServer | DnsServerProcess = DnsServerProcess() if dns_process else LocalDnsServer()
        self._lock = threading.Lock()
        self._log: list[RequestRecord] = []
        self._rules: dict[tuple[str, str], _Rule] = {}
        self._in_flight: Counter[str] = Counter()
        self._bodies: dict[int, tuple[bytes | memoryview, str]] = {}
        self._changing: dict[int, tuple[float, bool]] = {}
        self._handler: SiteHandler | None = None
        self._port = 0
        self._fixed_port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None

    # --- addresses -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("TestWeb is not started")
        return self._port

    @property
    def dns_address(self) -> str:
        return self.dns.address

    @property
    def seeds(self) -> list[str]:
        """``http://h01.test:PORT/`` for every host."""
        return self.site.seeds(self.port)

    def base_url(self, host: str) -> str:
        return f"http://{host}:{self.port}"

    def address_of(self, host: str) -> str:
        """The loopback address the DNS server gives ``host`` (site hosts only)."""
        return self.addresses[self.site.hosts.index(host) % len(self.addresses)]

    def add_host(self, name: str, address: str = "127.0.0.1") -> None:
        """Make an extra name resolve to this server (it serves 404 there except for knobs)."""
        self.dns.add(name, [address])

    def ground_truth(self, scope: Scope = "any") -> set[str]:
        return ground_truth(self.site, self.port, scope)

    def min_intervals(self, rate: float) -> dict[str, float]:
        """Per-host minimum gap a crawler at ``rate`` req/s must keep: ``max(1/rate, Crawl-delay)``."""
        return {h: max(1.0 / rate, self.site.crawl_delay(h)) for h in self.site.hosts}

    # --- log ---------------------------------------------------------------------------------

    @property
    def log(self) -> list[RequestRecord]:
        """A snapshot of every request so far, in arrival order."""
        with self._lock:
            return list(self._log)

    def in_flight(self, host: str) -> int:
        """Requests to ``host`` the server is answering now (arrived, not yet answered nor given up)."""
        with self._lock:
            return self._in_flight[host.lower()]

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def fetch_counts(self) -> Counter[str]:
        """Requests per canonical URL (robots.txt included)."""
        return fetch_counts(self.log)

    def robots_violations(self, user_agent: str = "polecat") -> list[RequestRecord]:
        return robots_violations(self.log, self.site, user_agent)

    # --- knobs ---------------------------------------------------------------------------------

    def respond(
        self,
        host: str,
        path: str,
        status: int | None,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
        delay: float = 0.0,
        times: int | None = None,
    ) -> None:
        """Answer ``host`` + ``path`` (canonical path and query; ``"*"`` for every path of the host) with
        ``status``, ``headers`` and ``body`` after ``delay`` seconds, for the next ``times`` requests
        (forever when None). ``status=None`` serves the normal content after the delay."""
        rule = _Rule(status, tuple((headers or {}).items()), body, delay, times)
        with self._lock:
            self._rules[(host.lower(), path)] = rule

    def redirect(self, host: str, path: str, location: str, status: int = 301) -> None:
        """Redirect ``host`` + ``path`` to ``location`` (chains and loops are built from several)."""
        self.respond(host, path, status, headers={"Location": location})

    def delay(self, host: str, path: str, seconds: float) -> None:
        """Serve the normal content after ``seconds``."""
        self.respond(host, path, None, delay=seconds)

    def set_robots(
        self,
        host: str,
        status: int = 200,
        *,
        body: str | None = None,
        crawl_delay: float | None = None,
        delay: float = 0.0,
    ) -> None:
        """Override ``host``'s robots.txt. With status 200 and no ``body`` the generated rules are kept
        (or ``Disallow:`` nothing when the host had none) and ``crawl_delay`` sets a Crawl-delay line.
        A ``delay`` longer than the crawler's timeout makes the fetch time out."""
        if body is None:
            gen_status, gen_body = self.site.robots(host.lower())
            lines = gen_body.splitlines() if gen_status == 200 else ["User-agent: *", "Disallow:"]
            lines = [line for line in lines if not line.startswith("Crawl-delay:")]
            if crawl_delay is not None:
                lines.append(f"Crawl-delay: {crawl_delay:g}")
            body = "\n".join(lines) + "\n" if status == 200 else ""
        headers = {"Content-Type": "text/plain"}
        self.respond(host, "/robots.txt", status, headers=headers, body=body.encode(), delay=delay)

    def change_every(self, host: str, path: str, seconds: float, *, cosmetic: bool = False) -> str:
        """Give the page at ``host`` + ``path`` new content (new ETag) every ``seconds`` of the server's
        clock: new text, different enough not to be a near-duplicate of the last version, or with
        ``cosmetic`` only its footer's revision number (a near-duplicate). Returns its URL."""
        page = self.site.lookup(host.lower(), normalize_path(path), ())
        if page is None:
            raise ValueError(f"no page {path} on {host}")
        with self._lock:
            self._changing[page] = (seconds, cosmetic)
        return self.site.url(page, self.port)

    def clear(self, host: str | None = None) -> None:
        """Drop the knobs of ``host`` (of every host when None)."""
        with self._lock:
            for key in [k for k in self._rules if host is None or k[0] == host.lower()]:
                del self._rules[key]

    def _take_rule(self, host: str, key: str) -> _Rule | None:
        with self._lock:
            for rk in ((host, key), (host, "*")):
                rule = self._rules.get(rk)
                if rule is None:
                    continue
                if rule.times is not None:
                    if rule.times <= 1:
                        del self._rules[rk]
                    else:
                        self._rules[rk] = replace(rule, times=rule.times - 1)
                return rule
        return None

    # --- serving ---------------------------------------------------------------------------------

    def _page_body(self, page: int) -> tuple[bytes | memoryview, str]:
        changing = self._changing.get(page)
        if changing is not None:
            period, cosmetic = changing
            return self._version_body(page, int(time.monotonic() / period), cosmetic)
        cached = self._bodies.get(page)
        if cached is None:
            body = self.site.render(page, self._port)
            cached = self._bodies[page] = (body, etag_of(body))
        return cached

    def _version_body(self, page: int, version: int, cosmetic: bool) -> tuple[bytes, str]:
        if cosmetic:
            page_html = bytes(self.site.render(page, self._port))
            body = re.sub(rb"Revision \d+\.", f"Revision {version}.".encode(), page_html, count=1)
            return body, etag_of(body)
        rng = random.Random(page * 1_000_003 + version)
        letters = string.ascii_lowercase
        words = " ".join("".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(600))
        page_html = bytes(self.site.render(page, self._port))
        body = page_html.replace(b"</body>", f"<p>{words}</p></body>".encode())
        return body, etag_of(body)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        wall = time.time()
        start = time.monotonic()
        assert self._handler is not None
        host, path, page = self._handler.locate(request)
        with self._lock:
            self._in_flight[host] += 1
        try:
            rule = self._take_rule(host, self.site.pages[page].path if page is not None else path)
            if rule is not None and rule.delay > 0 and not await _unless_gone(request, rule.delay):
                response = web.Response(status=CLIENT_GONE)  # sent to nobody: logged, ended here
            elif rule is not None and rule.status is not None:
                response = web.Response(status=rule.status, body=rule.body, headers=dict(rule.headers))
            else:
                response = self._handler.respond(request, host, path, page)
            record = self._handler.record(request, host, page, start, response.status, wall)
            with self._lock:
                self._log.append(record)
            return response
        finally:
            with self._lock:
                self._in_flight[host] -= 1

    async def _setup(self) -> web.AppRunner:
        socks = bind_loopback(self.addresses, self._fixed_port)
        self._port = socks[0].getsockname()[1]
        self._handler = SiteHandler(self.site, self._port, self._page_body)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
        await runner.setup()
        for sock in socks:
            await web.SockSite(runner, sock).start()
        return runner

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            runner = loop.run_until_complete(self._setup())
        except BaseException as exc:
            self._error = exc
            ready.set()
            loop.close()
            return
        ready.set()
        serve_until_stopped(loop, runner)

    def start(self) -> TestWeb:
        """Start the DNS server and the web server thread; returns once both accept requests."""
        if self._thread is not None:
            return self
        self.dns.start()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="TestWeb", daemon=True)
        self._thread.start()
        ready.wait()
        if self._error is not None:
            self.stop()
            raise self._error
        for host in self.site.hosts:
            self.dns.add(host, [self.address_of(host)])
        return self

    def stop(self) -> None:
        if self._thread is not None:
            if self._loop is not None and self._error is None:
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._thread = None
        self.dns.stop()

    def __enter__(self) -> TestWeb:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> TestWeb:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)
