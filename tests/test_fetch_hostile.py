"""Fetcher against a hostile loopback server: every case ends in its documented outcome, quickly.

No assertion here reads an upper bound off a clock (a loaded machine breaks those): a deadline is judged by
the rule its error names and by a lower bound (a timer never fires early), the work done by counts (body
and wire bytes), and "never hangs" by the test's timeout."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import socket
import tracemalloc
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from polecat.config import DnsConfig, FetchConfig
from polecat.errors import (
    BlockedAddressError,
    ConnectError,
    FetchError,
    FetchTimeout,
    ProtocolError,
    UnsupportedUrl,
)
from polecat.fetch.http import Fetcher
from polecat.testing.fakes import FakeClock
from polecat.testing.hostile import (
    HostileServer,
    brotli_bomb,
    drip,
    gzip_bomb,
    raw,
    reset_mid_body,
    respond,
    silent,
    zstd_bomb,
)

CAP = 1024 * 1024
CFG = FetchConfig(
    connect_timeout=1.0, first_byte_timeout=0.5, read_gap_timeout=0.5, total_timeout=2.0, max_body_bytes=CAP,
)
DNS = DnsConfig(allow_private=True)


RETRY_AT = 1_445_412_600.0
"""The date the HTTP-date Retry-After names; the fetcher that reads it has a clock two minutes before."""


ROUTES = {
    "/ok": respond(200, b"<html>hi</html>", [("Content-Type", "text/html; charset=UTF-8")]),
    "/empty": respond(200, b"", [("Content-Type", "text/html")]),
    "/big": respond(200, b"a" * (3 * CAP), [("Content-Type", "text/plain")]),
    "/gzip-bomb": gzip_bomb(10 * 2**30),
    "/zstd-bomb": zstd_bomb(10 * 2**30),
    "/br-bomb": brotli_bomb(256 * 2**20),
    "/silent": silent(),
    "/drip-gap": drip(b"abcdef", interval=1.0),  # gap longer than read_gap_timeout
    "/drip-total": drip(b"x" * 100, interval=0.1),  # every gap short, total far beyond total_timeout
    "/reset": reset_mid_body(),
    "/bad-status": raw(b"HTTP/1.1 abc Nope\r\n\r\n"),
    "/garbage": raw(b"\x16\x03\x01 this is not http at all\r\n\r\n"),
    "/huge-header": raw(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"),
    "/many-headers": raw(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 20_000 + b"\r\n"),
    "/close-early": raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"),
    # 3 MB on the wire for 0.5 MB of body: parsing costs per chunk, so the wire is what must be bounded.
    "/tiny-chunks": raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\na\r\n" * 500_000
                        + b"0\r\n\r\n"),
    "/bad-gzip": respond(200, b"not gzip at all", [("Content-Encoding", "gzip")]),
    "/unknown-encoding": respond(200, b"x", [("Content-Encoding", "compress")]),
    "/429-seconds": respond(429, b"", [("Retry-After", "120")]),
    "/429-date": respond(429, b"", [("Retry-After", email.utils.formatdate(RETRY_AT, usegmt=True))]),
    "/503-junk": respond(503, b"", [("Retry-After", "soon")]),
    "/loop-a": respond(302, b"", [("Location", "/loop-b")]),
    "/loop-b": respond(302, b"", [("Location", "/loop-a")]),
    **{f"/chain{i}": respond(301, b"", [("Location", f"/chain{i + 1}")]) for i in range(9)},
    "/chain9": respond(200, b"end of chain"),
    "/to-metadata": respond(302, b"", [("Location", "http://169.254.169.254/latest/meta-data/")]),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[HostileServer]:
    async with HostileServer(ROUTES) as srv:
        yield srv


@pytest_asyncio.fixture(loop_scope="module")
async def fetcher() -> AsyncIterator[Fetcher]:
    async with Fetcher(CFG, DNS) as f:
        yield f


pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio(loop_scope="module")]


async def test_plain_response(server: HostileServer, fetcher: Fetcher) -> None:
    r = await fetcher.fetch(server.url("/ok"))
    assert (r.status, r.body, r.truncated) == (200, b"<html>hi</html>", False)
    assert (r.content_type, r.charset, r.remote_ip) == ("text/html", "UTF-8", "127.0.0.1")
    assert r.started <= r.first_byte <= r.ended and r.wire_bytes == len(r.body)
    req = server.requests[-1]
    assert req.headers["user-agent"] == CFG.user_agent
    assert req.headers["accept-encoding"] == "gzip, deflate, br, zstd"


async def test_empty_body(server: HostileServer, fetcher: Fetcher) -> None:
    r = await fetcher.fetch(server.url("/empty"))
    assert (r.status, r.body, r.truncated) == (200, b"", False)


async def test_body_over_cap_truncated_and_marked(server: HostileServer, fetcher: Fetcher) -> None:
    r = await fetcher.fetch(server.url("/big"))
    assert r.truncated and len(r.body) == CAP and r.body == b"a" * CAP
    assert r.wire_bytes < 2 * CAP


@pytest.mark.parametrize("path", ["/gzip-bomb", "/zstd-bomb", "/br-bomb"])
async def test_decompression_bombs_stop_at_cap(server: HostileServer, fetcher: Fetcher, path: str) -> None:
    r = await fetcher.fetch(server.url(path))
    assert r.truncated and len(r.body) == CAP and r.body.count(0) == CAP
    assert r.wire_bytes < CAP  # stopped reading long before the ~10 MB wire size of the gzip bomb


async def test_a_body_in_one_byte_chunks_is_cut_by_its_wire_size(server: HostileServer) -> None:
    # The cut is by the wire bytes, not by time: the server shares this test's loop, so on a loaded
    # machine its writes of 500,000 chunks can leave a gap past CFG's 0.5 s read gap (seen in CI).
    unhurried = dataclasses.replace(CFG, first_byte_timeout=10.0, read_gap_timeout=10.0, total_timeout=20.0)
    async with Fetcher(unhurried, DNS) as fetcher:
        r = await fetcher.fetch(server.url("/tiny-chunks"))
    assert r.truncated and r.body == b"a" * len(r.body) and len(r.body) < CAP // 4
    # One payload byte a chunk: ~200,000 chunks parsed (the wire cap over 6 bytes a chunk), not the
    # 500,000 sent.
    assert r.wire_bytes <= (CAP * 1.125 + 2 * 65536) / 6


async def test_bomb_memory_stays_bounded(server: HostileServer, fetcher: Fetcher) -> None:
    """Peak Python allocation while a 10 GB gzip bomb is fetched stays within a few caps."""
    tracemalloc.start()
    try:
        r = await fetcher.fetch(server.url("/gzip-bomb"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.truncated
    assert peak < 4 * CAP


def _took(t: float) -> float:
    return asyncio.get_running_loop().time() - t


async def test_silent_server_cut_by_first_byte_deadline(server: HostileServer, fetcher: Fetcher) -> None:
    t = asyncio.get_running_loop().time()
    # The connect + first byte budget (1.5 s) cut it, not the total deadline (2 s).
    with pytest.raises(FetchTimeout, match=r"connect: timed out \(first byte\)"):
        await fetcher.fetch(server.url("/silent"))
    assert _took(t) >= CFG.connect_timeout + CFG.first_byte_timeout - 0.01


async def test_drip_cut_by_read_gap(server: HostileServer, fetcher: Fetcher) -> None:
    t = asyncio.get_running_loop().time()
    with pytest.raises(FetchTimeout, match=r"body: timed out \(read gap\)"):
        await fetcher.fetch(server.url("/drip-gap"))
    assert _took(t) >= CFG.read_gap_timeout - 0.01


async def test_fast_drip_cut_by_total_deadline(server: HostileServer, fetcher: Fetcher) -> None:
    """Every gap is short; the body would take 10 s: the total deadline (2 s) cuts it."""
    t = asyncio.get_running_loop().time()
    with pytest.raises(FetchTimeout, match=r"body: timed out \(total deadline\)"):
        await fetcher.fetch(server.url("/drip-total"))
    assert _took(t) >= CFG.total_timeout - 0.01


@pytest.mark.parametrize("path", ["/reset", "/close-early"])
async def test_connection_lost_mid_body(server: HostileServer, fetcher: Fetcher, path: str) -> None:
    with pytest.raises(ConnectError) as info:
        await fetcher.fetch(server.url(path))
    assert info.value.retryable


@pytest.mark.parametrize("path", ["/bad-status", "/garbage", "/huge-header", "/many-headers"])
async def test_broken_http(server: HostileServer, fetcher: Fetcher, path: str) -> None:
    with pytest.raises(ProtocolError):
        await fetcher.fetch(server.url(path))


@pytest.mark.parametrize("path", ["/bad-gzip", "/unknown-encoding"])
async def test_bad_encodings(server: HostileServer, fetcher: Fetcher, path: str) -> None:
    with pytest.raises(ProtocolError, match=r"content-encoding|gzip"):
        await fetcher.fetch(server.url(path))


async def test_retry_after_both_forms(server: HostileServer) -> None:
    async with Fetcher(CFG, DNS, clock=FakeClock(wall=RETRY_AT - 120.0)) as fetcher:
        r = await fetcher.fetch(server.url("/429-seconds"))
        assert (r.status, r.retry_after) == (429, 120.0)
        r = await fetcher.fetch(server.url("/429-date"))
        assert (r.status, r.retry_after) == (429, 120.0)
        r = await fetcher.fetch(server.url("/503-junk"))
        assert (r.status, r.retry_after) == (503, None)


async def test_429_storm_never_breaks_the_client(server: HostileServer, fetcher: Fetcher) -> None:
    results = await asyncio.gather(*(fetcher.fetch(server.url("/429-seconds")) for _ in range(200)))
    assert {(r.status, r.retry_after) for r in results} == {(429, 120.0)}


async def test_redirects_returned_not_followed(server: HostileServer, fetcher: Fetcher) -> None:
    before = len(server.requests)
    r = await fetcher.fetch(server.url("/loop-a"))
    assert (r.status, r.location) == (302, "/loop-b")
    assert len(server.requests) == before + 1


async def test_robots_follows_five_redirects_then_gives_up(server: HostileServer, fetcher: Fetcher) -> None:
    r = await fetcher.fetch_robots(server.url("/chain4"))
    assert (r.status, r.body, r.url) == (200, b"end of chain", server.url("/chain9"))
    r = await fetcher.fetch_robots(server.url("/chain0"))
    assert (r.status, r.url) == (301, server.url("/chain5"))  # 5 hops followed, the 6th is not


async def test_robots_redirect_loop_ends(server: HostileServer, fetcher: Fetcher) -> None:
    before = len(server.requests)
    r = await fetcher.fetch_robots(server.url("/loop-a"))
    assert r.status == 302
    assert len(server.requests) - before == 2


async def test_robots_redirect_to_metadata_refused(server: HostileServer, fetcher: Fetcher) -> None:
    with pytest.raises(BlockedAddressError):
        await fetcher.fetch_robots(server.url("/to-metadata"))


async def test_unsupported_urls(fetcher: Fetcher) -> None:
    for url in ("ftp://a.test/x", "file:///etc/passwd", "/relative", "mailto:x@y.z"):
        with pytest.raises(UnsupportedUrl):
            await fetcher.fetch(url)


async def test_nothing_listening_is_connect_error(fetcher: Fetcher) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        with pytest.raises(ConnectError):
            await fetcher.fetch(f"http://127.0.0.1:{port}/")


async def test_client_survives_all_cases_concurrently(server: HostileServer, fetcher: Fetcher) -> None:
    """The whole zoo at once: every fetch ends (the test's timeout bounds it) in a response or a
    FetchError, and those that would never end are cut by their deadlines."""
    paths = [p for p in ROUTES if not p.startswith("/chain")]
    results = await asyncio.gather(*(fetcher.fetch(server.url(p)) for p in paths), return_exceptions=True)
    assert all(not isinstance(r, BaseException) or isinstance(r, FetchError) for r in results), results
    outcome = dict(zip(paths, results, strict=True))
    assert all(isinstance(outcome[p], FetchTimeout) for p in ("/silent", "/drip-gap", "/drip-total"))
