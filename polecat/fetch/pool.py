"""Connections for the Fetcher: an asyncio protocol per TCP or TLS connection that runs the sans-IO
parser of :mod:`polecat.fetch.h1`, and a pool of keep-alive connections per origin.

Rules:

1. At most ``limit`` connections are in use at once, at most ``limit_per_host`` to one origin (scheme,
   host, port); 0 is no limit. A request over either waits, first come first served among those that
   can go.
2. A connection goes back to the pool only when its response ended as HTTP/1.1 lets it (h1 rule 5) and
   its reader took the whole body. An idle connection is reused newest first (the likeliest to be still
   open). It is closed when it has been idle :data:`KEEPALIVE` seconds, when the server closes it, or
   when bytes arrive on it while idle.
3. A request on a reused connection that ends before any byte of its response (the server closed the
   idle connection as the request went out) is sent once more, on a new connection; aiohttp, the client
   before this one, did the same for GETs.
4. A connect tries the resolver's addresses in order (IPv4 first), each bounded by ``connect_timeout``;
   the resolver applies the SSRF guard (IP literals through ``check_host``). The last attempt's error is
   raised with no reference to it left in the connecting frame: that frame is in the error's traceback,
   so one would be a cycle that only the garbage collector frees, one per failed connect
   (benchmarks/README.md "Issue 39: the loop in the 1M-host breadth crawl").
5. A body waiting to be read is bounded: past :data:`HIGH_WATER` buffered bytes the connection stops
   reading from the socket until the reader drains it.
6. Connections open in total (in use + idle + closing) are at most ``max_open`` (0 is no cap; the node
   derives it from the descriptor limit, polecat/fetch/descriptors.py). Before a new connection is
   opened past the cap, the idle connections released longest ago are closed (LRU across origins,
   :func:`idle_to_close`): a breadth crawl touches thousands of hosts a minute, and each keeps its
   connection idle for :data:`KEEPALIVE` seconds unless something closes it. A closed connection holds
   its descriptor until the loop has run its ``connection_lost`` (the transport closes the socket a loop
   iteration later), so it counts until then, and a connect waits for those closes when closing idle
   ones is not enough. ``limit`` may not exceed ``max_open``, so room always comes.
7. With proxy routes, a target they send through a proxy is connected through it (polecat/fetch/proxy.py,
   its rules 3-6): the target is resolved and checked here as in rule 4, the proxy connected to once,
   within ``connect_timeout`` for the whole (CONNECT and TLS included). Connections stay per target
   origin, so rules 1-3 and 6 hold as without a proxy.
8. A request may carry a send gate (:data:`SendGate`): it is asked right before the request's bytes
   are written, with no wait in between, and a closed gate sends nothing (the connection is closed
   unused: this is rare, a node losing a host's slice). Waits for a slot, a connect or a resend all
   come before the question.
9. The pool is short of descriptors (:meth:`ConnectionPool.short`) while its connections (rule 6's
   count) are at :data:`SHORT` of ``max_open`` or more: a connection to a new host then closes one kept
   for a host in rotation, and the node prefers those hosts (polecat/frontier/leasing.py rule 6).
10. TLS sessions are resumed: with a :class:`ResumingContext` (the Fetcher's), a connection to a host
   offers the session kept for that host, so a host whose connections close and reopen (keep-alive
   expiry, rule 6's LRU closes, ``Connection: close``) skips the certificate exchange and its check when
   the server agrees. A session is taken from a connection whose handshake was full, once, when the
   pool closes it after a response ended (a TLS 1.3 ticket comes after the handshake): at its release
   when it is not reusable, or when it is closed idle (keep-alive, rules 6 and 12, a server's close);
   never when its host is let go (rule 11) or the pool closes: a host that needs no more connections
   needs no session, and a breadth crawl's hosts mostly need none (the reads of 4,096 hosts' sessions,
   kept and leaked, were ~55 MiB on 3.11). A resumed connection leaves the
   kept session in place (its ticket is offered again until the server declines it, and then the full
   handshake that follows gives the next one), because reading ``SSLObject.session`` costs ~0.3 ms (it
   serialises and parses the session, the peer's certificate in it) and, on the Pythons of
   :data:`SESSION_READ_LEAKS`, leaks that copy. At most :data:`TLS_SESSIONS` hosts' sessions are kept,
   least recently offered dropped first; where reads leak, at most :data:`TLS_SESSIONS` are taken in
   all. :meth:`ResumingContext.stats` has the handshakes and those resumed (the hit ratio).
11. The node lets an origin go (:meth:`ConnectionPool.let_go`) when its host has nothing due within
   :data:`KEEPALIVE` (polecat/node/lease_runner.py rule 9, the decision polecat/frontier/leasing.py rule
   10): the origin's idle connections are closed at once instead of after :data:`KEEPALIVE`. A breadth
   crawl finishes thousands of hosts a minute, and each kept its last connection for 30 s: ~4,000 open
   at 100,000 pages, and an idle TLS connection holds ~40-60 KB of memory (OpenSSL's connection and
   session, the loop's TLS layer) against ~3 KB for a TCP one (benchmarks/README.md "HTTPS breadth
   crawl, and TLS session resumption").
12. TLS connections held (connecting, in use, idle, closing) are at most ``max_tls``: :data:`TLS_OPEN`,
   or ``limit`` where that is more (0 ``limit``: no cap). Their memory is the reason: an idle TLS
   connection holds ~40-60 KB (OpenSSL's connection and the peer's certificate, uvloop's TLS layer and
   its 256 KiB read buffer, resident where data came) against ~3 KB for a TCP one, and a breadth crawl
   under rule 6's cap alone kept ~3,500-3,900 of them open (hosts started and not finished), ~200 MiB.
   The pool is short (rule 9) from :data:`TLS_SHORT` of ``max_tls`` TLS connections held, so the node
   finishes the hosts in rotation before it starts more, and a TLS connect past ``max_tls`` first closes
   the idle TLS connections released longest ago, as rule 6 does. The gap between the two is wide on
   purpose: with rule 11 the idle connections are those of hosts in rotation, and a cap at the shortage
   (tried: 1,024 and 0.9 of it) closed them under the crawl: 3.4 handshakes a host, 0.88 ms of CPU a
   request against 0.55.
13. Before the first TLS connection, glibc's mmap threshold is fixed at :data:`MMAP_THRESHOLD`
   (:func:`fix_mmap_threshold`, the Fetcher's first TLS context): uvloop's TLS layer mallocs a 256 KiB
   read buffer per connection, and glibc, which raises its threshold past each mmapped chunk freed,
   then serves them from the heap, where every page once touched stays resident and the heap
   fragments as connections come and go: 70 KiB of RssAnon per open TLS connection (15,000 made, 1,500
   open, benchmarks/bench_conn_memory.py) against 41-44 KiB with the threshold fixed, for ~0.05 ms more
   CPU per connection (each buffer its own mapping). The threshold is the process's: any allocation of
   256 KiB or more that no free chunk of the heap fits is a mapping of its own (mmap, page faults,
   munmap), so the hot paths keep theirs under it or keep them: the TLS reads (rule 14) and lexbor's
   token arenas (polecat/parse/_extract.c rule 7) were 1.8-2.4 mmap calls a request of a TLS breadth
   crawl, 0.13-0.14 left (benchmarks/README.md "The HTTPS breadth crawl's CPU").
   Elsewhere than glibc nothing is set.
14. A TLS read asks OpenSSL for at most :data:`TLS_READ` bytes (the SSL objects of a
   :class:`ResumingContext`, :class:`CappedReads`): the loops' TLS layers ask for 256 KiB at every read
   (uvloop's ``SSL_READ_MAX_SIZE``, asyncio's ``max_size``), and CPython makes a ``bytes`` of that size
   before each read and shrinks it after, the read that finds nothing (``SSLWantReadError``) included.
   Past rule 13's threshold each of those was a mapping of its own: mmap, page faults, mremap to shrink
   it and munmap, ~0.9 a request of a TLS breadth crawl. One read returns one TLS record's data at most,
   and a record holds at most :data:`TLS_READ` bytes, so the cap adds no read.
15. The pool is full (:meth:`ConnectionPool.full`, :func:`tls_full`) while its TLS connections held (rule 12's
   count) and the node's https leases (those that may open a TLS connection; the node counts them) that are
   not in the pool yet reach ``max_tls``: each of those may open a connection, and one opened past the cap
   closes, by rule 12, the idle connection of a host in rotation, which reconnects (a handshake, its session
   read: rule 10). An https lease in the pool (its request holding a slot, :attr:`ConnectionPool._tls_in_use`)
   has its connection counted already; one that is not (starting, or past its response) is counted as if it
   would open one, so the count errs towards full. While full the node leases no host that is not in rotation
   and would open a TLS connection (an https URL; a plain-HTTP host opens none, and is leased:
   polecat/frontier/leasing.py rule 11): rule 12's shortage alone only prefers the hosts in rotation, and a
   crawl fast enough to keep more of them than the shortage took new hosts whenever none in rotation was due,
   past the cap: 282-302 MiB of RssAnon against 197-207, 3,110-4,539 handshakes resumed (benchmarks/README.md
   "The HTTPS breadth crawl at rule 12's cap"). Plain-HTTP leases are not counted: they open no TLS
   connection, and counting them, as this rule first did, held the https hosts of a mixed crawl back with the
   TLS connections under the cap (benchmarks/README.md "A mixed crawl at the TLS cap").
"""

from __future__ import annotations

import asyncio
import ctypes
import ssl
import sys
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Protocol, cast

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.errors import RequestWithheld
from polecat.fetch.guard import is_ip_literal
from polecat.fetch.h1 import Head, IncompleteResponse, ResponseParser
from polecat.fetch.proxy import ProxyAddress, ProxyRoutes, connect_proxy, open_tunnel

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "HIGH_WATER", "KEEPALIVE", "MMAP_THRESHOLD", "SESSION_READ_LEAKS", "SHORT", "TLS_OPEN", "TLS_READ",
    "TLS_SESSIONS", "TLS_SHORT", "CappedReads", "Connection", "ConnectionPool", "Origin", "ResumingContext",
    "SendGate", "TlsStats", "fix_mmap_threshold", "idle_to_close", "tls_full",
]

MMAP_THRESHOLD = 256 * 1024
"""glibc's mmap threshold for a process that makes TLS connections (rule 13): uvloop's read buffer (256
KiB, its chunk 16 bytes more) just reaches it, and what is smaller stays in the heap as before."""
TLS_READ = 16 * 1024
"""Bytes a TLS read asks for at most (rule 14): a TLS record's most plaintext (2**14, RFC 8446 5.1)."""
TLS_SESSIONS = 4_096
"""Hosts whose TLS session is kept for resumption at most (rule 10): ~6-7 KB each, ~28 MiB in all."""
_M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the mmap threshold (glibc's malloc.h)."""
SESSION_READ_LEAKS = sys.version_info < (3, 12, 8) or (3, 13) <= sys.version_info < (3, 13, 1)
"""Whether reading ``SSLObject.session`` leaks a copy of the session (~6.5 KB a read): CPython gh-116810,
from 3.10 until its fix in 3.12.8 and 3.13.1 (rule 10 bounds the reads there)."""

KEEPALIVE = 30.0
"""Seconds an idle connection is kept (aiohttp's ``keepalive_timeout`` in the client before)."""
TLS_OPEN = 2_048
"""TLS connections held at most (rule 12), unless the concurrency is higher: ~100-120 MiB."""
TLS_SHORT = 0.5
"""Share of ``max_tls`` from which the pool is short of descriptors (rule 12): ~1,024 TLS connections."""
SHORT = 0.9
"""Share of ``max_open`` from which the pool is short of descriptors (rule 9)."""
HIGH_WATER = 256 * 1024
"""Body bytes buffered before the connection pauses reading (rule 5)."""

Origin = tuple[str, str, int]
"""(scheme, host, port): what a connection can be reused for."""
SendGate = Callable[[], bool]
"""Whether a request may still be written now (rule 8)."""


def fix_mmap_threshold() -> bool:
    """Rule 13: fix glibc's mmap threshold at :data:`MMAP_THRESHOLD`; whether it was (False off glibc)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc's alone: another libc's mallopt may differ
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def idle_to_close(idle: int, closing: int, in_use: int, max_open: int) -> int:
    """How many descriptors must be released before one more connection opens (rule 6): ``in_use``
    counts the request about to connect, ``closing`` those closed whose descriptor is not released yet;
    0 ``max_open`` is no cap. The closes under way count towards it: the pool closes idle connections
    only for the rest, then waits."""
    if not max_open:
        return 0
    return max(0, idle + closing + in_use - max_open)


def tls_full(held: int, starting: int, max_tls: int) -> bool:
    """Rule 15: whether ``held`` TLS connections (rule 12's count) and ``starting`` leases that may each
    open one reach ``max_tls`` (0: no cap)."""
    return bool(max_tls) and held + starting >= max_tls


class AddressSource(Protocol):
    """What the pool needs of the resolver (:class:`polecat.fetch.dns.CachingResolver` fits)."""

    def check_host(self, host: str) -> None: ...

    async def lookup(self, host: str) -> tuple[tuple[str, int], ...]: ...


@dataclass(frozen=True, slots=True)
class TlsStats:
    """TLS connections made through the pool (rule 10)."""

    handshakes: int
    resumed: int
    """Handshakes that resumed a kept session."""
    sessions: int
    """Hosts with a session kept now."""

    @property
    def hit_ratio(self) -> float:
        """Resumed handshakes / handshakes (0.0 before the first)."""
        return self.resumed / self.handshakes if self.handshakes else 0.0


class CappedReads(ssl.SSLObject):
    """An SSL object whose reads ask for at most :data:`TLS_READ` bytes (rule 14)."""

    def read(self, len: int = 1024, buffer: WriteableBuffer | None = None) -> bytes:
        """What :meth:`ssl.SSLObject.read` returns, asked for :data:`TLS_READ` bytes at most."""
        return super().read(min(len, TLS_READ), buffer)


class ResumingContext(ssl.SSLContext):
    """A client TLS context that offers each host the session kept for it (rule 10). asyncio's and
    uvloop's ``create_connection`` and ``start_tls`` take no session: their TLS layers call
    :meth:`wrap_bio` for each connection, so that is where the session goes in."""

    sslobject_class = CappedReads

    def __init__(self, protocol: int) -> None:  # SSLContext.__new__ reads it
        self._sessions: OrderedDict[str, ssl.SSLSession] = OrderedDict()
        """The kept session of each host, least recently offered first."""
        self._handshakes = 0
        self._resumed = 0
        self._takes_left = TLS_SESSIONS if SESSION_READ_LEAKS else -1
        """Sessions that may still be read where reads leak; -1: no bound."""

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                 server_hostname: str | bytes | None = None,
                 session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        """What the event loop's TLS layer calls for each connection: the host's kept session offered."""
        if session is None and isinstance(server_hostname, str):
            session = self.offer(server_hostname)
        return super().wrap_bio(incoming, outgoing, server_side=server_side, server_hostname=server_hostname,
                                session=session)

    def offer(self, host: str) -> ssl.SSLSession | None:
        """The session kept for ``host``, now its most recently offered; None if none is."""
        session = self._sessions.get(host)
        if session is not None:
            self._sessions.move_to_end(host)
        return session

    def connected(self, tls: ssl.SSLObject | None) -> bool:
        """Count a handshake done; whether its session is to be taken when its first response ends
        (a full handshake, and reads left)."""
        if tls is None:
            return False
        self._handshakes += 1
        if tls.session_reused:
            self._resumed += 1
            return False
        return self._takes_left != 0

    def keep(self, host: str, tls: ssl.SSLObject) -> None:
        """Keep the session of ``host``'s connection ``tls`` for its next ones, within the bound."""
        if self._takes_left == 0:
            return
        session = tls.session
        if session is None:
            return
        if self._takes_left > 0:
            self._takes_left -= 1
        sessions = self._sessions
        sessions[host] = session
        sessions.move_to_end(host)
        if len(sessions) > TLS_SESSIONS:
            sessions.popitem(last=False)

    def stats(self) -> TlsStats:
        """Handshakes, resumed ones and sessions kept so far."""
        return TlsStats(handshakes=self._handshakes, resumed=self._resumed, sessions=len(self._sessions))


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: :meth:`send` a request, then :meth:`head` and :meth:`read` its response."""

    __slots__ = (
        "_chunks", "_error", "_loop", "_paused", "_size", "_waiter", "closed", "idle_since", "lost",
        "on_lost", "origin", "parser", "received", "remote_ip", "reused", "take_session", "transport",
    )

    def __init__(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.origin = origin
        self._loop = loop  # kept: asyncio.get_running_loop() asks the OS for the pid on every call
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        """The response in flight; None while idle."""
        self._chunks: list[bytes | memoryview] = []
        self._size = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.closed = False
        self.lost = False
        """connection_lost has run: the socket is closed, its descriptor released."""
        self.on_lost: Callable[[Connection], None] | None = None
        self.idle_since = 0.0
        self.reused = False
        self.received = 0
        """Bytes received for the response in flight, as they came (head and chunk framing included)."""
        self.remote_ip: str | None = None
        """The target's address when it is not the peer's: through a proxy (proxy rule 6)."""
        self.take_session = False
        """A full handshake's TLS session, not read yet: kept when the pool closes it (rule 10)."""

    # --- asyncio's side ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:  # bytes while idle (rule 2)
            self.close()
            return
        self.received += len(data)
        try:
            body = parser.feed(data)
        except Exception as exc:  # MalformedResponse: the response is unusable, so is the connection
            self._fail(exc)
            return
        if body:
            self._chunks.append(body)
            self._size += len(body)
            if self._size > HIGH_WATER and not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        return False  # let the transport close; connection_lost ends the response

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self.lost = True
        if self.on_lost is not None:
            self.on_lost(self)
        parser = self.parser
        if parser is not None and not parser.done and self._error is None:
            try:
                parser.feed_eof()
            except IncompleteResponse as incomplete:
                if exc is not None:
                    incomplete.__cause__ = exc
                self._error = incomplete
        self._wake()

    # --- the Fetcher's side ------------------------------------------------------------------------

    def send(self, request: bytes) -> None:
        """Start a request on this (idle) connection."""
        assert self.transport is not None and self.parser is None
        self.parser = ResponseParser()
        self._chunks, self._size, self._error, self.received = [], 0, None, 0
        self.transport.write(request)

    async def head(self) -> Head:
        """The response head, once complete; raises what ended the response before it."""
        parser = self.parser
        assert parser is not None
        while parser.head is None:
            if self._error is not None:
                raise self._error
            if self.closed:
                raise IncompleteResponse("connection closed before the response head")
            await self._wait()
        return parser.head

    async def read(self) -> bytes | memoryview:
        """The next body bytes; ``b""`` once the body ended. Raises what cut it short."""
        parser = self.parser
        assert parser is not None
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if parser.done:
                return b""
            await self._wait()
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks, self._size = [], 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    @property
    def buffered(self) -> int:
        """Body bytes received and not read yet (rule 5 bounds them)."""
        return self._size

    @property
    def peer_ip(self) -> str | None:
        if self.remote_ip is not None:
            return self.remote_ip
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return peer[0] if peer else None

    def stale(self, idle_since_before: float) -> bool:
        """An idle connection not to be used again: closed, or idle since before that time (rule 2)."""
        return self.closed or self.idle_since <= idle_since_before

    def reusable(self) -> bool:
        """The response ended, was read to its end, and left the connection fit for another (rule 2)."""
        parser = self.parser
        return (parser is not None and parser.done and parser.reusable and not self._chunks
                and self._error is None and not self.closed)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _wait(self) -> None:
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self.close()
        self._wake()


class ConnectionPool:
    """Keep-alive connections per origin, with the limits of rule 1."""

    def __init__(
        self,
        addresses: AddressSource,
        *,
        limit: int,
        limit_per_host: int,
        connect_timeout: float,
        tls: Callable[[], ssl.SSLContext],
        clock: Clock = SYSTEM_CLOCK,
        max_open: int = 0,
        proxies: ProxyRoutes | None = None,
    ) -> None:
        if max_open and not 0 < limit <= max_open:
            raise ValueError(f"limit {limit} must be in [1, max_open {max_open}] (rule 6)")
        self._addresses = addresses
        self._proxies = proxies
        self._max_open = max_open
        self._max_tls = max(TLS_OPEN, limit) if limit else 0
        self._tls_held = 0
        """TLS connections connecting, open or closing: their descriptor not released (rule 12)."""
        self._limit = limit
        self._limit_per_host = limit_per_host
        self._connect_timeout = connect_timeout
        self._tls = tls
        self._clock = clock
        self._idle: dict[Origin, list[Connection]] = {}
        self._idle_lru: dict[Connection, None] = {}
        """Every idle connection, released longest ago first (rule 6)."""
        self._closing: set[Connection] = set()
        """Closed by the pool, descriptor not released yet (rule 6)."""
        self._room: list[asyncio.Future[None]] = []
        """Connects waiting for a close to finish (rule 6)."""
        self._lru_closed = 0
        self._in_use = 0
        self._tls_in_use = 0
        """Requests in use to https origins (rule 15)."""
        self._in_use_per: dict[Origin, int] = {}
        self._waiters: deque[tuple[Origin, asyncio.Future[None]]] = deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._open: set[Connection] = set()

    async def exchange(self, origin: Origin, request: bytes,
                       gate: SendGate | None = None) -> tuple[Connection, Head]:
        """Send ``request`` to ``origin`` and wait for the response head (rule 3 included). The caller
        reads the body and must :meth:`release` the connection, also on errors. ``gate`` is asked just
        before each write (rule 8): closed, nothing is written and :class:`RequestWithheld` is raised."""
        await self._take_slot(origin)
        try:
            conn = self._idle_connection(origin) or await self._connect(origin)
        except BaseException:
            self._free_slot(origin)
            raise
        while True:
            if gate is not None and not gate():  # rule 8: no await between this and the write
                self.release(conn)
                raise RequestWithheld(f"{origin[1]}: the send gate closed before the request was written")
            conn.send(request)
            try:
                return conn, await conn.head()
            except IncompleteResponse:
                self._drop(conn, keep_session=conn.reused)  # rule 10: a new one ended no response
                if not conn.reused:  # rule 3: only a reused connection gets one more try, on a new one
                    self._free_slot(origin)
                    raise
            except BaseException:
                self.release(conn)
                raise
            try:
                conn = await self._connect(origin)
            except BaseException:
                self._free_slot(origin)
                raise

    def release(self, conn: Connection) -> None:
        """The request on ``conn`` is over: keep it for the next one (rule 2) or close it."""
        self._free_slot(conn.origin)
        if conn.reusable():
            conn.parser = None
            conn.reused = True
            conn.idle_since = self._clock.monotonic()
            self._idle.setdefault(conn.origin, []).append(conn)
            self._idle_lru[conn] = None
            if self._sweep is None:
                self._arm_sweep()
        else:
            self._drop(conn)

    def close(self) -> None:
        """Close every connection (those in use end their responses with an error)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in self._open:
            conn.close()
        self._open.clear()
        self._idle.clear()
        self._idle_lru.clear()

    def short(self) -> bool:
        """Rule 9: connections in use, idle and closing are at :data:`SHORT` of ``max_open`` or more, or
        the TLS ones at :data:`TLS_SHORT` of ``max_tls`` (rule 12)."""
        held = self._in_use + len(self._idle_lru) + len(self._closing)
        return ((bool(self._max_open) and held >= SHORT * self._max_open)
                or (bool(self._max_tls) and self._tls_held >= TLS_SHORT * self._max_tls))

    def full(self, leases: int) -> bool:
        """Rule 15: whether the TLS connections held and those the node's https ``leases`` in flight that
        are not in the pool (its requests in use to https origins) may open reach ``max_tls``."""
        return tls_full(self._tls_held, max(0, leases - self._tls_in_use), self._max_tls)

    @property
    def tls_held(self) -> int:
        """TLS connections connecting, open or closing (rule 12 bounds them)."""
        return self._tls_held

    @property
    def open_connections(self) -> int:
        """Connections open now, in use and idle (rule 6 bounds them)."""
        return len(self._open)

    @property
    def lru_closed(self) -> int:
        """Idle connections closed to stay under ``max_open`` (rule 6) since the pool was made."""
        return self._lru_closed

    def let_go(self, origin: Origin) -> None:
        """Rule 11: close the idle connections kept for ``origin`` now; those in use are left as they are."""
        idle = self._idle.pop(origin, None)
        if not idle:
            return
        for conn in idle:
            del self._idle_lru[conn]
            self._drop(conn, keep_session=False)  # rule 10: a host let go needs no session

    def _drop(self, conn: Connection, keep_session: bool = True) -> None:
        """Close ``conn``; with ``keep_session``, its TLS session is kept first if it is to be (rule 10)."""
        if keep_session and conn.take_session:
            conn.take_session = False
            tls = self._tls()
            ssl_object = conn.transport.get_extra_info("ssl_object") if conn.transport is not None else None
            if isinstance(tls, ResumingContext) and ssl_object is not None:
                tls.keep(conn.origin[1], ssl_object)
        if conn in self._open:
            self._open.discard(conn)
            if not conn.lost:
                self._closing.add(conn)
        conn.close()

    def _lost(self, conn: Connection) -> None:
        """A connection's descriptor is released: a connect waiting for room may go (rules 6 and 12)."""
        self._closing.discard(conn)
        if conn.origin[0] == "https":
            self._tls_held -= 1
        room, self._room = self._room, []
        for fut in room:
            if not fut.done():
                fut.set_result(None)

    # --- rule 1 ------------------------------------------------------------------------------------

    def _can_go(self, origin: Origin) -> bool:
        return ((not self._limit or self._in_use < self._limit)
                and (not self._limit_per_host or self._in_use_per.get(origin, 0) < self._limit_per_host))

    async def _take_slot(self, origin: Origin) -> None:
        while not self._can_go(origin):
            fut = asyncio.get_running_loop().create_future()
            entry = (origin, fut)
            self._waiters.append(entry)
            try:
                await fut
            except BaseException:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                elif fut.done() and not fut.cancelled():
                    self._wake_next()  # it was woken for a slot it will not use: pass it on
                raise
        self._in_use += 1
        self._tls_in_use += origin[0] == "https"
        self._in_use_per[origin] = self._in_use_per.get(origin, 0) + 1

    def _free_slot(self, origin: Origin) -> None:
        self._in_use -= 1
        self._tls_in_use -= origin[0] == "https"
        left = self._in_use_per[origin] - 1
        if left:
            self._in_use_per[origin] = left
        else:
            del self._in_use_per[origin]
        if self._waiters:
            self._wake_next()

    def _wake_next(self) -> None:
        for entry in self._waiters:
            origin, fut = entry
            if self._can_go(origin):
                self._waiters.remove(entry)
                if not fut.done():
                    fut.set_result(None)
                return

    # --- rules 2 and 4 -----------------------------------------------------------------------------

    def _idle_connection(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        deadline = self._clock.monotonic() - KEEPALIVE
        while idle:
            conn = idle.pop()
            del self._idle_lru[conn]
            if not conn.stale(deadline):
                return conn
            self._drop(conn)
        return None

    async def _make_room(self, tls: bool) -> None:
        """Close the idle connections released longest ago, and wait for closes under way, until one
        more fits under ``max_open`` (rule 6) and, for a TLS one (``tls``: counted in ``_tls_held``
        already), under ``max_tls`` (rule 12)."""
        while True:
            if excess := idle_to_close(len(self._idle_lru), len(self._closing), self._in_use, self._max_open):
                if excess > len(self._closing) and self._close_idle(excess - len(self._closing)):
                    continue
            elif tls and self._max_tls and (excess := self._tls_held - self._max_tls) > 0:
                closing = sum(1 for conn in self._closing if conn.origin[0] == "https")
                if excess > closing and self._close_idle(excess - closing, "https"):
                    continue
            else:
                return
            fut = asyncio.get_running_loop().create_future()
            self._room.append(fut)
            await fut

    def _close_idle(self, count: int, scheme: str | None = None) -> int:
        """Close up to ``count`` idle connections (of ``scheme`` only, if given), released longest ago
        first; how many."""
        chosen = list(islice((conn for conn in self._idle_lru if scheme is None or conn.origin[0] == scheme),
                             count))
        for conn in chosen:
            del self._idle_lru[conn]
            idle = self._idle[conn.origin]
            idle.remove(conn)
            if not idle:
                del self._idle[conn.origin]
            self._lru_closed += 1
            self._drop(conn)
        return len(chosen)

    async def _connect(self, origin: Origin) -> Connection:
        tls = origin[0] == "https"
        if tls:
            self._tls_held += 1  # rule 12: until its descriptor is released (_lost), or the connect fails
        try:
            await self._make_room(tls)
            return await self._open_connection(origin)
        except BaseException:
            if tls:
                self._tls_held -= 1
            raise

    async def _open_connection(self, origin: Origin) -> Connection:
        scheme, host, port = origin
        proxy = self._proxies.proxy_for(scheme, host, port) if self._proxies is not None else None
        if is_ip_literal(host):
            self._addresses.check_host(host)
            addresses: tuple[tuple[str, int], ...] = ((host, 0),)
        else:
            addresses = await self._addresses.lookup(host)
        tls = self._tls() if scheme == "https" else None
        loop = asyncio.get_running_loop()
        if proxy is not None:
            return await self._connect_via(proxy, origin, addresses[0][0], tls, loop)
        error: OSError | None = None
        for address, family in addresses:
            try:
                async with asyncio.timeout(self._connect_timeout):
                    _, conn = await loop.create_connection(
                        lambda: Connection(origin, loop), address, port, ssl=tls, family=family,
                        server_hostname=host if tls is not None else None,
                    )
            except OSError as exc:  # also TimeoutError and ssl.SSLError
                error = exc
                continue
            self._opened(conn, tls)
            return conn
        assert error is not None
        try:
            raise error
        finally:
            error = None  # rule 4: this frame would hold the error its traceback holds

    async def _connect_via(self, proxy: ProxyAddress, origin: Origin, address: str,
                           tls: ssl.SSLContext | None, loop: asyncio.AbstractEventLoop) -> Connection:
        """Rule 7: a connection to ``origin`` through ``proxy``, ``address`` being the target's checked
        address."""
        _, host, port = origin
        def made() -> Connection:
            return Connection(origin, loop)
        if tls is not None:
            _, conn = await open_tunnel(loop, proxy, address, port, made, tls, host, self._connect_timeout)
        else:
            _, conn = await connect_proxy(loop, proxy, made, self._connect_timeout)
        conn.remote_ip = address
        self._opened(conn, tls)
        return conn

    def _opened(self, conn: Connection, tls: ssl.SSLContext | None) -> None:
        conn.on_lost = self._lost
        self._open.add(conn)
        if isinstance(tls, ResumingContext) and conn.transport is not None:  # rule 10
            conn.take_session = tls.connected(conn.transport.get_extra_info("ssl_object"))

    def _arm_sweep(self) -> None:
        self._sweep = asyncio.get_running_loop().call_later(KEEPALIVE, self._run_sweep)

    def _run_sweep(self) -> None:
        self._sweep = None
        deadline = self._clock.monotonic() - KEEPALIVE
        for origin in list(self._idle):
            kept = []
            for conn in self._idle[origin]:
                if conn.stale(deadline):
                    del self._idle_lru[conn]
                    self._drop(conn)
                else:
                    kept.append(conn)
            if kept:
                self._idle[origin] = kept
            else:
                del self._idle[origin]
        if self._idle:
            self._arm_sweep()
