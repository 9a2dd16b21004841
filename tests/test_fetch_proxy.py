"""Crawling through an HTTP proxy (polecat/fetch/proxy.py): a loopback proxy written here relays plain
GETs and CONNECT tunnels and counts both; the SSRF guard still judges the target, and the proxy's own
address is checked."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from polecat.config import DnsConfig, FetchConfig, config_from_mapping
from polecat.config.proxy import ProxyAddress, parse_proxy
from polecat.errors import BlockedAddressError, ConfigError, ConnectError, FetchTimeout
from polecat.fetch.http import Fetcher
from polecat.fetch.proxy import ProxyRoutes, check_proxy_peer, routes_from
from polecat.testing.dns import LocalDnsServer
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.test_cli import polecat
from tests.test_fetch_http import make_cert, serve_plain_and_tls

aio = pytest.mark.asyncio(loop_scope="module")

PAGE = b"<html><body>through the proxy</body></html>"
PROXY_HOST = "127.0.0.3"  # not the target's 127.0.0.1: a response's remote address tells them apart


@dataclass
class Proxy:
    """What the loopback proxy saw."""

    port: int = 0
    requests: list[str] = field(default_factory=list)
    """Request lines of plain (absolute-form) requests."""
    connects: list[str] = field(default_factory=list)
    """Authorities named by CONNECT."""
    authorizations: list[str | None] = field(default_factory=list)
    refuse_connect: bool = False

    @property
    def url(self) -> str:
        return f"http://{PROXY_HOST}:{self.port}"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.close()


async def _serve(state: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One client connection: one plain request relayed (then closed), or a CONNECT tunnel. It relays to
    loopback only: the targets of these tests are all there."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
        writer.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ")
    auth = next((ln.split(":", 1)[1].strip() for ln in lines[1:]
                 if ln.lower().startswith("proxy-authorization:")), None)
    state.authorizations.append(auth)
    if method == "CONNECT":
        state.connects.append(target)
        if state.refuse_connect:
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        host, _, port = target.rpartition(":")
        assert host.startswith("127."), host
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        return
    state.requests.append(lines[0])
    assert target.startswith("http://"), target
    authority, _, path = target[len("http://"):].partition("/")
    port = int(authority.rpartition(":")[2]) if ":" in authority else 80
    dropped = ("proxy-authorization:", "connection:")
    kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith(dropped)]
    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
    up_writer.write("\r\n".join([f"{method} /{path} {version}", *kept, "Connection: close", "", ""]).encode())
    await _pipe(up_reader, writer)
    up_writer.close()


@pytest.fixture(scope="module")
def dns() -> Iterator[LocalDnsServer]:
    with LocalDnsServer() as server:
        server.add("www.test", ["127.0.0.1"])
        server.add("tls.test", ["127.0.0.1"])
        server.add("direct.test", ["127.0.0.1"])
        yield server


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"))


@dataclass
class Origin:
    port: int
    tls_port: int
    seen: list[str]
    """Paths the origin server was asked for."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def origin(cert: tuple[Path, Path]) -> AsyncIterator[Origin]:
    seen: list[str] = []

    async def page(request: web.Request) -> web.Response:
        seen.append(request.path)
        assert "Proxy-Authorization" not in request.headers  # never sent on to a target (rule 3)
        return web.Response(body=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{name}", page)
    runner, port, tls_port = await serve_plain_and_tls(app, cert)
    yield Origin(port, tls_port, seen)
    await runner.cleanup()


@pytest_asyncio.fixture(loop_scope="module")
async def proxy() -> AsyncIterator[Proxy]:
    state = Proxy()
    server = await asyncio.start_server(lambda r, w: _serve(state, r, w), PROXY_HOST, 0)
    state.port = server.sockets[0].getsockname()[1]
    yield state
    server.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 5)


def _fetcher(dns: LocalDnsServer, *, allow_private: bool = True, environ: dict[str, str] | None = None,
             **fetch: object) -> Fetcher:
    cfg = FetchConfig(total_timeout=10.0, **fetch)  # type: ignore[arg-type]
    return Fetcher(cfg, DnsConfig(nameservers=(dns.address,), allow_private=allow_private),
                   environ=environ or {})


@aio
async def test_http_through_the_proxy_in_absolute_form(
        dns: LocalDnsServer, origin: Origin, proxy: Proxy) -> None:
    async with _fetcher(dns, proxy=f"http://bot:s%40cret@{PROXY_HOST}:{proxy.port}") as f:
        r = await f.fetch(f"http://www.test:{origin.port}/a")
    assert (r.status, r.body) == (200, PAGE)
    assert proxy.requests == [f"GET http://www.test:{origin.port}/a HTTP/1.1"]
    assert proxy.connects == []
    assert proxy.authorizations == ["Basic Ym90OnNAY3JldA=="]  # bot:s@cret
    assert r.remote_ip == "127.0.0.1"  # the target's checked address, not the proxy's (rule 6)


@aio
async def test_https_through_a_connect_tunnel_to_the_checked_address(
        dns: LocalDnsServer, origin: Origin, proxy: Proxy, cert: tuple[Path, Path]) -> None:
    async with _fetcher(dns, proxy=proxy.url, ca_bundle=cert[0]) as f:
        for name in ("b", "c"):
            r = await f.fetch(f"https://tls.test:{origin.tls_port}/{name}")
            assert (r.status, r.body, r.remote_ip) == (200, PAGE, "127.0.0.1")
    # One tunnel, kept alive for the second request; it names the address the node checked (rule 4).
    assert proxy.connects == [f"127.0.0.1:{origin.tls_port}"]
    assert proxy.requests == []
    assert origin.seen[-2:] == ["/b", "/c"]


@aio
async def test_the_guard_judges_the_target_and_nothing_reaches_the_proxy(
        dns: LocalDnsServer, origin: Origin, proxy: Proxy) -> None:
    async with _fetcher(dns, allow_private=False, proxy=proxy.url) as f:
        for url in (f"http://www.test:{origin.port}/x", f"https://tls.test:{origin.tls_port}/x",
                    f"http://127.0.0.1:{origin.port}/x", f"https://[::1]:{origin.tls_port}/x"):
            with pytest.raises(BlockedAddressError):
                await f.fetch(url)
    assert proxy.requests == proxy.connects == []


@aio
async def test_a_refused_connect_names_the_proxy_and_its_answer(
        dns: LocalDnsServer, origin: Origin, proxy: Proxy) -> None:
    proxy.refuse_connect = True
    async with _fetcher(dns, proxy=proxy.url) as f:
        with pytest.raises(ConnectError, match=r"proxy http://127\.0\.0\.3:\d+: CONNECT .* 403 Forbidden"):
            await f.fetch(f"https://tls.test:{origin.tls_port}/x")


@aio
async def test_a_proxy_that_never_answers_connect_is_cut_at_the_connect_timeout(
        dns: LocalDnsServer, origin: Origin) -> None:
    accepted = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()  # until the client gives up and closes
        writer.close()

    server = await asyncio.start_server(silent, PROXY_HOST, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with _fetcher(dns, proxy=f"http://{PROXY_HOST}:{port}", connect_timeout=0.5) as f:
            silent_proxy = rf"^proxy http://{PROXY_HOST}:{port}: CONNECT .*: no answer"
            with pytest.raises(FetchTimeout, match=silent_proxy):
                await asyncio.wait_for(f.fetch(f"https://tls.test:{origin.tls_port}/x"), 30)
        assert accepted.is_set()
    finally:
        server.close()


def _closed_port(host: str) -> int:
    """A port on ``host`` that nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@aio
async def test_a_proxy_that_is_not_there_is_named_not_the_target(dns: LocalDnsServer, origin: Origin) -> None:
    port = _closed_port(PROXY_HOST)
    seen = len(origin.seen)
    async with _fetcher(dns, proxy=f"http://{PROXY_HOST}:{port}") as f:
        for url in (f"http://www.test:{origin.port}/x", f"https://tls.test:{origin.tls_port}/x"):
            with pytest.raises(ConnectError) as caught:
                await f.fetch(url)
            message = str(caught.value)
            assert message.startswith(f"proxy http://{PROXY_HOST}:{port}: cannot connect: "), message
            assert "www.test" not in message and "tls.test" not in message
    assert len(origin.seen) == seen


@aio
async def test_environment_read_only_when_asked_and_no_proxy_goes_direct(
        dns: LocalDnsServer, origin: Origin, proxy: Proxy) -> None:
    env = {"HTTP_PROXY": proxy.url, "https_proxy": proxy.url, "NO_PROXY": "example.org, .direct.test"}
    async with _fetcher(dns, environ=env) as f:  # proxy_env off: the variables change nothing
        assert (await f.fetch(f"http://www.test:{origin.port}/d")).status == 200
    assert proxy.requests == []
    async with _fetcher(dns, environ=env, proxy_env=True) as f:
        assert (await f.fetch(f"http://www.test:{origin.port}/e")).status == 200
        assert (await f.fetch(f"http://direct.test:{origin.port}/f")).status == 200  # NO_PROXY
    assert proxy.requests == [f"GET http://www.test:{origin.port}/e HTTP/1.1"]
    assert origin.seen[-2:] == ["/e", "/f"]


def test_no_proxy_entries() -> None:
    proxy = ProxyAddress("proxy.corp", 3128)
    routes = ProxyRoutes(proxy, None, ("corp.example", "10.0.0.0/8", "[::1]", "intra:8080", "127.0.0.1"))
    assert routes.proxy_for("http", "corp.example", 80) is None
    assert routes.proxy_for("http", "a.b.CORP.example", 80) is None
    assert routes.proxy_for("http", "notcorp.example", 80) is proxy
    assert routes.proxy_for("http", "10.1.2.3", 80) is None
    assert routes.proxy_for("http", "::1", 80) is None
    assert routes.proxy_for("http", "intra", 8080) is None
    assert routes.proxy_for("http", "intra", 80) is proxy
    assert routes.proxy_for("http", "127.0.0.1", 80) is None
    assert routes.proxy_for("https", "example.org", 443) is None  # no https proxy given
    assert ProxyRoutes(proxy, proxy, ("*",)).proxy_for("https", "example.org", 443) is None


def test_routes_from_config_and_environment() -> None:
    assert routes_from(FetchConfig(), {"HTTP_PROXY": "http://p:1"}) is None  # not asked
    env = {"HTTP_PROXY": "http://upper:1", "http_proxy": "lower:2"}
    routes = routes_from(FetchConfig(proxy_env=True), env)
    assert routes is not None
    assert routes.proxy_for("http", "example.org", 80) == ProxyAddress("lower", 2)  # lower case first
    assert routes.proxy_for("https", "example.org", 443) is None
    given = routes_from(FetchConfig(proxy="http://given:3", proxy_env=True),
                        {"https_proxy": "http://env:4", "no_proxy": "example.org"})
    assert given is not None
    assert given.proxy_for("https", "example.com", 443) == ProxyAddress("given", 3)  # fetch.proxy wins
    assert given.proxy_for("https", "example.org", 443) is None  # NO_PROXY still read
    with pytest.raises(ConfigError, match=r"HTTPS_PROXY \(fetch.proxy_env\).*socks5"):
        routes_from(FetchConfig(proxy_env=True), {"HTTPS_PROXY": "socks5://p:1080"})


@pytest.mark.parametrize(("text", "message"), [
    ("https://p:3128", "only http:// proxies"),
    ("http://:3128", "names no proxy host"),
    ("http://p:3128/path", "no path or query"),
    ("http://p:99999", "not a proxy URL"),
    ("http://p:0", "port 0"),
])
def test_a_bad_proxy_setting_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"fetch.proxy: .*{message}"):
        config_from_mapping({"fetch": {"proxy": text}})


def test_proxy_address_defaults_and_credentials_are_not_shown() -> None:
    address = parse_proxy("user:pw@proxy.corp", "fetch.proxy")
    assert (address.host, address.port) == ("proxy.corp", 1080)
    assert str(address) == "http://proxy.corp:1080"
    assert str(parse_proxy("http://[::1]:8080", "x")) == "http://[::1]:8080"


class _FakeTransport(asyncio.Transport):
    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__()
        self.peer = peer
        self.closed = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.peer if name == "peername" else default

    def close(self) -> None:
        self.closed = True


def test_a_proxy_at_a_metadata_address_is_refused_and_a_private_one_is_not() -> None:
    metadata = _FakeTransport(("169.254.169.254", 80))
    with pytest.raises(BlockedAddressError, match="metadata"):
        check_proxy_peer(metadata, ProxyAddress("proxy.corp", 80))
    assert metadata.closed
    private = _FakeTransport(("10.0.0.8", 3128))
    check_proxy_peer(private, ProxyAddress("proxy.corp", 3128))  # a corporate proxy is private (rule 5)
    assert not private.closed


@contextlib.contextmanager
def proxy_thread() -> Iterator[Proxy]:
    """The loopback proxy in a thread of its own, for a crawl run as a subprocess."""
    state = Proxy()
    loop = asyncio.new_event_loop()
    servers: list[asyncio.Server] = []

    async def start() -> None:
        server = await asyncio.start_server(lambda r, w: _serve(state, r, w), PROXY_HOST, 0)
        state.port = server.sockets[0].getsockname()[1]
        servers.append(server)

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield state
    finally:
        servers[0].close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_a_crawl_through_the_proxy_is_whole_and_polite(test_web: TestWebFactory, tmp_path: Path) -> None:
    """``polecat crawl --proxy``: every page through the proxy, politeness as without it (0 violations at
    the server, per-IP spacing judged on the targets' addresses), and the proxy not saved with the
    crawl's settings."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=8, seed=3))
    data = tmp_path / "d"
    with proxy_thread() as proxy:
        run = polecat("crawl", *web.seeds, "--data", str(data), "--rate", "20", "--proxy", proxy.url,
                      "--dns-server", web.dns_address, "--allow-private")
    assert run.returncode == 0, run.stderr
    fetched = {r.url for r in web.log if r.target != "/robots.txt"}
    assert fetched == web.ground_truth("any")
    assert len(proxy.requests) == len(web.log)  # every request, robots.txt included, went through it
    assert politeness_violations(web.log, web.min_intervals(20.0)) == []
    assert "proxy" not in json.loads((data / "settings.json").read_text()).get("fetch", {})


def test_a_crawl_through_a_proxy_that_is_not_there_says_so(test_web: TestWebFactory, tmp_path: Path) -> None:
    """The give-up reason and its fix name the proxy: the target is up, and "check the host and port" of
    it would send the operator to the wrong place (proxy rule 8)."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=2, seed=5))
    fast = tmp_path / "fast.toml"
    fast.write_text("[politeness]\ngive_up_backoff = 0.2\n")
    port = _closed_port(PROXY_HOST)
    run = polecat("crawl", *web.seeds, "--data", str(tmp_path / "d"), "--config", str(fast),
                  "--proxy", f"http://{PROXY_HOST}:{port}", "--dns-server", web.dns_address,
                  "--allow-private", timeout=60)
    assert run.returncode != 0, run.stderr
    last = run.stderr.splitlines()[-1]
    assert f"connect: proxy http://{PROXY_HOST}:{port}: cannot connect" in last, last
    assert "check --proxy" in last and "check the host and port" not in last, last
    assert web.log == []


def test_a_bad_proxy_variable_is_refused_before_the_crawl_starts(tmp_path: Path) -> None:
    data = tmp_path / "d"
    command = [sys.executable, "-m", "polecat", "crawl", "http://127.0.0.1:9/", "--data", str(data),
               "--proxy-env", "--allow-private"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HTTPS_PROXY": "socks5://p:1080"})
    assert run.returncode == 2, run.stderr
    assert "HTTPS_PROXY (fetch.proxy_env): 'socks5://p:1080': only http:// proxies" in run.stderr
    assert not data.exists()  # nothing saved, nothing opened
