"""What bounds the memory of a breadth crawl's connections: a host with nothing due within the keep-alive has
its idle connection closed at once (frontier/leasing.py rule 10, node/lease_runner.py rule 9, fetch/pool.py
rule 11), and TLS connections, ~40-60 KB each against ~3 KB for TCP, have a cap of their own (fetch/pool.py
rule 12), and glibc's mmap threshold stays where uvloop's TLS read buffers get their own mappings (rule
13)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat import Crawler
from polecat.config import DnsConfig, FetchConfig, config_from_mapping
from polecat.fetch import pool as pool_module
from polecat.fetch.dns import CachingResolver
from polecat.fetch.http import Fetcher
from polecat.fetch.pool import ConnectionPool
from polecat.frontier.leasing import WARM_FOR, keeps_connection
from polecat.frontier.politeness import HostState
from polecat.testing.fakes import Canned, FakeClock, FakeFetcher, MemoryPageStore
from tests.test_fetch_pool import RawServer, get, make_pool, ok
from tests.test_tls_resumption import TlsServer, ca, client_context, run, server_context

__all__ = ["ca"]  # a fixture, used by name


@given(queued=st.integers(0, 5), parked=st.booleans(), due_in=st.floats(-100.0, 100.0))
def test_rule_10_a_host_keeps_its_connection_only_with_a_url_due_within_the_keep_alive(
        queued: int, parked: bool, due_in: float) -> None:
    now = 1_000.0
    state = HostState(next_allowed=now + due_in, queued=queued, parked=parked)
    assert keeps_connection(state, now) == (queued > 0 and not parked and due_in <= WARM_FOR)


def test_rule_10_a_host_out_of_the_working_set_keeps_no_connection() -> None:
    assert not keeps_connection(None, 0.0)


async def test_rule_11_letting_an_origin_go_closes_its_idle_connections_only() -> None:
    servers = [RawServer(ok()) for _ in range(3)]
    async with servers[0].running(), servers[1].running(), servers[2].running():
        pool = make_pool(limit=3)
        for server in servers[:2]:
            assert await get(pool, server.origin) == b"ok"
        in_use, _ = await pool.exchange(servers[2].origin, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert pool.open_connections == 3
        pool.let_go(servers[0].origin)
        pool.let_go(servers[2].origin)  # in use: left as it is
        assert pool.open_connections == 2
        for _ in range(100):  # bounded: the server sees its client go
            if not servers[0].open:
                break
            await asyncio.sleep(0.01)
        assert not servers[0].open and servers[1].open == 1 and servers[2].open == 1
        while await in_use.read():
            pass
        pool.release(in_use)
        assert pool.open_connections == 2  # kept after its response: only idle ones are let go
        pool.close()


def leaves(host: str, n: int) -> Canned:
    anchors = "".join(f'<a href="http://{host}/leaf{i}">leaf</a>' for i in range(n))
    return Canned(200, f"<html><body><p>a root</p>{anchors}</body></html>".encode())


async def test_rule_9_each_host_is_let_go_once_after_its_last_request(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.0005)
    hosts = [f"h{i}.test" for i in range(6)]
    pages = {f"http://{host}/": leaves(host, 3) for host in hosts}
    pages.update({f"http://{host}/leaf{i}": Canned(200, b"<html><body><p>a leaf</p></body></html>")
                  for host in hosts for i in range(3)})
    fetcher = FakeFetcher(clock, pages)
    cfg = config_from_mapping({
        "data_dir": str(tmp_path), "scope": {"seeds": [f"http://{host}/" for host in hosts], "mode": "host"},
        "politeness": {"rate": 200.0}, "frontier": {"commit_ms": 20.0},
    })
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        await crawler.run()
    # Once each, at its last completion: after its robots.txt the root was queued, after the root its leaves.
    assert Counter(url.split("/")[2] for url in fetcher.let_go_urls) == dict.fromkeys(hosts, 1)
    assert all("/leaf" in url for url in fetcher.let_go_urls)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_rule_12_tls_connections_stay_under_their_cap_closing_the_idle_one_released_longest_ago(
        ca: Any, loop_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "TLS_OPEN", 3)
    client = client_context(ca)
    servers = [TlsServer(server_context(ca), keep_alive=True) for _ in range(5)]

    async def main() -> None:
        pool = ConnectionPool(CachingResolver(DnsConfig(allow_private=True)), limit=2, limit_per_host=0,
                              connect_timeout=5.0, tls=lambda: client)
        async with contextlib.AsyncExitStack() as stack:
            for server in servers:
                await stack.enter_async_context(await server.start())
            held, short = [], []
            for server in [*servers[:3], servers[0], *servers[3:]]:
                assert await get(pool, ("https", "127.0.0.1", server.port)) == b"ok"
                held.append(pool.tls_held)
                short.append(pool.short())
            assert held == [1, 2, 3, 3, 3, 3] and pool.open_connections == 3
            assert short == [False, True, True, True, True, True]  # from half of the cap (rule 9)
            # servers[0] was used again before the fourth origin came: servers[1]'s and [2]'s went first
            assert await get(pool, ("https", "127.0.0.1", servers[0].port)) == b"ok"
            assert [server.handshakes for server in servers] == [1, 1, 1, 1, 1]
            pool.close()
            await asyncio.sleep(0.05)  # the handlers see their clients go before the servers stop
    run(loop_kind, main)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def test_rule_13_tls_read_buffers_get_their_own_mappings_once_the_heap_has_no_room() -> None:
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc 2.33 or later only")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    Fetcher(FetchConfig(), DnsConfig())._tls()  # the first TLS context fixes the threshold
    libc.free(libc.malloc(4 << 20))  # a mapped chunk freed: a moving threshold would rise past 4 MiB
    before = libc.mallinfo2().hblks
    buffers = [libc.malloc(256 * 1024) for _ in range(256)]  # uvloop's TLS read buffers: 64 MiB
    mapped = libc.mallinfo2().hblks - before
    for buffer in buffers:
        libc.free(buffer)
    # What the heap had free serves the first; the rest are mapped, each returned whole when freed.
    assert mapped >= 128


@pytest.mark.timeout(60)
def test_rule_15_the_pool_is_full_counting_the_https_leases_not_in_it(
        ca: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 15: the node's https leases count as the TLS connections they may open, less those of them in
    the pool (their connections counted already); a plain-HTTP request in the pool is none of them."""
    monkeypatch.setattr(pool_module, "TLS_OPEN", 2)
    client = client_context(ca)
    server = TlsServer(server_context(ca), keep_alive=True)
    plain = RawServer(ok())
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"

    async def main() -> None:
        pool = ConnectionPool(CachingResolver(DnsConfig(allow_private=True)), limit=2, limit_per_host=0,
                              connect_timeout=5.0, tls=lambda: client)
        async with plain.running(), await server.start():
            assert pool.full(2) and not pool.full(1)  # two https leases starting may open two
            tls, _ = await pool.exchange(("https", "127.0.0.1", server.port), request)
            assert pool.tls_held == 1 and not pool.full(1)  # that lease is in the pool: counted once
            assert pool.full(2)  # one held, one more https lease starting
            conn, _ = await pool.exchange(plain.origin, request)
            assert pool.full(2)  # a plain request in the pool is no https lease
            for used in (tls, conn):
                while await used.read():
                    pass
                pool.release(used)
            pool.close()
            await asyncio.sleep(0.05)  # the handlers see their clients go before the servers stop
    run("asyncio", main)
