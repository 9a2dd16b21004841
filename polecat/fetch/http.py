"""The HTTP client: HTTP/1.1 GETs over a keep-alive pool, bounded in size and time, that hostile servers
cannot hang.

:meth:`Fetcher.fetch` sends one GET and returns a :class:`Response` or raises a
:class:`polecat.errors.FetchError` subclass; every parser, OS and SSL error is translated in
:func:`_translate`, and nowhere else. A ``FetchError`` already (the resolver's, the decoders') goes on as
it was raised: raised ``from`` itself it was its own cause, a cycle that only the garbage collector freed,
one for every failed lookup (benchmarks/README.md "Issue 39: the loop in the 1M-host breadth crawl").
The wire format is :mod:`polecat.fetch.h1` (sans-IO), the connections :mod:`polecat.fetch.pool`.
polecat has its own client rather than aiohttp's because a crawl spends its CPU per request: aiohttp cost
~60 us of it a request where a GET needs ~15 (benchmarks/README.md, "Fetch against a minimal client").

Bounds, per request:

- connect: ``cfg.connect_timeout`` for each TCP (and TLS) connect attempt;
- first byte: response headers must be complete ``cfg.first_byte_timeout`` after the connect budget,
  so a server that accepts and never answers, or drips its headers, is cut;
- read gap: ``cfg.read_gap_timeout`` between two reads of the body;
- total: ``cfg.total_timeout`` from start to the last body byte, so a slow drip that keeps every gap
  short is cut too. All three share one lazy timer (:mod:`polecat.fetch.deadline`): a request costs
  one timer handle, not a ``wait_for`` or a reschedule per read;
- streamed bodies: a caller may pass ``stream``, asked at the response head (status, media type) for a
  :class:`BodySink`; a sink takes the decoded body chunk by chunk instead of :attr:`Response.body`, up to
  its own ``max_bytes`` (a sitemap's 50 MB, whatever ``cfg.max_body_bytes`` says), and the read stops when
  it says it is ``done``. The read's other bounds stay;
- size: the decoded body stops at ``cfg.max_body_bytes`` (the decoders are bounded while decoding, see
  :mod:`polecat.fetch.decode`); a body cut there is returned with ``truncated=True`` and its connection
  is closed, not reused. The raw bytes read are bounded too, framing included (a compressed stream
  followed by endless garbage, or a body in one-byte chunks, cannot keep the request alive past the
  cap).

Through a proxy (``fetch.proxy``, ``fetch.proxy_env``): an http request goes in absolute form with the
proxy's credentials, an https one through a CONNECT tunnel; the guard still applies to the target
(polecat/fetch/proxy.py).

Redirects are not followed: a 3xx comes back as a Response with ``location`` so that the frontier
queues the target under politeness. Only :meth:`Fetcher.fetch_robots` follows them (RFC 9309: up to 5,
also across hosts). The SSRF guard applies to every request: IP literals here, resolved names in
:class:`polecat.fetch.dns.CachingResolver`; so it also covers redirect targets and robots.txt fetches.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import re
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.config import DnsConfig, FetchConfig
from polecat.errors import (
    ConnectError,
    FetchError,
    FetchTimeout,
    ProtocolError,
    RequestWithheld,
    TlsError,
    UnsupportedUrl,
)
from polecat.faults import descriptor_shortage
from polecat.fetch.deadline import Deadline
from polecat.fetch.decode import make_decoder
from polecat.fetch.dns import CachingResolver
from polecat.fetch.h1 import IncompleteResponse, MalformedResponse, encode_get
from polecat.fetch.pool import ConnectionPool, Origin, ResumingContext, SendGate, TlsStats, fix_mmap_threshold
from polecat.fetch.proxy import routes_from

__all__ = ["ROBOTS_MAX_REDIRECTS", "BodySink", "Fetcher", "RedirectPacer", "Response", "StreamChoice"]

ROBOTS_MAX_REDIRECTS = 5
"""RFC 9309 2.3.1.2: follow at least five consecutive redirects for robots.txt."""


class RedirectPacer(Protocol):
    """Politeness for the redirect hops of a robots.txt fetch (the node implements it)."""

    async def before(self, url: str, previous: Response) -> None:
        """Wait until ``url``'s host may be requested; ``previous`` is the response that redirected."""

    def after(self, url: str, response: Response | None) -> None:
        """The hop to ``url`` ended (``None``: with an error)."""


class BodySink(Protocol):
    """Takes a response body as it is read, in bounded memory (a sitemap or feed parser, the node's)."""

    @property
    def max_bytes(self) -> int:
        """Decoded bytes it takes at most (past them the body is cut, ``truncated``)."""

    def feed(self, chunk: bytes) -> None:
        """The next decoded piece of the body."""

    @property
    def done(self) -> bool:
        """Nothing more is wanted: the read stops (and the connection is closed, not reused)."""


StreamChoice = Callable[[int, str], "BodySink | None"]
"""``(status, media type) -> sink``, asked once the response head is read; None keeps the body whole."""


ACCEPT_ENCODING = "gzip, deflate, br, zstd"
_READ_SIZE = 65536
# Raw bytes may exceed the decoded cap by this factor (plus one read) before the body is cut: gzip of
# incompressible data grows by well under 1 %.
_WIRE_SLACK = 1.125


@dataclass(frozen=True, slots=True)
class Response:
    """One HTTP response, body decoded and capped. Times are from the Fetcher's clock (monotonic)."""

    url: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    """Content-decoded, at most ``max_body_bytes``."""
    truncated: bool
    """The body was cut at the cap: it is not the whole resource."""
    content_type: str
    """Lowercased media type without parameters; ``""`` when absent."""
    charset: str | None
    """The Content-Type ``charset`` parameter, if any (see polecat.parse.charset for the rest)."""
    location: str | None
    """The raw Location header of a 3xx, unresolved."""
    retry_after: float | None
    """Seconds from now that Retry-After asks to wait (delta-seconds or HTTP-date form), if present."""
    remote_ip: str | None
    started: float
    first_byte: float
    """When the response headers were complete."""
    ended: float
    wire_bytes: int
    """Body bytes as received (before content decoding)."""
    streamed: bool = False
    """The body went to the caller's :class:`BodySink` (``body`` is empty)."""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


def parse_retry_after(value: str | None, now_wall: float) -> float | None:
    """Retry-After as seconds from now: ``"120"`` or an HTTP-date; None if absent or unparseable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    import email.utils  # the email package costs ~7 ms to import: only a dated Retry-After needs it

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_wall)


def media_type(value: str | None) -> tuple[str, str | None]:
    """The media type (lower-case) and charset parameter of a ``Content-Type`` value."""
    if not value:
        return "", None
    mime, _, params = value.partition(";")
    charset = None
    if params:
        for param in params.split(";"):
            key, _, val = param.partition("=")
            if key.strip().lower() == "charset":
                charset = val.strip().strip("\"'") or None
                break
    return mime.strip().lower(), charset


def _translate(exc: BaseException, url: str, phase: str) -> FetchError:
    """The one place where parser, SSL, OS and timeout errors become polecat errors."""
    where = f"{url}: {phase}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(f"{where}: certificate verification failed: {exc}")
    if isinstance(exc, ssl.SSLError):
        return TlsError(f"{where}: TLS failed: {exc}")
    if isinstance(exc, TimeoutError):  # a connect attempt's timeout
        return FetchTimeout(f"{where}: timed out")
    if isinstance(exc, MalformedResponse):  # bad status line, oversized headers, bad framing, ...
        return ProtocolError(f"{where}: malformed response: {exc}")
    if isinstance(exc, IncompleteResponse):
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        return ConnectError(f"{where}: {exc}{cause}")
    if isinstance(exc, OSError):
        shortage = descriptor_shortage(exc)  # faults rule 4: named, not a bare "[Errno 24]"
        return ConnectError(f"{where}: {shortage or exc or type(exc).__name__}")
    if isinstance(exc, ValueError):  # a URL yarl cannot parse, credentials not in Latin-1
        return UnsupportedUrl(f"{url}: {exc}")
    return ProtocolError(f"{where}: {type(exc).__name__}: {exc}")


# Request-target characters sent as they are; the rest (spaces, controls, non-ASCII) are percent-encoded,
# so no URL can break the request line.
_TARGET_SAFE = "!#$%&'()*+,/:;=?@[]~-._"


# A URL as the canonicalizer writes it (a lower-case name or IPv4 address, no userinfo, no fragment, no
# empty query, which yarl drops) is read by this pattern; any other by yarl, loaded on first use (~16 ms
# to import). The two read such URLs alike (tests/test_fetch_units.py).
_PLAIN_URL = re.compile(r"(https?)://([a-z0-9.-]+)(?::([1-9][0-9]{0,4}))?(/[^#]*(?<!\?))?", re.ASCII)
_DEFAULT_PORTS = {"http": 80, "https": 443}

RequestParts = tuple[Origin, str, str, tuple[tuple[str, str], ...]]
"""Where a GET goes and what it says: the origin, the request target, the Host header value and the
Authorization header from the URL's userinfo (none, or one)."""


def request_parts(url: str) -> RequestParts:
    """The parts of a GET of ``url``. UnsupportedUrl unless it is an absolute http(s) URL with a host;
    ValueError when it cannot be parsed."""
    m = _PLAIN_URL.fullmatch(url)
    if m is not None:
        scheme, host, port_text, path = m.groups()
        default = _DEFAULT_PORTS[scheme]
        port = int(port_text) if port_text else default
        if port <= 65535:
            name = host.rstrip(".")  # as yarl: a trailing dot fails TLS name checks
            return ((scheme, host, port), _request_target(path or "/"),
                    (name if port == default else f"{name}:{port}") or host, ())
    return request_parts_yarl(url)


def request_parts_yarl(url: str) -> RequestParts:
    """:func:`request_parts` through yarl, for every URL."""
    from yarl import URL

    target = URL(url, encoded=True)
    scheme, host = target.scheme, target.raw_host
    if scheme not in ("http", "https") or not host or target.port is None:
        raise UnsupportedUrl(f"{url}: only absolute http and https URLs are fetched")
    return ((scheme, host, target.port), _request_target(target.raw_path_qs or "/"),
            target.host_port_subcomponent or host, _basic_auth(target.user, target.password))


def _request_target(target: str) -> str:
    if target.isascii() and target.isprintable() and " " not in target:
        return target
    return urllib.parse.quote(target, safe=_TARGET_SAFE)


def _basic_auth(user: str | None, password: str | None) -> tuple[tuple[str, str], ...]:
    """``Authorization: Basic`` from the URL's userinfo, as the client before this one (aiohttp) sent it."""
    if user is None:
        return ()
    credentials = f"{user}:{password or ''}".encode("latin-1")
    return (("Authorization", "Basic " + base64.b64encode(credentials).decode("ascii")),)


def _header_value(value: str) -> str:
    """A validator from a stored response, fit to send back: CR, LF and NUL would end the header line
    (a server could inject headers into the next request through its ETag), so they become spaces."""
    return value if value.isprintable() else "".join(c if c.isprintable() else " " for c in value)


def request_headers(cfg: FetchConfig) -> tuple[tuple[str, str], ...]:
    """The headers sent with every request (conditional ones are added per request); the store's WARC
    ``request`` records list them."""
    return (("User-Agent", cfg.user_agent), ("Accept-Encoding", ACCEPT_ENCODING), ("Accept", "*/*"))


class Fetcher:
    """Async context manager owning the connection pool and the node's caching resolver. ``clock``
    stamps responses (``monotonic``), dates an HTTP-date Retry-After (``wall``) and is handed to the
    resolver (TTLs) and the pool (idle expiry); the request deadlines are the loop's own timers
    (:mod:`.deadline`), which fire on the loop's clock, so they stay off it. ``environ`` is what
    ``fetch.proxy_env`` reads (the process environment when None)."""

    def __init__(
        self,
        cfg: FetchConfig,
        dns: DnsConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        resolver: CachingResolver | None = None,
        max_open: int = 0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._cfg = cfg
        self._proxies = routes_from(cfg, os.environ if environ is None else environ)
        self._max_open = max_open
        self._clock = clock
        self._resolver = resolver or CachingResolver(dns, clock=clock)
        self._owns_resolver = resolver is None
        self._pool: ConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop of ``async with``, kept: asyncio.get_running_loop() costs a getpid system call."""
        self._tls_context: ResumingContext | None = None
        """What https requests use (:meth:`_tls`); None until the first one."""
        self._wire_cap = int(cfg.max_body_bytes * _WIRE_SLACK) + _READ_SIZE
        # One budget for "connect, send, and get complete headers back".
        self._header_budget = cfg.connect_timeout + cfg.first_byte_timeout
        self._headers = request_headers(cfg)

    @property
    def resolver(self) -> CachingResolver:
        """The shared DNS cache (prefetch, stats)."""
        return self._resolver

    def _tls(self) -> ssl.SSLContext:
        """The TLS context of every https request, made at the first one: loading the CA store costs
        ~20 ms of CPU, which a crawl of http URLs never needs. It resumes sessions (pool rule 10) and is
        otherwise :func:`ssl.create_default_context`'s; with ``verify_tls`` off, it checks neither the
        certificate nor the name (and loads no CA store)."""
        if self._tls_context is None:
            cfg = self._cfg
            fix_mmap_threshold()  # pool rule 13: before the loop's TLS layer allocates its buffers
            context = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
            if not cfg.verify_tls:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif cfg.ca_bundle is not None:
                context.load_verify_locations(cafile=str(cfg.ca_bundle))
            else:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
            self._tls_context = context
        return self._tls_context

    def tls_stats(self) -> TlsStats:
        """TLS handshakes so far and those resumed (pool rule 10); zeros before the first https request."""
        if self._tls_context is None:
            return TlsStats(handshakes=0, resumed=0, sessions=0)
        return self._tls_context.stats()

    async def __aenter__(self) -> Fetcher:
        cfg = self._cfg
        self._loop = asyncio.get_running_loop()
        self._pool = ConnectionPool(
            self._resolver, limit=cfg.concurrency, limit_per_host=cfg.connections_per_host,
            connect_timeout=cfg.connect_timeout, tls=self._tls, clock=self._clock, max_open=self._max_open,
            proxies=self._proxies,
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
            await asyncio.sleep(0)  # the transports' close callbacks run
        if self._owns_resolver:
            await self._resolver.close()

    def connections_short(self) -> bool:
        """Whether the pool's connections are near its descriptor cap (polecat/fetch/pool.py rule 9)."""
        return self._pool is not None and self._pool.short()

    def connections_full(self, leases: int) -> bool:
        """Whether the TLS connections held and those the node's https ``leases`` in flight may yet open
        reach the pool's TLS cap (polecat/fetch/pool.py rule 15)."""
        return self._pool is not None and self._pool.full(leases)

    def let_go(self, url: str) -> None:
        """Close the idle connections kept for ``url``'s origin: its host has nothing due within the
        keep-alive (polecat/fetch/pool.py rule 11)."""
        if self._pool is None:
            return
        try:
            origin = request_parts(url)[0]
        except (UnsupportedUrl, ValueError):  # never fetched, so no connection is kept for it
            return
        self._pool.let_go(origin)

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None,
                    stream: StreamChoice | None = None, max_bytes: int | None = None,
                    gate: SendGate | None = None) -> Response:
        """GET ``url``; with a validator, a conditional GET (a 304 comes back as a Response); with
        ``stream``, the body goes to the sink it gives for the response head, if any. ``max_bytes``: a
        body cap below ``max_body_bytes`` for this one (a page requisite's, frontier/requisites.py).
        ``gate`` is asked just before the request is written (pool rule 8): closed,
        :class:`RequestWithheld`."""
        if etag is None and last_modified is None:
            return await self._get(url, (), gate, stream, max_bytes)
        conditional: list[tuple[str, str]] = []
        if etag is not None:
            conditional.append(("If-None-Match", _header_value(etag)))
        if last_modified is not None:
            conditional.append(("If-Modified-Since", _header_value(last_modified)))
        return await self._get(url, tuple(conditional), gate, stream, max_bytes)

    async def fetch_robots(self, url: str, *, pacer: RedirectPacer | None = None,
                           gate: SendGate | None = None) -> Response:
        """GET a robots.txt, following up to 5 redirects (also to other hosts). Returns the last
        response: a 3xx here means the chain did not end (or looped, or had no Location).

        Each hop is a request to the host it lands on: with a ``pacer``, every hop first waits for that
        host's turn (``pacer.before``), and the pacer hears how it ended (``pacer.after``). ``gate`` is
        asked before every hop."""
        seen = {url}
        resp = await self._get(url, (), gate)
        for _ in range(ROBOTS_MAX_REDIRECTS):
            if not (300 <= resp.status < 400 and resp.location):
                break
            from yarl import URL  # a redirected robots.txt is rare: yarl loads for it

            try:
                target = str(URL(resp.url, encoded=True).join(URL(resp.location)))
            except ValueError:
                break
            if target in seen:
                break
            seen.add(target)
            if pacer is not None:
                await pacer.before(target, resp)
            try:
                resp = await self._get(target, (), gate)
            except FetchError:
                if pacer is not None:
                    pacer.after(target, None)
                raise
            if pacer is not None:
                pacer.after(target, resp)
        return resp

    async def _get(self, url: str, extra: tuple[tuple[str, str], ...], gate: SendGate | None,
                   stream: StreamChoice | None = None, max_bytes: int | None = None) -> Response:
        pool, loop = self._pool, self._loop
        if pool is None or loop is None:
            raise RuntimeError("Fetcher used outside 'async with'")
        phase = "connect"
        started = self._clock.monotonic()
        cfg = self._cfg
        t0 = loop.time()
        deadline = Deadline(t0 + self._header_budget, t0 + cfg.total_timeout, cfg.read_gap_timeout, loop)
        try:
            origin, path, host_header, auth = request_parts(url)
            proxies = self._proxies
            proxy = proxies.proxy_for(*origin) if proxies is not None and origin[0] == "http" else None
            if proxy is not None:
                path = f"http://{host_header}{path}"  # absolute form (proxy rule 3)
                if proxy.authorization is not None:
                    auth += (("Proxy-Authorization", proxy.authorization),)
            request = encode_get(path, host_header, self._headers + extra + auth)
            conn, head = await pool.exchange(origin, request, gate)
            try:
                phase = "body"
                deadline.body()
                first_byte = self._clock.monotonic()
                remote_ip = conn.peer_ip
                decoder = make_decoder(head.get("content-encoding"))
                sink = stream(head.status, media_type(head.get("content-type"))[0]) if stream else None
                if sink is not None:
                    cap = sink.max_bytes
                    wire_cap = int(cap * _WIRE_SLACK) + _READ_SIZE
                else:
                    cap, wire_cap = cfg.max_body_bytes, self._wire_cap
                    if max_bytes is not None and max_bytes < cap:
                        cap, wire_cap = max_bytes, int(max_bytes * _WIRE_SLACK) + _READ_SIZE
                # A BytesIO grows in place and hands its buffer over uncopied: a list of parts joined at
                # the end would hold the body twice (20 MiB for a page at the 10 MiB cap).
                body = io.BytesIO()
                size = wire = 0
                truncated = False
                while chunk := await conn.read():
                    deadline.progress()
                    wire += len(chunk)
                    out = decoder.decode(chunk, cap - size + 1)
                    # The wire is bounded with its framing (conn.received, never less than the body
                    # bytes read): a body sent as one-byte chunks is six times its payload, and parsing
                    # it costs per chunk.
                    if size + len(out) > cap or conn.received > wire_cap:
                        if sink is None:
                            body.write(memoryview(out)[: cap - size])
                        else:
                            sink.feed(bytes(memoryview(out)[: cap - size]))
                        truncated = True
                        break
                    size += len(out)
                    if sink is None:
                        body.write(out)
                        continue
                    sink.feed(bytes(out))
                    if sink.done:
                        truncated = True  # the rest is unread: the connection is not reused
                        break
            finally:
                pool.release(conn)  # a connection with unread body (truncation, errors) is closed
        except asyncio.CancelledError:
            if deadline.expired_here():
                raise FetchTimeout(f"{url}: {phase}: timed out ({deadline.reason})") from None
            raise
        except RequestWithheld:
            raise  # nothing was sent: not a fetch outcome
        except FetchError:
            raise  # ours already (module docstring): not its own cause
        except Exception as exc:
            raise _translate(exc, url, phase) from exc
        finally:
            deadline.cancel()
        status = head.status
        content_type, charset = media_type(head.get("content-type"))
        retry = head.get("retry-after")
        return Response(
            url=url,
            status=status,
            headers=head.headers,
            body=body.getvalue(),
            truncated=truncated,
            content_type=content_type,
            charset=charset,
            location=head.get("location") if 300 <= status < 400 else None,
            retry_after=parse_retry_after(retry, self._clock.wall()) if retry else None,
            remote_ip=remote_ip,
            started=started,
            first_byte=first_byte,
            ended=self._clock.monotonic(),
            wire_bytes=wire,
            streamed=sink is not None,
        )
