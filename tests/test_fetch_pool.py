"""The keep-alive pool (polecat/fetch/pool.py) against raw loopback servers: reuse, the limits, the one
retry of a request on a connection the server closed, idle expiry, and the read bound."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeAlias

import pytest

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.config import DnsConfig, FetchConfig
from polecat.errors import ConnectError, RequestWithheld
from polecat.fetch import pool as pool_module
from polecat.fetch.dns import CachingResolver
from polecat.fetch.h1 import IncompleteResponse, encode_get
from polecat.fetch.http import Fetcher
from polecat.fetch.pool import HIGH_WATER, TLS_OPEN, ConnectionPool, Origin, idle_to_close, tls_full
from polecat.testing.fakes import FakeClock

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

Reader: TypeAlias = asyncio.StreamReader
Writer: TypeAlias = asyncio.StreamWriter
Handler = Callable[[int, int, Reader, Writer], Awaitable[bool]]
"""(connection number, request number on it, reader, writer) -> keep the connection open."""


class RawServer:
    """Counts connections and the most open at once; each request is answered by ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.heads: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            for request in range(1000):
                try:
                    self.heads.append(await reader.readuntil(b"\r\n\r\n"))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if not await self.handler(number, request, reader, writer):
                    return
        finally:
            self.open -= 1
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[RawServer]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        async with self._server:
            yield self
            for _ in range(100):  # let the handlers see their clients go (bounded) before the server stops
                if not self.open:
                    break
                await asyncio.sleep(0.01)

    @property
    def origin(self) -> Origin:
        return ("http", "127.0.0.1", self.port)


def ok(body: bytes = b"ok", delay: float = 0.0, extra: bytes = b"") -> Handler:
    async def handler(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        await asyncio.sleep(delay)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s%s" % (len(body), body, extra))
        await writer.drain()
        return True
    return handler


def make_pool(limit: int = 0, per_host: int = 0, clock: Clock = SYSTEM_CLOCK,
              max_open: int = 0) -> ConnectionPool:
    resolver = CachingResolver(DnsConfig(allow_private=True))
    return ConnectionPool(resolver, limit=limit, limit_per_host=per_host, connect_timeout=1.0,
                          tls=ssl.create_default_context,  # never called: these servers speak plain HTTP
                          clock=clock, max_open=max_open)


async def get(pool: ConnectionPool, origin: Origin) -> bytes:
    conn, head = await pool.exchange(origin, encode_get("/", f"127.0.0.1:{origin[2]}", ()))
    try:
        assert head.status == 200
        body = b""
        while chunk := await conn.read():
            body += chunk
        return body
    finally:
        pool.release(conn)


async def test_sequential_requests_reuse_one_connection() -> None:
    async with RawServer(ok()).running() as server:
        pool = make_pool()
        assert [await get(pool, server.origin) for _ in range(5)] == [b"ok"] * 5
        assert server.connections == 1
        pool.close()


async def test_per_host_limit_holds_and_every_request_completes() -> None:
    async with RawServer(ok(delay=0.05)).running() as server:
        pool = make_pool(limit=10, per_host=2)
        assert await asyncio.gather(*(get(pool, server.origin) for _ in range(8))) == [b"ok"] * 8
        assert server.most_open == 2
        pool.close()


async def test_total_limit_across_hosts() -> None:
    busy = most_busy = 0

    async def counted(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        nonlocal busy, most_busy
        busy += 1
        most_busy = max(most_busy, busy)
        try:
            return await ok(delay=0.05)(conn, request, reader, writer)
        finally:
            busy -= 1

    servers = [RawServer(counted) for _ in range(3)]
    async with servers[0].running(), servers[1].running(), servers[2].running():
        pool = make_pool(limit=2)
        assert await asyncio.gather(*(get(pool, s.origin) for s in servers for _ in range(3))) == [b"ok"] * 9
        assert most_busy == 2
        pool.close()


async def test_a_cancelled_waiter_does_not_strand_the_next() -> None:
    gate = asyncio.Event()

    async def held(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        await gate.wait()
        return await ok()(conn, request, reader, writer)

    async with RawServer(held).running() as server:
        pool = make_pool(limit=1)
        first = asyncio.create_task(get(pool, server.origin))
        await asyncio.sleep(0.05)
        waiting = asyncio.create_task(get(pool, server.origin))
        last = asyncio.create_task(get(pool, server.origin))
        await asyncio.sleep(0.05)
        waiting.cancel()
        gate.set()
        assert await first == b"ok"
        assert await asyncio.wait_for(last, 5) == b"ok"
        with pytest.raises(asyncio.CancelledError):
            await waiting
        pool.close()


async def test_a_reused_connection_closed_under_the_request_is_retried_once_on_a_new_one() -> None:
    async def first_only(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        if request > 0:
            return False  # read the request, close without a byte of answer
        return await ok()(conn, request, reader, writer)

    async with RawServer(first_only).running() as server:
        pool = make_pool()
        assert await get(pool, server.origin) == b"ok"
        assert await get(pool, server.origin) == b"ok"
        assert server.connections == 2
        pool.close()


async def test_a_new_connection_closed_before_the_answer_is_not_retried() -> None:
    async def never(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        return False

    async with RawServer(never).running() as server:
        pool = make_pool()
        with pytest.raises(IncompleteResponse):
            await get(pool, server.origin)
        assert server.connections == 1
        async with Fetcher(FetchConfig(), DnsConfig(allow_private=True)) as fetcher:
            with pytest.raises(ConnectError, match="closed before the response head"):
                await fetcher.fetch(f"http://127.0.0.1:{server.port}/")
        assert server.connections == 2
        pool.close()


async def test_bytes_past_the_response_or_while_idle_close_the_connection() -> None:
    async def chatty(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        if conn == 0:
            return await ok(extra=b"EXTRA")(conn, request, reader, writer)
        await ok()(conn, request, reader, writer)
        await asyncio.sleep(0.05)
        writer.write(b"unasked")
        return True

    async with RawServer(chatty).running() as server:
        pool = make_pool()
        assert await get(pool, server.origin) == b"ok"  # "EXTRA": not reused
        assert await get(pool, server.origin) == b"ok"
        await asyncio.sleep(0.2)  # "unasked" arrives on the idle connection: closed
        assert await get(pool, server.origin) == b"ok"
        assert server.connections == 3
        pool.close()


async def test_idle_connections_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "KEEPALIVE", 0.1)
    async with RawServer(ok()).running() as server:
        pool = make_pool()
        assert await get(pool, server.origin) == b"ok"
        await asyncio.sleep(0.3)
        assert server.open == 0  # the sweep closed it
        assert await get(pool, server.origin) == b"ok"
        assert server.connections == 2
        pool.close()


async def test_an_idle_connection_is_not_reused_once_keepalive_has_passed_on_the_pools_clock() -> None:
    """Idle expiry reads the injected clock: the same idle connection is reused a hair before
    KEEPALIVE and replaced at it, with no waiting (the sweep's own timer never fires in this test)."""
    clock = FakeClock()
    async with RawServer(ok()).running() as server:
        pool = make_pool(clock=clock)
        assert await get(pool, server.origin) == b"ok"
        clock.advance(pool_module.KEEPALIVE - 0.001)
        assert await get(pool, server.origin) == b"ok"
        assert server.connections == 1  # still fresh: reused
        clock.advance(pool_module.KEEPALIVE)
        assert await get(pool, server.origin) == b"ok"
        assert server.connections == 2  # idle for KEEPALIVE: dropped, a new one made
        pool.close()


async def test_an_unread_body_pauses_the_socket_at_high_water() -> None:
    body = bytes(range(256)) * (16 * HIGH_WATER // 256)
    async with RawServer(ok(body)).running() as server:
        pool = make_pool()
        conn, _ = await pool.exchange(server.origin, encode_get("/", "x", ()))
        await asyncio.sleep(0.3)
        assert HIGH_WATER < conn.buffered < 3 * HIGH_WATER  # paused, not the whole 4 MiB
        got = bytearray()
        while chunk := await conn.read():
            got += chunk
        assert got == body
        pool.release(conn)
        assert await get(pool, server.origin) == body  # read to its end: the connection was kept
        assert server.connections == 1
        pool.close()


async def test_fetcher_reads_chunked_and_close_delimited_bodies() -> None:
    async def framed(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        if request == 0:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
            await writer.drain()
            return True
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
        await writer.drain()
        return False

    async with RawServer(framed).running() as server:
        async with Fetcher(FetchConfig(), DnsConfig(allow_private=True)) as fetcher:
            url = f"http://127.0.0.1:{server.port}/"
            assert (await fetcher.fetch(url)).body == b"hello world"
            assert (await fetcher.fetch(url)).body == b"until the end"
            assert (await fetcher.fetch(url)).body == b"hello world"  # a new connection after the close
        assert server.connections == 2


async def test_the_request_a_fetch_sends() -> None:
    """Host with the port, the configured headers, validators, Basic credentials from the URL; no URL or
    validator can break the request line or add a header."""
    server = RawServer(ok())
    fetcher = Fetcher(FetchConfig(user_agent="bot/1 (+x)"), DnsConfig(allow_private=True))
    async with server.running(), fetcher:
        base = f"http://127.0.0.1:{server.port}"
        await fetcher.fetch(f"{base}/a%20b?q=1", etag='"v1"\r\nX-Injected: 1', last_modified="Wed")
        await fetcher.fetch(f"http://us%40er:pa:ss@127.0.0.1:{server.port}/caf\u00e9 x#frag")
    assert server.heads[0].decode() == (
        f"GET /a%20b?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUser-Agent: bot/1 (+x)\r\n"
        'Accept-Encoding: gzip, deflate, br, zstd\r\nAccept: */*\r\nIf-None-Match: "v1"  X-Injected: 1\r\n'
        "If-Modified-Since: Wed\r\n\r\n")
    first_line, *fields = server.heads[1].decode().split("\r\n")
    assert first_line == "GET /caf%C3%A9%20x HTTP/1.1"
    assert "Authorization: Basic dXNAZXI6cGE6c3M=" in fields  # base64 of "us@er:pa:ss"


async def test_idle_connections_to_close_before_one_more_opens() -> None:
    assert idle_to_close(idle=10, closing=0, in_use=5, max_open=0) == 0  # no cap
    assert idle_to_close(idle=3, closing=0, in_use=2, max_open=8) == 0
    assert idle_to_close(idle=6, closing=0, in_use=2, max_open=8) == 0  # 6 idle + 2 in use (one connecting)
    assert idle_to_close(idle=7, closing=0, in_use=2, max_open=8) == 1
    assert idle_to_close(idle=7, closing=0, in_use=8, max_open=8) == 7
    # closes whose descriptor is not released yet count: two releases needed, three under way
    assert idle_to_close(idle=1, closing=3, in_use=6, max_open=8) == 2


async def test_a_limit_above_the_cap_on_open_connections_is_refused() -> None:
    with pytest.raises(ValueError, match="max_open"):
        make_pool(limit=10, max_open=4)
    with pytest.raises(ValueError, match="max_open"):
        make_pool(limit=0, max_open=4)  # no limit on connections in use could not stay under the cap


async def test_open_connections_stay_under_the_cap_closing_the_least_recently_used_idle_one() -> None:
    servers = [RawServer(ok()) for _ in range(4)]
    async with servers[0].running(), servers[1].running(), servers[2].running(), servers[3].running():
        pool = make_pool(limit=2, max_open=3)
        for server in servers[:3]:
            assert await get(pool, server.origin) == b"ok"
        assert pool.open_connections == 3 and pool.lru_closed == 0
        assert await get(pool, servers[0].origin) == b"ok"  # reuse: servers[0] is now the newest idle
        assert await get(pool, servers[3].origin) == b"ok"  # a fourth connection: servers[1]'s goes
        assert pool.open_connections == 3 and pool.lru_closed == 1
        for _ in range(100):  # bounded: the server sees its client go
            if not servers[1].open:
                break
            await asyncio.sleep(0.01)
        assert servers[1].open == 0 and servers[0].open == servers[2].open == servers[3].open == 1
        assert await get(pool, servers[0].origin) == b"ok"  # still kept, not reopened
        assert [s.connections for s in servers] == [1, 1, 1, 1]
        pool.close()


async def test_the_pool_is_short_of_descriptors_near_its_cap() -> None:
    """Rule 7: idle connections count; no cap, never short."""
    servers = [RawServer(ok()) for _ in range(3)]
    async with servers[0].running(), servers[1].running(), servers[2].running():
        pool, uncapped = make_pool(limit=3, max_open=3), make_pool(limit=3)
        for server in servers[:2]:
            assert await get(pool, server.origin) == b"ok"
            assert await get(uncapped, server.origin) == b"ok"
        assert not pool.short()  # 2 of 3 idle: under 90 %
        assert await get(pool, servers[2].origin) == b"ok"
        assert await get(uncapped, servers[2].origin) == b"ok"
        assert pool.short() and not uncapped.short()
        pool.close()
        uncapped.close()


async def test_the_pool_is_full_when_its_tls_connections_and_the_leases_not_in_it_reach_the_cap() -> None:
    """Rule 15: an https lease not in the pool counts as a connection it may open (in the pool, it does
    not: tests/test_connection_memory.py, with TLS servers)."""
    assert not tls_full(held=2000, starting=47, max_tls=2048)
    assert tls_full(held=2000, starting=48, max_tls=2048)
    assert tls_full(held=2048, starting=0, max_tls=2048)
    assert not tls_full(held=5000, starting=5000, max_tls=0)  # no cap
    gate = asyncio.Event()

    async def held_back(conn: int, request: int, reader: Reader, writer: Writer) -> bool:
        await gate.wait()
        return await ok()(conn, request, reader, writer)

    async with RawServer(held_back).running() as server:
        pool = make_pool(limit=TLS_OPEN)  # rule 12: max_tls is TLS_OPEN
        assert pool.full(TLS_OPEN) and not pool.full(TLS_OPEN - 1)
        request = asyncio.create_task(get(pool, server.origin))
        for _ in range(100):  # bounded: the request takes its slot
            if pool._in_use:
                break
            await asyncio.sleep(0.01)
        # A plain request in the pool is no https lease: the node's count of those is the whole count.
        assert pool._in_use == 1 and pool.full(TLS_OPEN) and not pool.full(TLS_OPEN - 1)
        gate.set()
        assert await request == b"ok"
        pool.close()


async def test_many_hosts_through_a_small_cap_all_complete() -> None:
    servers = [RawServer(ok(delay=0.01)) for _ in range(8)]
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server.running())
        pool = make_pool(limit=3, max_open=4)
        most_open = 0

        async def watched(origin: Origin) -> bytes:
            nonlocal most_open
            conn, _ = await pool.exchange(origin, encode_get("/", f"127.0.0.1:{origin[2]}", ()))
            most_open = max(most_open, pool.open_connections)
            try:
                return await conn.read()
            finally:
                pool.release(conn)

        bodies = await asyncio.gather(*(watched(s.origin) for _ in range(3) for s in servers))
        assert bodies == [b"ok"] * 24
        assert 0 < most_open <= 4 and pool.lru_closed > 0
        assert all(s.connections >= 1 for s in servers)
        pool.close()


async def test_a_closed_send_gate_writes_nothing_and_a_slot_waited_for_is_asked_after_the_wait() -> None:
    """Rule 7: the gate is asked after the waits (a slot, the connect), just before the write."""
    async with RawServer(ok(delay=0.2)).running() as server:
        pool = make_pool(limit=1)
        asked: list[int] = []

        def closed() -> bool:
            asked.append(len(server.heads))
            return False

        busy = asyncio.create_task(get(pool, server.origin))  # holds the only slot for 0.2 s
        await asyncio.sleep(0.05)
        with pytest.raises(RequestWithheld):
            await pool.exchange(server.origin, encode_get("/", "x", ()), closed)
        assert await busy == b"ok"
        assert asked == [1]  # asked once, after the first request took its slot and was sent
        assert len(server.heads) == 1  # the withheld request never reached the server
        assert await get(pool, server.origin) == b"ok"  # its slot was given back
        pool.close()


async def test_the_fetcher_raises_a_withheld_request_as_such_not_as_a_fetch_failure() -> None:
    async with RawServer(ok()).running() as server:
        async with Fetcher(FetchConfig(), DnsConfig(allow_private=True)) as fetcher:
            url = f"http://127.0.0.1:{server.port}/"
            with pytest.raises(RequestWithheld):
                await fetcher.fetch(url, gate=lambda: False)
            with pytest.raises(RequestWithheld):
                await fetcher.fetch_robots(url + "robots.txt", gate=lambda: False)
            assert (await fetcher.fetch(url, gate=lambda: True)).status == 200
        assert len(server.heads) == 1


async def test_a_refused_connect_raises_an_error_that_no_frame_of_its_traceback_holds() -> None:
    """Rule 4: the error of the last failed connect is raised, but the connecting frame keeps no
    reference to it: one would be a cycle (the error, its traceback, that frame) only the garbage
    collector frees, one per failed connect."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once it is closed: refused
    pool = make_pool()
    with pytest.raises(OSError) as raised:
        await pool.exchange(("http", "127.0.0.1", port), encode_get("/", f"127.0.0.1:{port}", ()))
    pool.close()
    error, holders = raised.value, []
    tb = error.__traceback__.tb_next if error.__traceback__ is not None else None  # past this test's frame
    while tb is not None:
        if any(value is error for value in tb.tb_frame.f_locals.values()):
            holders.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert holders == []
