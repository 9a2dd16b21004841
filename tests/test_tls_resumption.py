"""TLS session resumption in the pool (polecat/fetch/pool.py rule 10) against a local HTTPS server whose
certificate a local CA (trustme) issued, under asyncio's loop and uvloop's: the server counts the
handshakes and those that resumed a session."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Coroutine
from typing import Any, cast

import pytest

from polecat.config import DnsConfig
from polecat.fetch import pool as pool_module
from polecat.fetch.dns import CachingResolver
from polecat.fetch.pool import ConnectionPool, ResumingContext, TlsStats
from polecat.testing.fakes import FakeClock
from tests.test_fetch_pool import get

trustme = pytest.importorskip("trustme")

pytestmark = pytest.mark.timeout(30)


def run(loop_kind: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        asyncio.run(main())


class TlsServer:
    """Answers each request with ``body`` (``ok``), closing the connection after it unless ``keep_alive``."""

    def __init__(self, context: ssl.SSLContext, *, keep_alive: bool = False, body: bytes = b"ok") -> None:
        self.context = context
        self.keep_alive = keep_alive
        self.body = body
        self.handshakes = 0
        self.resumed = 0
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        self.resumed += writer.get_extra_info("ssl_object").session_reused
        connection = b"" if self.keep_alive else b"Connection: close\r\n"
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s"
                             % (len(self.body), connection, self.body))
                await writer.drain()
                if not self.keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    async def start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        self.port = server.sockets[0].getsockname()[1]
        return server


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


def server_context(ca: Any, *, tickets: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    if not tickets:
        context.num_tickets = 0  # TLS 1.3 with no ticket: nothing the client could resume
    return context


def client_context(ca: Any) -> ResumingContext:
    context = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(context)
    return context


def make_pool(context: ssl.SSLContext) -> ConnectionPool:
    return ConnectionPool(CachingResolver(DnsConfig(allow_private=True)), limit=0, limit_per_host=0,
                          connect_timeout=5.0, tls=lambda: context)


def counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hosts whose session :meth:`ResumingContext.keep` was asked to read, in order."""
    kept: list[str] = []
    keep = ResumingContext.keep

    def counted(self: ResumingContext, host: str, tls: ssl.SSLObject) -> None:
        kept.append(host)
        keep(self, host, tls)

    monkeypatch.setattr(ResumingContext, "keep", counted)
    return kept


def crawl(loop_kind: str, server: TlsServer, client: ssl.SSLContext, requests: int) -> None:
    async def main() -> None:
        pool = make_pool(client)
        async with await server.start():
            for _ in range(requests):
                assert await get(pool, ("https", "127.0.0.1", server.port)) == server.body
            pool.close()
            await asyncio.sleep(0.05)  # the handlers see their clients go before the server stops
    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_rule_10_a_host_whose_connections_close_resumes_its_session(
        ca: Any, loop_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each response closes its connection: the first handshake is full and its session is read once;
    each connection after it offers that session and the server resumes it."""
    reads = counting_reads(monkeypatch)
    server = TlsServer(server_context(ca))
    client = client_context(ca)
    crawl(loop_kind, server, client, 4)
    assert (server.handshakes, server.resumed) == (4, 3)
    assert client.stats() == TlsStats(handshakes=4, resumed=3, sessions=1)
    assert client.stats().hit_ratio == 0.75
    assert reads == ["127.0.0.1"]


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_rule_10_a_server_that_gives_no_ticket_gets_full_handshakes_each_read_once(
        ca: Any, loop_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = counting_reads(monkeypatch)
    server = TlsServer(server_context(ca, tickets=False))
    client = client_context(ca)
    crawl(loop_kind, server, client, 3)
    assert (server.handshakes, server.resumed) == (3, 0)
    assert (client.stats().handshakes, client.stats().resumed) == (3, 0)
    assert reads == ["127.0.0.1"] * 3


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_rule_10_a_kept_alive_connection_is_read_once_when_it_closes_idle_and_never_when_let_go(
        ca: Any, loop_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = counting_reads(monkeypatch)
    server = TlsServer(server_context(ca), keep_alive=True)
    client = client_context(ca)
    clock = FakeClock()

    async def main() -> None:
        pool = ConnectionPool(CachingResolver(DnsConfig(allow_private=True)), limit=0, limit_per_host=0,
                              connect_timeout=5.0, tls=lambda: client, clock=clock)
        async with await server.start():
            origin = ("https", "127.0.0.1", server.port)
            for _ in range(3):
                assert await get(pool, origin) == b"ok"
            assert (server.handshakes, reads) == (1, [])  # kept alive: nothing read yet
            clock.advance(pool_module.KEEPALIVE + 1)
            assert await get(pool, origin) == b"ok"  # the expired one is closed, its session read first
            assert (server.handshakes, server.resumed, reads) == (2, 1, ["127.0.0.1"])
            pool.let_go(origin)  # the host needs no more: a resumed one has nothing to read anyway
            assert await get(pool, origin) == b"ok"
            assert (server.handshakes, server.resumed, reads) == (3, 2, ["127.0.0.1"])
            pool.close()
            await asyncio.sleep(0.05)
    run(loop_kind, main)


def test_rule_10_a_connection_let_go_has_its_session_left_unread(
        ca: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = counting_reads(monkeypatch)
    server = TlsServer(server_context(ca), keep_alive=True)
    client = client_context(ca)

    async def main() -> None:
        pool = make_pool(client)
        async with await server.start():
            origin = ("https", "127.0.0.1", server.port)
            assert await get(pool, origin) == b"ok"
            pool.let_go(origin)
            assert await get(pool, origin) == b"ok"
            pool.close()
            await asyncio.sleep(0.05)
    run("uvloop", main)
    assert (server.handshakes, server.resumed, reads) == (2, 0, [])
    assert client.stats() == TlsStats(handshakes=2, resumed=0, sessions=0)


def test_rule_10_a_plain_context_is_connected_through_without_resumption(ca: Any) -> None:
    server = TlsServer(server_context(ca))
    client = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    crawl("asyncio", server, client, 2)
    assert (server.handshakes, server.resumed) == (2, 0)


class FakeTls:
    """What the pool reads of a connection's ``SSLObject``: each read of ``session`` is counted."""

    session_reused = False

    def __init__(self, session: object) -> None:
        self._session = session
        self.reads = 0

    @property
    def session(self) -> object:
        self.reads += 1
        return self._session


def keep(context: ResumingContext, host: str) -> FakeTls:
    tls = FakeTls(f"session of {host}")
    context.keep(host, cast(ssl.SSLObject, tls))
    return tls


def test_rule_10_sessions_are_kept_for_the_hosts_offered_most_recently(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "SESSION_READ_LEAKS", False)
    monkeypatch.setattr(pool_module, "TLS_SESSIONS", 2)
    context = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
    keep(context, "a.test")
    keep(context, "b.test")
    assert context.offer("a.test") == "session of a.test"
    keep(context, "c.test")
    assert (context.offer("b.test"), context.offer("a.test"), context.offer("c.test")) == (
        None, "session of a.test", "session of c.test")
    assert context.stats().sessions == 2


@pytest.mark.parametrize("leaks", [True, False])
def test_rule_10_where_session_reads_leak_they_are_bounded(
        leaks: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "SESSION_READ_LEAKS", leaks)
    monkeypatch.setattr(pool_module, "TLS_SESSIONS", 2)
    context = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
    reads = [keep(context, host).reads for host in ("a.test", "b.test", "c.test")]
    full_handshake = cast(ssl.SSLObject, FakeTls("d"))
    if leaks:
        assert reads == [1, 1, 0]
        assert context.connected(full_handshake) is False
        assert context.offer("a.test") == "session of a.test"
    else:
        assert reads == [1, 1, 1]
        assert context.connected(full_handshake) is True
        assert context.offer("a.test") is None
    assert context.stats() == TlsStats(handshakes=1, resumed=0, sessions=2)


def counting_tls_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """The sizes the client's OpenSSL reads were asked for (what reaches :meth:`ssl.SSLObject.read`),
    and the lengths of those that returned data; the server's reads are left out."""
    asked: list[int] = []
    returned: list[int] = []
    read = ssl.SSLObject.read

    def counted(self: ssl.SSLObject, size: int = 1024, buffer: Any = None) -> bytes:
        if self.server_side:
            return read(self, size, buffer)
        asked.append(size)
        data = read(self, size, buffer)
        if data:
            returned.append(len(data) if buffer is None else cast(int, data))
        return data

    monkeypatch.setattr(ssl.SSLObject, "read", counted)
    return asked, returned


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_rule_14_tls_reads_ask_for_a_record_at_most_and_take_as_many_reads(
        ca: Any, loop_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loops' TLS layers ask for 256 KiB at every read; OpenSSL is asked for :data:`TLS_READ` at
    most, and a 100,000-byte body takes as many reads that return data as with the loops' size: one
    read returns one record's data at most."""
    asked, returned = counting_tls_reads(monkeypatch)
    body = b"x" * 100_000
    crawl(loop_kind, TlsServer(server_context(ca), body=body), client_context(ca), 2)
    assert asked and max(asked) <= pool_module.TLS_READ
    capped = list(returned)
    assert max(capped) == pool_module.TLS_READ  # full records: the cap is what one holds

    monkeypatch.setattr(ResumingContext, "sslobject_class", ssl.SSLObject)  # the loops' size, uncapped
    asked.clear()
    returned.clear()
    crawl(loop_kind, TlsServer(server_context(ca), body=body), client_context(ca), 2)
    assert max(asked) > pool_module.TLS_READ
    assert returned == capped
