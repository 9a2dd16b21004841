"""robots.txt end to end: every status class, redirects, a 2 MB body and network failures, from a
hostile loopback server through Fetcher.fetch_robots into RobotsPolicy."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from polecat.config import DnsConfig, FetchConfig, RobotsConfig
from polecat.errors import BlockedAddressError, DnsError, FetchTimeout
from polecat.fetch.http import Fetcher
from polecat.frontier.robots import Closed, Fetch, Ready, RobotsPolicy
from polecat.testing.dns import LocalDnsServer
from polecat.testing.hostile import HostileServer, Request, respond, silent
from tests.robots_helpers import refresh_robots

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(30)]

UA = "polecat/0.1 (+https://example.org/bot)"
RULES = b"User-agent: *\nDisallow: /private\nCrawl-delay: 3\nSitemap: http://a.test/sitemap.xml\n"
BIG = RULES + b"# padding\n" * 60_000 + b"Disallow: /beyond-500k\n" + b"Disallow: /x\n" * 120_000  # 2.2 MB


class Sites:
    """One HostileServer; the first path segment picks the robots.txt behaviour (/<case>/robots.txt).
    Rules only look at paths, so the tests ask them about URLs of a made-up host."""

    def __init__(self, server: HostileServer) -> None:
        self.server = server

    def origin(self, case: str) -> str:
        return self.server.url(f"/{case}")


def robots(status: int, body: bytes = b"", headers: list[tuple[str, str]] | None = None) -> object:
    return respond(status, body, headers or [("Content-Type", "text/plain")])


def redirect(to: str) -> object:
    return respond(301, b"", [("Location", to)])


async def to_metadata(req: Request, w: object) -> bool:  # a redirect to an address the guard refuses
    return await respond(302, b"", [("Location", "http://169.254.169.254/robots.txt")])(req, w)  # type: ignore[arg-type]


ROUTES: dict[str, object] = {
    "/ok/robots.txt": robots(200, RULES),
    "/big/robots.txt": robots(200, BIG),
    "/empty/robots.txt": robots(200, b""),
    "/r1/robots.txt": redirect("/ok/robots.txt"),
    **{f"/r6/{i}": redirect(f"/r6/{i + 1}") for i in range(6)},
    "/r6/robots.txt": redirect("/r6/0"),
    "/r6/6": robots(200, b"User-agent: *\nDisallow: /\n"),
    "/loop/robots.txt": redirect("/loop/robots.txt"),
    "/meta/robots.txt": to_metadata,
    "/silent/robots.txt": silent(),
    "/r429/robots.txt": robots(429, b"", [("Retry-After", "900")]),
    **{f"/s{code}/robots.txt": robots(code, b"User-agent: *\nDisallow: /\n")
       for code in (400, 401, 403, 404, 410, 451, 500, 502, 503, 504)},
}


@pytest.fixture(scope="module")
def dns() -> object:
    with LocalDnsServer() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sites() -> AsyncIterator[Sites]:
    async with HostileServer(ROUTES) as srv:  # type: ignore[arg-type]
        yield Sites(srv)


@contextlib.asynccontextmanager
async def _fetching(dns: LocalDnsServer, seconds: float) -> AsyncIterator[Fetcher]:
    """A fetcher whose every timeout is ``seconds`` (the whole fetch: four times that)."""
    cfg = FetchConfig(connect_timeout=seconds, first_byte_timeout=seconds, read_gap_timeout=seconds,
                      total_timeout=4 * seconds)
    async with Fetcher(cfg, DnsConfig(nameservers=(dns.address,), allow_private=True, timeout=seconds)) as f:
        yield f


@pytest_asyncio.fixture(loop_scope="module")
async def fetcher(dns: LocalDnsServer) -> AsyncIterator[Fetcher]:
    """A fetcher with time to spare: on a loaded CI machine the server, in this process, once took more
    than 0.3 s to answer a robots.txt, and a test of the status's meaning saw a timeout instead."""
    async with _fetching(dns, 5.0) as f:
        yield f


@pytest_asyncio.fixture(loop_scope="module")
async def impatient_fetcher(dns: LocalDnsServer) -> AsyncIterator[Fetcher]:
    """A fetcher that gives up on a silent server fast: for the timeout's own test."""
    async with _fetching(dns, 0.3) as f:
        yield f


@pytest.fixture
def policy() -> RobotsPolicy:
    return RobotsPolicy(RobotsConfig(retry_base=60.0, retry_cap=3600.0), UA, rng=random.Random(1))


async def test_200_rules_apply(sites: Sites, fetcher: Fetcher, policy: RobotsPolicy) -> None:
    _, d = await refresh_robots(fetcher, policy, "ok", sites.origin("ok"))
    assert isinstance(d, Ready) and not d.refresh_due
    assert not d.rules.allowed("http://h.test/private/1")
    assert d.rules.allowed("http://h.test/public")
    assert d.rules.crawl_delay == 3.0 and d.rules.sitemaps == ("http://a.test/sitemap.xml",)
    assert policy.host_state("ok") == "ok"
    assert sites.server.requests[-1].headers["user-agent"] == FetchConfig().user_agent


async def test_2mb_body_parsed_up_to_cap(sites: Sites, fetcher: Fetcher, policy: RobotsPolicy) -> None:
    resp, d = await refresh_robots(fetcher, policy, "big", sites.origin("big"))
    assert not isinstance(resp, Exception) and len(resp.body) == len(BIG) > 2_000_000
    assert isinstance(d, Ready)
    assert not d.rules.allowed("http://h.test/private")
    assert d.rules.allowed("http://h.test/beyond-500k")  # past the 512 KiB parse cap
    assert d.rules.allowed("http://h.test/x")


async def test_empty_200_allows_all(sites: Sites, fetcher: Fetcher, policy: RobotsPolicy) -> None:
    _, d = await refresh_robots(fetcher, policy, "empty", sites.origin("empty"))
    assert isinstance(d, Ready) and d.rules.allowed("http://h.test/anything")


async def test_redirect_followed(sites: Sites, fetcher: Fetcher, policy: RobotsPolicy) -> None:
    _, d = await refresh_robots(fetcher, policy, "r1", sites.origin("r1"))
    assert isinstance(d, Ready) and not d.rules.allowed("http://h.test/private")


@pytest.mark.parametrize("case", ["r6", "loop"])
async def test_endless_redirects_mean_unavailable(
    sites: Sites, fetcher: Fetcher, policy: RobotsPolicy, case: str
) -> None:
    resp, d = await refresh_robots(fetcher, policy, case, sites.origin(case))
    assert not isinstance(resp, Exception) and 300 <= resp.status < 400
    assert isinstance(d, Ready) and d.rules.allowed("http://h.test/anything")
    assert policy.host_state(case) == "unavailable"


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 451])
async def test_4xx_allows_all(sites: Sites, fetcher: Fetcher, policy: RobotsPolicy, code: int) -> None:
    _, d = await refresh_robots(fetcher, policy, f"s{code}", sites.origin(f"s{code}"))
    assert isinstance(d, Ready) and d.rules.allowed("http://h.test/x")
    assert policy.host_state(f"s{code}") == "unavailable"


@pytest.mark.parametrize("code", [500, 502, 503, 504])
async def test_5xx_fails_closed(sites: Sites, fetcher: Fetcher, policy: RobotsPolicy, code: int) -> None:
    _, d = await refresh_robots(fetcher, policy, f"s{code}", sites.origin(f"s{code}"))
    assert isinstance(d, Closed)
    assert policy.host_state(f"s{code}") == "unreachable"


async def test_429_retry_after_respected(sites: Sites, fetcher: Fetcher, policy: RobotsPolicy) -> None:
    clock_now = 100.0
    _, d = await refresh_robots(fetcher, policy, "r429", sites.origin("r429"), clock=lambda: clock_now)
    assert d == Closed(1000.0)


async def test_timeout_fails_closed(sites: Sites, impatient_fetcher: Fetcher, policy: RobotsPolicy) -> None:
    resp, d = await refresh_robots(impatient_fetcher, policy, "silent", sites.origin("silent"))
    assert isinstance(resp, FetchTimeout) and isinstance(d, Closed)
    assert policy.stats().errors == (("timeout", 1),)


async def test_dns_failure_is_backoff_not_crash(fetcher: Fetcher, policy: RobotsPolicy) -> None:
    resp, d = await refresh_robots(fetcher, policy, "gone.test", "http://gone.test")
    assert isinstance(resp, DnsError) and isinstance(d, Closed)
    assert policy.lookup("gone.test", d.until) == Fetch()


async def test_redirect_to_metadata_fails_closed(
    sites: Sites, fetcher: Fetcher, policy: RobotsPolicy
) -> None:
    resp, d = await refresh_robots(fetcher, policy, "meta", sites.origin("meta"))
    assert isinstance(resp, BlockedAddressError) and isinstance(d, Closed)
