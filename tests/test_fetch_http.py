"""Fetcher against well-behaved loopback servers: names through the local DNS server, conditional GET,
keep-alive reuse, content decoding, TLS verification with a self-signed certificate."""

from __future__ import annotations

import gzip
import ssl
import subprocess
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import brotli
import pytest
import pytest_asyncio
import zstandard
from aiohttp import web

from polecat.config import DnsConfig, FetchConfig
from polecat.errors import BlockedAddressError, DnsError, TlsError
from polecat.fetch.http import Fetcher
from polecat.fetch.pool import ResumingContext
from polecat.testing.dns import LocalDnsServer
from polecat.testing.fakes import FakeClock

pytestmark = pytest.mark.asyncio(loop_scope="module")

PAGE = b"<html><body>" + b"polecat " * 2000 + b"</body></html>"
ETAG = '"v1"'
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"
RETRY_AT = "Wed, 21 Oct 2015 07:30:00 GMT"
RETRY_AT_UNIX = 1_445_412_600.0
ENCODERS = {
    "gzip": lambda b: gzip.compress(b),
    "deflate": zlib.compress,
    "deflate-raw": lambda b: zlib.compress(b, wbits=-15),
    "br": brotli.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
}


async def page(request: web.Request) -> web.Response:
    h = request.headers
    if h.get("If-None-Match") == ETAG or h.get("If-Modified-Since") == LAST_MODIFIED:
        return web.Response(status=304, headers={"ETag": ETAG})
    validators = {"ETag": ETAG, "Last-Modified": LAST_MODIFIED}
    return web.Response(body=PAGE, content_type="text/html", headers=validators)


async def busy(request: web.Request) -> web.Response:
    return web.Response(status=503, headers={"Retry-After": RETRY_AT})


async def encoded(request: web.Request) -> web.Response:
    name = request.match_info["enc"]
    header = "deflate" if name == "deflate-raw" else name
    headers = {"Content-Encoding": header, "Content-Type": "text/html"}
    return web.Response(body=ENCODERS[name](PAGE), headers=headers)


class Servers:
    def __init__(self) -> None:
        self.peers: set[tuple[str, int]] = set()
        self.port = 0
        self.tls_port = 0


def make_cert(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=tls.test",
         "-addext", "subjectAltName=DNS:tls.test,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"))


async def serve_plain_and_tls(app: web.Application,
                              cert: tuple[Path, Path]) -> tuple[web.AppRunner, int, int]:
    """``app`` served on 127.0.0.1 over plain HTTP and over TLS with ``cert``: its runner and both ports."""
    runner = web.AppRunner(app)
    await runner.setup()
    plain = web.TCPSite(runner, "127.0.0.1", 0)
    await plain.start()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    tls = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await tls.start()
    return (runner, plain._server.sockets[0].getsockname()[1],  # type: ignore[union-attr]
            tls._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def dns() -> Iterator[LocalDnsServer]:
    with LocalDnsServer() as server:
        server.add("www.test", ["127.0.0.1"])
        server.add("tls.test", ["127.0.0.1"])
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def servers(cert: tuple[Path, Path]) -> AsyncIterator[Servers]:
    state = Servers()

    @web.middleware
    async def track(request: web.Request, handler: web.RequestHandler) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            state.peers.add((peer[0], peer[1]))
        return await handler(request)

    app = web.Application(middlewares=[track])
    app.router.add_get("/page", page)
    app.router.add_get("/enc/{enc}", encoded)
    app.router.add_get("/busy", busy)
    runner, state.port, state.tls_port = await serve_plain_and_tls(app, cert)
    yield state
    await runner.cleanup()


def cfgs(dns: LocalDnsServer, **fetch: object) -> tuple[FetchConfig, DnsConfig]:
    fetch_cfg = FetchConfig(total_timeout=5.0, **fetch)  # type: ignore[arg-type]
    return fetch_cfg, DnsConfig(nameservers=(dns.address,), allow_private=True)


@pytest_asyncio.fixture(loop_scope="module")
async def fetcher(dns: LocalDnsServer) -> AsyncIterator[Fetcher]:
    async with Fetcher(*cfgs(dns)) as f:
        yield f


async def test_name_resolved_through_local_dns(servers: Servers, fetcher: Fetcher) -> None:
    r = await fetcher.fetch(f"http://www.test:{servers.port}/page")
    assert (r.status, r.body, r.remote_ip) == (200, PAGE, "127.0.0.1")
    assert r.header("etag") == ETAG


async def test_a_dated_retry_after_is_counted_from_the_fetchers_clock(servers: Servers,
                                                                     dns: LocalDnsServer) -> None:
    """An HTTP-date Retry-After becomes seconds from the injected clock's wall time (a date long past on
    the machine's clock), and the response is stamped with the clock's monotonic readings."""
    clock = FakeClock(wall=RETRY_AT_UNIX - 120.0, monotonic=50.0)
    async with Fetcher(*cfgs(dns), clock=clock) as f:
        resp = await f.fetch(f"http://www.test:{servers.port}/busy")
        assert (resp.status, resp.retry_after) == (503, 120.0)
        assert resp.started == resp.first_byte == resp.ended == 50.0
        clock.advance(90.0)
        assert (await f.fetch(f"http://www.test:{servers.port}/busy")).retry_after == 30.0
        clock.advance(60.0)
        assert (await f.fetch(f"http://www.test:{servers.port}/busy")).retry_after == 0.0  # past: now


async def test_unknown_name_is_dns_error(servers: Servers, fetcher: Fetcher) -> None:
    """The resolver's error comes out as it was raised, not as its own cause (a cycle only the garbage
    collector frees, one per failed lookup)."""
    with pytest.raises(DnsError) as raised:
        await fetcher.fetch(f"http://nowhere.test:{servers.port}/page")
    assert raised.value.__cause__ is None


async def test_keep_alive_reuses_connection(servers: Servers, fetcher: Fetcher) -> None:
    servers.peers.clear()
    for _ in range(5):
        assert (await fetcher.fetch(f"http://www.test:{servers.port}/page")).status == 200
    assert len(servers.peers) == 1
    assert fetcher.resolver.stats().misses == 1  # one resolution: the pooled connection is reused


@pytest.mark.parametrize(("etag", "last_modified"), [(ETAG, None), (None, LAST_MODIFIED), ('"old"', None)])
async def test_conditional_get(
    servers: Servers, fetcher: Fetcher, etag: str | None, last_modified: str | None
) -> None:
    r = await fetcher.fetch(f"http://www.test:{servers.port}/page", etag=etag, last_modified=last_modified)
    if etag == '"old"':
        assert (r.status, r.body) == (200, PAGE)
    else:
        assert (r.status, r.body) == (304, b"")


@pytest.mark.parametrize("enc", sorted(ENCODERS))
async def test_content_decoded(servers: Servers, fetcher: Fetcher, enc: str) -> None:
    r = await fetcher.fetch(f"http://www.test:{servers.port}/enc/{enc}")
    assert r.body == PAGE and not r.truncated
    assert r.wire_bytes < len(PAGE) // 4


async def test_ssrf_guard_without_allow_private(servers: Servers, dns: LocalDnsServer) -> None:
    async with Fetcher(FetchConfig(), DnsConfig(nameservers=(dns.address,))) as f:
        with pytest.raises(BlockedAddressError):
            await f.fetch(f"http://www.test:{servers.port}/page")
        with pytest.raises(BlockedAddressError):
            await f.fetch(f"http://127.0.0.1:{servers.port}/page")
        with pytest.raises(BlockedAddressError):
            await f.fetch(f"http://[::1]:{servers.port}/page")


async def test_tls_self_signed_refused_by_default(servers: Servers, dns: LocalDnsServer) -> None:
    async with Fetcher(*cfgs(dns)) as f:
        with pytest.raises(TlsError):
            await f.fetch(f"https://tls.test:{servers.tls_port}/page")


async def test_tls_with_ca_bundle(servers: Servers, dns: LocalDnsServer, cert: tuple[Path, Path]) -> None:
    async with Fetcher(*cfgs(dns, ca_bundle=cert[0])) as f:
        r = await f.fetch(f"https://tls.test:{servers.tls_port}/page")
        assert (r.status, r.body) == (200, PAGE)
        with pytest.raises(TlsError):  # right CA, wrong name
            await f.fetch(f"https://www.test:{servers.tls_port}/page")


async def test_the_tls_context_is_made_once_at_the_first_https_request(
        servers: Servers, dns: LocalDnsServer, cert: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the CA store costs ~20 ms of CPU: a crawl of http URLs never pays it, an https one once."""
    made: list[str | None] = []
    load = ResumingContext.load_verify_locations

    def counted(self: ResumingContext, cafile: str | None = None) -> None:
        made.append(cafile)
        load(self, cafile=cafile)

    monkeypatch.setattr(ResumingContext, "load_verify_locations", counted)
    async with Fetcher(*cfgs(dns, ca_bundle=cert[0])) as f:
        assert (await f.fetch(f"http://www.test:{servers.port}/page")).status == 200
        assert made == []
        for _ in range(2):
            assert (await f.fetch(f"https://tls.test:{servers.tls_port}/page")).body == PAGE
        assert made == [str(cert[0])]


async def test_tls_verification_off(servers: Servers, dns: LocalDnsServer) -> None:
    async with Fetcher(*cfgs(dns, verify_tls=False)) as f:
        assert (await f.fetch(f"https://www.test:{servers.tls_port}/page")).status == 200
