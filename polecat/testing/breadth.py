"""A breadth web for scale tests and benchmarks: many hosts, each a robots.txt and a root linking a few
leaves, all on loopback.

Host ``h<i>.breadth.test`` resolves (through its own :class:`~polecat.testing.dns.LocalDnsServer`) to one
of ``addresses`` loopback addresses ``127.77.x.y``; one raw-asyncio HTTP/1.1 server, on its own thread
and loop, listens on every one of them at the same port and answers by the Host header::

    with BreadthWeb(hosts=600) as web:
        seeds_file.write_text("\\n".join(web.seeds()))
        crawl(nameserver=web.dns.address)
        assert web.stats().complete_hosts == 600

Politeness is judged at the server as requests arrive, per host, in O(hosts) memory (a full log of a
million-host crawl would not fit a test's memory): a violation is a request arriving less than
``min_interval`` after the previous one to its host (the ``interval`` rule of
:func:`polecat.testing.serverlog.politeness_violations`). Its ``overlap`` rule cannot fire here: every
answer is written before the server reads the next request.

With ``tls`` the hosts are served over HTTPS; with ``mixed`` too, every other host (odd ``i``) is served
plain HTTP instead, by a second server on every address at a port of its own: a breadth crawl from a
domain list meets both, and the server counts each scheme's requests apart.

With ``silent=k`` every ``k``-th host's name (``i % k == k - 1``) is never answered by the DNS server: a
lame delegation, whose nameservers drop every query, as a share of any big domain list has.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType

from polecat.testing.dns import LocalDnsServer

__all__ = ["BreadthStats", "BreadthWeb", "polecat_command"]

_MAX_HEAD = 8192
_BIND_ATTEMPTS = 20
_ROBOTS = b"User-agent: *\nAllow: /\n"
_RUN = """
import runpy, sys
{setup}
sys.argv = ["polecat", *sys.argv[1:]]
runpy.run_module("polecat", run_name="__main__")
"""


def polecat_command(*args: str, nofile: int = 0, tls_open: int = 0) -> list[str]:
    """``python -m polecat ARGS``; with ``nofile``, under that RLIMIT_NOFILE (soft and hard, so the node
    cannot raise it): a crawl of many hosts must not take every descriptor the server beside it needs.
    ``tls_open``: the pool's ``TLS_OPEN`` (polecat/fetch/pool.py rule 12) set to it, a benchmark's cap of
    TLS connections below the default (the crawl's ``limit`` still raises it, as rule 12 says)."""
    setup: list[str] = []
    if nofile:
        n = int(nofile)
        setup.append(f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({n}, {n}))")
    if tls_open:
        setup.append(f"import polecat.fetch.pool; polecat.fetch.pool.TLS_OPEN = {int(tls_open)}")
    if not setup:
        return [sys.executable, "-m", "polecat", *args]
    return [sys.executable, "-c", _RUN.format(setup="\n".join(setup)), *args]


@dataclass(frozen=True, slots=True)
class BreadthStats:
    """What the server saw."""

    requests: int
    hosts_seen: int
    complete_hosts: int
    """Hosts whose robots.txt, root and every leaf were requested."""
    violations: int
    """Requests that came sooner than ``min_interval`` after the previous one to their host."""
    first_request: float | None
    """``time.monotonic()`` of the first request; None before one."""
    open_connections: int
    most_connections: int
    tls_handshakes: int = 0
    """Connections whose TLS handshake completed (with ``tls``)."""
    tls_resumed: int = 0
    """Those that resumed an earlier session."""
    plain_requests: int = 0
    """With ``mixed``: the requests to the plain-HTTP hosts (the others went to the https hosts)."""
    plain_complete_hosts: int = 0
    """With ``mixed``: the plain-HTTP hosts among :attr:`complete_hosts`."""
    tls_open: int = 0
    """TLS connections open now (with ``tls``)."""
    most_tls_open: int = 0


class _Host:
    __slots__ = ("last_start", "paths", "plain")

    def __init__(self, plain: bool) -> None:
        self.paths: set[bytes] = set()
        self.last_start = -1.0
        self.plain = plain


class BreadthWeb:
    """``hosts`` hosts of ``leaves`` leaf pages on loopback; see the module docstring."""

    __test__ = False

    def __init__(self, hosts: int, *, addresses: int = 16, leaves: int = 5, min_interval: float = 0.0,
                 ttl: int = 300, tls: ssl.SSLContext | None = None, mixed: bool = False,
                 silent: int = 0) -> None:
        """``tls``: serve HTTPS with this server context (the seeds are then ``https://``); ``mixed``: every
        other host plain HTTP; ``silent``: every ``silent``-th name never answered (see the module
        docstring)."""
        if not 1 <= addresses <= 250 * 250:
            raise ValueError("addresses must be in [1, 62500]")
        if silent < 0:
            raise ValueError("silent must be >= 0")
        if mixed and tls is None:
            raise ValueError("mixed needs tls: the other half of the hosts is served over HTTPS")
        self.hosts = hosts
        self.leaves = leaves
        self.min_interval = min_interval
        self.dns = LocalDnsServer()
        self._ttl = ttl
        self._silent = silent
        self._addresses = [f"127.77.{k // 250}.{k % 250 + 1}" for k in range(addresses)]
        self._port = self._plain_port = 0
        self._state: dict[bytes, _Host] = {}
        self._requests = self._violations = 0
        self._open = self._most_open = 0
        self._tls = tls
        self._mixed = mixed
        self._handshakes = self._resumed = self._plain_requests = self._tls_open = 0
        self._most_tls_open = 0
        self._first: float | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._root = self._page(b"".join(b'<a href="/leaf%d">leaf %d</a>\n' % (n, n) for n in range(leaves)))
        self._leaf = self._page(b"<p>a leaf</p>")

    @staticmethod
    def _page(body: bytes) -> bytes:
        html = b"<html><head><title>t</title></head><body>" + body + b"</body></html>"
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(html)
        return head + html

    def name(self, i: int) -> str:
        return f"h{i}.breadth.test"

    def is_silent(self, i: int) -> bool:
        """Whether host ``i``'s name is never answered (``silent``)."""
        return bool(self._silent) and i % self._silent == self._silent - 1

    def seeds(self) -> list[str]:
        """One root URL per host."""
        scheme = "https" if self._tls is not None else "http"
        return [f"http://{self.name(i)}:{self._plain_port}/" if self._mixed and i % 2
                else f"{scheme}://{self.name(i)}:{self._port}/" for i in range(self.hosts)]

    @property
    def requests(self) -> int:
        """Requests answered so far: what :meth:`stats` counts, without its walk over every host (a
        benchmark samples it every few ms)."""
        return self._requests

    def stats(self) -> BreadthStats:
        want = 2 + self.leaves
        with self._lock:
            complete = [h for h in self._state.values() if len(h.paths) >= want]
            return BreadthStats(
                requests=self._requests, hosts_seen=len(self._state), complete_hosts=len(complete),
                violations=self._violations, first_request=self._first,
                open_connections=self._open, most_connections=self._most_open,
                tls_handshakes=self._handshakes, tls_resumed=self._resumed,
                plain_requests=self._plain_requests,
                plain_complete_hosts=sum(1 for h in complete if h.plain) if self._mixed else 0,
                tls_open=self._tls_open, most_tls_open=self._most_tls_open,
            )

    # --- serving -----------------------------------------------------------------------------------

    def _answer(self, head: bytes, plain: bool) -> bytes:
        line, _, rest = head.partition(b"\r\n")
        parts = line.split(b" ")
        target = parts[1] if len(parts) == 3 else b""
        host = b""
        for header in rest.split(b"\r\n"):
            key, _, value = header.partition(b":")
            if key.strip().lower() == b"host":
                host = value.strip().lower().rsplit(b":", 1)[0]
        now = time.monotonic()
        with self._lock:
            self._requests += 1
            if plain and self._mixed:
                self._plain_requests += 1
            if self._first is None:
                self._first = now
            state = self._state.get(host)
            if state is None:
                state = self._state[host] = _Host(plain)
            if state.last_start >= 0 and now - state.last_start < self.min_interval:
                self._violations += 1
            state.last_start = now
            state.paths.add(target)
        if target == b"/robots.txt":
            return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (
                len(_ROBOTS), _ROBOTS)
        if target == b"/":
            return self._root
        if target.startswith(b"/leaf"):
            return self._leaf
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tls = writer.get_extra_info("ssl_object")
        with self._lock:
            self._open += 1
            self._most_open = max(self._most_open, self._open)
            if tls is not None:
                self._handshakes += 1
                self._resumed += tls.session_reused
                self._tls_open += 1
                self._most_tls_open = max(self._most_tls_open, self._tls_open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                writer.write(self._answer(head, tls is None))
                await writer.drain()
        except ConnectionError:
            return
        finally:
            with self._lock:
                self._open -= 1
                self._tls_open -= tls is not None
            writer.close()

    async def _bind(self, tls: ssl.SSLContext | None) -> tuple[list[asyncio.Server], int]:
        """Servers on one port at every address (``tls``: HTTPS), and the port."""
        for _ in range(_BIND_ATTEMPTS):
            servers: list[asyncio.Server] = []
            try:
                first = await asyncio.start_server(self._serve, self._addresses[0], 0, limit=_MAX_HEAD,
                                                   backlog=1024, ssl=tls)
                servers = [first]
                port = first.sockets[0].getsockname()[1]
                for address in self._addresses[1:]:
                    servers.append(await asyncio.start_server(
                        self._serve, address, port, limit=_MAX_HEAD, backlog=1024, ssl=tls))
            except OSError:  # the port is taken on one of the addresses: try another
                for server in servers:
                    server.close()
                continue
            return servers, port
        raise OSError(f"could not bind one port on {len(self._addresses)} loopback addresses")

    async def _main(self, ready: threading.Event, errors: list[BaseException]) -> None:
        self._stopped = asyncio.Event()
        servers: list[asyncio.Server] = []
        try:
            servers, self._port = await self._bind(self._tls)
            if self._mixed:
                plain, self._plain_port = await self._bind(None)
                servers += plain
        except BaseException as exc:
            for server in servers:
                server.close()
            errors.append(exc)
            ready.set()
            return
        ready.set()
        await self._stopped.wait()
        for server in servers:
            server.close()

    def start(self) -> BreadthWeb:
        """Start the DNS server and the HTTP server (returns once both listen)."""
        self.dns.start()
        for i in range(self.hosts):
            if self.is_silent(i):
                self.dns.silence(self.name(i))
            else:
                self.dns.add(self.name(i), [self._addresses[i % len(self._addresses)]], ttl=self._ttl)
        ready = threading.Event()
        errors: list[BaseException] = []
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_until_complete, args=(self._main(ready, errors),),
                                        daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self) -> None:
        loop, thread, stopped = self._loop, self._thread, self._stopped
        if loop is not None and stopped is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(stopped.set)
            thread.join(10)
        self.dns.stop()

    def __enter__(self) -> BreadthWeb:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
