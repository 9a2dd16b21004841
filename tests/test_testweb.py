"""Tests of the loopback test web itself: DNS, serving, robots variants, knobs, the request log and the
politeness/ground-truth helpers every integration test and benchmark relies on."""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import parse_qsl, urljoin, urlsplit

import aiohttp
import protego
import pytest
from dnslib import QTYPE, RCODE
from multidict import CIMultiDict
from selectolax.lexbor import LexborHTMLParser

from polecat.testing.dns import DnsServerProcess, LocalDnsServer, query
from polecat.testing.serverlog import RequestRecord
from polecat.testing.sitegen import ROBOTS_VARIANTS, Site, SiteSpec, ground_truth
from polecat.testing.web import CLIENT_GONE, TestWeb, normalize_path, politeness_violations

TestWebFactory = Callable[..., TestWeb]


@asynccontextmanager
async def client(web: TestWeb) -> AsyncIterator[aiohttp.ClientSession]:
    """A plain aiohttp client resolving through the test web's DNS server."""
    resolver = aiohttp.AsyncResolver(nameservers=[web.dns_address])
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


async def get(
    session: aiohttp.ClientSession, url: str, **kwargs: object
) -> tuple[int, bytes, CIMultiDict[str]]:
    async with session.get(url, allow_redirects=False, **kwargs) as resp:  # type: ignore[arg-type]
        return resp.status, await resp.read(), resp.headers.copy()


# --- DNS -------------------------------------------------------------------------------------------


def test_dns_answers_added_names_and_nxdomain_otherwise(dns_server: LocalDnsServer) -> None:
    dns_server.add("H01.test", ["127.0.0.2", "::1"], ttl=42)
    a = query(dns_server.address, "h01.test", "A")
    assert [(str(rr.rdata), rr.ttl) for rr in a.rr] == [("127.0.0.2", 42)]
    aaaa = query(dns_server.address, "h01.TEST.", "AAAA", tcp=True)
    assert [str(rr.rdata) for rr in aaaa.rr] == ["::1"]
    assert aaaa.rr[0].rtype == QTYPE.AAAA
    assert query(dns_server.address, "nope.test").header.rcode == RCODE.NXDOMAIN
    dns_server.fail("h01.test")
    assert query(dns_server.address, "h01.test").header.rcode == RCODE.SERVFAIL
    dns_server.fail("h01.test", "REFUSED")
    assert query(dns_server.address, "h01.test", tcp=True).header.rcode == RCODE.REFUSED
    assert dns_server.queries["h01.test"] == 4
    assert dns_server.queries["nope.test"] == 1


async def test_dns_serves_an_async_resolver(dns_server: LocalDnsServer) -> None:
    dns_server.add("h02.test", ["127.0.0.3"])
    resolver = aiohttp.AsyncResolver(nameservers=[dns_server.address])
    try:
        (info,) = await resolver.resolve("h02.test", 80)
        assert info["host"] == "127.0.0.3"
    finally:
        await resolver.close()


def test_dns_in_a_child_process_answers_as_the_threaded_server_does() -> None:
    with DnsServerProcess() as dns:
        dns.add("H01.test", ["127.0.0.2", "::1"], ttl=42)
        a = query(dns.address, "h01.test", "A")
        assert [(str(rr.rdata), rr.ttl) for rr in a.rr] == [("127.0.0.2", 42)]
        assert [str(rr.rdata) for rr in query(dns.address, "h01.test", "AAAA", tcp=True).rr] == ["::1"]
        dns.fail("h01.test", "REFUSED")
        assert query(dns.address, "h01.test").header.rcode == RCODE.REFUSED
        dns.remove("h01.test")
        assert query(dns.address, "h01.test").header.rcode == RCODE.NXDOMAIN
        dns.add("h02.test", ["127.0.0.3"])
        dns.drop("h02.test", 1)
        with pytest.raises(OSError):  # socket.timeout: the dropped query has no answer
            query(dns.address, "h02.test", timeout=0.3)
        assert str(query(dns.address, "h02.test").rr[0].rdata) == "127.0.0.3"
        assert dns.queries == {"h01.test": 4, "h02.test": 2}
        assert dns.query_types == {"A": 5, "AAAA": 1}
        with pytest.raises(RuntimeError, match="fail"):  # the child refuses a bad request and stays up
            dns.fail("h02.test", "NO-SUCH-RCODE")
        assert str(query(dns.address, "h02.test").rr[0].rdata) == "127.0.0.3"
        child = dns._child
        assert child is not None
    assert child.returncode == 0  # stopped with its server
    with pytest.raises(RuntimeError, match="not started"):
        dns.add("h03.test", ["127.0.0.4"])


async def test_a_web_with_its_dns_in_a_child_process_serves_its_hosts() -> None:
    async with TestWeb(SiteSpec(hosts=3, pages_per_host=2, seed=3), dns_process=True) as web:
        assert isinstance(web.dns, DnsServerProcess)
        for host in web.site.hosts:
            assert str(query(web.dns_address, host).rr[0].rdata) == web.address_of(host)
        async with client(web) as session:  # resolving its hosts through the child
            status, _, _ = await get(session, web.seeds[0])
        assert status == 200
    assert web.dns._child is None


# --- serving ---------------------------------------------------------------------------------------


async def test_every_page_is_served_on_its_hosts_address(test_web: TestWebFactory) -> None:
    web = test_web(SiteSpec(hosts=5, pages_per_host=12, seed=3), addresses=3)
    assert web.seeds[0] == f"http://h01.test:{web.port}/"
    async with client(web) as session:
        for page in range(len(web.site.pages)):
            status, body, headers = await get(session, web.site.url(page, web.port))
            assert status == 200
            assert body == web.site.render(page, web.port)
            assert headers["Content-Type"].startswith("text/html")
        status, _, _ = await get(session, web.base_url("h01.test") + "/no-such-page")
        assert status == 404
    assert web.dns.queries["h05.test"] >= 1
    assert web.address_of("h04.test") == "127.0.0.1"  # host i -> address i mod K
    # The server answers on every loopback address it claims, by Host header.
    async with aiohttp.ClientSession() as plain:
        url = f"http://{web.address_of('h02.test')}:{web.port}/"
        status, body, _ = await get(plain, url, headers={"Host": f"h02.test:{web.port}"})
        assert status == 200 and body == web.site.render(web.site.lookup("h02.test", "/") or 0, web.port)


async def test_robots_variants(test_web: TestWebFactory) -> None:
    spec = SiteSpec(hosts=5, pages_per_host=4, robots=ROBOTS_VARIANTS, crawl_delays=(("h02.test", 0.5),))
    web = test_web(spec)
    async with client(web) as session:
        got = {h: await get(session, web.base_url(h) + "/robots.txt") for h in web.site.hosts}
    assert got["h01.test"][:2] == (200, b"User-agent: *\nDisallow:\n")
    assert got["h02.test"][:2] == (200, b"User-agent: *\nDisallow: /private/\nCrawl-delay: 0.5\n")
    assert b"Allow: /private/open-" in got["h03.test"][1]
    assert got["h04.test"][0] == 404
    assert got["h05.test"][0] == 500
    assert web.site.crawl_delay("h02.test") == 0.5
    assert web.min_intervals(rate=4.0) == {
        "h01.test": 0.25,
        "h02.test": 0.5,
        "h03.test": 0.25,
        "h04.test": 0.25,
        "h05.test": 0.25,
    }


async def test_knobs_status_retry_after_times_redirect_delay_and_robots(test_web: TestWebFactory) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=5))
    base = web.base_url("h01.test")
    web.respond("h01.test", "/", 503, headers={"Retry-After": "7"}, times=1)
    web.redirect("h02.test", "/a", "/b", status=302)
    web.redirect("h02.test", "/b", "/a")
    web.delay("h01.test", "/robots.txt", 0.3)
    web.respond("h02.test", "*", 429)
    async with client(web) as session:
        status, _, headers = await get(session, base + "/")
        assert (status, headers["Retry-After"]) == (503, "7")
        assert (await get(session, base + "/"))[0] == 200  # times=1 expired
        status, _, headers = await get(session, web.base_url("h02.test") + "/a")
        assert (status, headers["Location"]) == (302, "/b")
        assert (await get(session, web.base_url("h02.test") + "/b"))[2]["Location"] == "/a"
        assert (await get(session, web.base_url("h02.test") + "/"))[0] == 429  # "*" rule
        t0 = time.monotonic()
        assert (await get(session, base + "/robots.txt"))[0] == 200
        assert time.monotonic() - t0 >= 0.3
        web.set_robots("h01.test", crawl_delay=2)
        assert (await get(session, base + "/robots.txt"))[1].endswith(b"Crawl-delay: 2\n")
        web.set_robots("h01.test", 500)
        assert (await get(session, base + "/robots.txt"))[0] == 500
        web.clear("h01.test")
        assert (await get(session, base + "/robots.txt"))[1] == b"User-agent: *\nDisallow: /private/\n"
    delayed = next(r for r in web.log if r.target == "/robots.txt")
    assert delayed.end - delayed.start >= 0.3


async def test_a_delayed_request_given_up_ends_when_its_client_goes(test_web: TestWebFactory) -> None:
    """An aborted fetch stops being in flight at the server when its connection closes, not when the
    delay would have run out: it is logged then, with status CLIENT_GONE."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=5))
    web.delay("h01.test", "/", 30.0)
    async with client(web) as session:
        request = asyncio.create_task(get(session, web.base_url("h01.test") + "/"))
        deadline = time.monotonic() + 10
        while web.in_flight("h01.test") == 0:
            assert time.monotonic() < deadline, "the request never reached the server"
            await asyncio.sleep(0.01)
        request.cancel()  # the client gives up: aiohttp closes the connection
        gave_up = time.monotonic()
        while web.in_flight("h01.test"):
            assert time.monotonic() < deadline, "the server kept answering a client that is gone"
            await asyncio.sleep(0.01)
    [record] = web.log
    assert record.status == CLIENT_GONE and record.start < gave_up <= record.end < record.start + 30


async def test_conditional_get_answers_304(test_web: TestWebFactory) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=2))
    async with client(web) as session:
        _, _, headers = await get(session, web.seeds[0])
        status, body, _ = await get(session, web.seeds[0], headers={"If-None-Match": headers["ETag"]})
    assert (status, body) == (304, b"")


# --- request log and helpers ------------------------------------------------------------------------


async def test_log_records_canonical_urls_times_and_duplicate_fetches(test_web: TestWebFactory) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=10, query_ratio=0.3, private_ratio=0.0))
    item = next(p for p in web.site.pages if p.kind == "item")
    page = next(p for p in web.site.pages if p.kind == "page")
    base = web.base_url("h01.test")
    before = time.monotonic()
    async with client(web) as session:
        await get(session, base + item.path)
        key, value = item.path.split("?")[1].split("&")[0].split("=")
        reordered = item.path.split("?")[0] + "?lang=en&" + f"{key}={value}&utm_source=x"
        await get(session, base + reordered + "#frag")
        await get(session, base + page.path.replace("-", "%2D").replace("/s", "/s0/../s", 1))
    log = web.log
    assert [r.status for r in log] == [200, 200, 200]
    assert all(before <= r.start <= r.end <= time.monotonic() for r in log)
    assert log[1].target == reordered and log[1].url == base + item.path
    assert log[2].url == base + page.path
    counts = web.fetch_counts()
    assert counts[base + item.path] == 2 and counts[base + page.path] == 1


def _rec(host: str, start: float, end: float) -> RequestRecord:
    return RequestRecord(host, "/", f"http://{host}/", "GET", start, end, 200)


def test_politeness_violations_on_synthetic_logs() -> None:
    log = [
        _rec("a", 0.0, 0.1),
        _rec("a", 1.0, 1.1),
        _rec("b", 0.0, 0.5),
        _rec("b", 0.4, 0.6),
        _rec("a", 1.5, 1.6),
    ]
    found = politeness_violations(log, {"a": 1.0, "*": 0.2})
    assert [(v.host, v.kind, v.first.start, v.second.start) for v in found] == [
        ("a", "interval", 1.0, 1.5),
        ("b", "overlap", 0.0, 0.4),
    ]
    assert [v.kind for v in politeness_violations(log, {"a": 0.5, "*": 0.0})] == ["overlap"]
    assert len(politeness_violations(log, 1.0, slack=0.6)) == 1  # only the overlap survives slack


async def test_politeness_violations_measured_at_the_server(test_web: TestWebFactory) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=3))
    async with client(web) as session:
        await get(session, web.seeds[0])
        await get(session, web.seeds[0])  # back to back: closer than 30 s on any machine (0.3 s was
        # not, at load 20)
    assert [v.kind for v in politeness_violations(web.log, 30.0)] == ["interval"]
    web.clear_log()
    web.delay("h01.test", "/", 2.0)  # the second starts while the first waits, however loaded
    async with client(web) as session:
        await asyncio.gather(get(session, web.seeds[0]), get(session, web.seeds[0]))
    assert "overlap" in [v.kind for v in politeness_violations(web.log, 0.0)]
    web.clear()
    web.clear_log()
    async with client(web) as session:
        for _ in range(3):
            await get(session, web.seeds[0])
            await get(session, web.seeds[1])  # another host does not count
            await asyncio.sleep(0.12)
    assert politeness_violations(web.log, 0.1) == []


# --- generator and ground truth ---------------------------------------------------------------------


def test_generation_is_deterministic_and_has_duplicates() -> None:
    spec = SiteSpec(hosts=3, pages_per_host=40, dup_ratio=0.1, near_dup_ratio=0.1, seed=7)
    a, b = Site(spec), Site(spec)
    assert [a.render(i, 8080) for i in range(len(a.pages))] == [
        b.render(i, 8080) for i in range(len(b.pages))
    ]
    assert Site(SiteSpec(hosts=3, pages_per_host=40, seed=8)).render(5, 8080) != a.render(5, 8080)
    dups = [i for i, p in enumerate(a.pages) if p.kind == "dup"]
    nears = [i for i, p in enumerate(a.pages) if p.kind == "near_dup"]
    assert len(dups) == len(nears) == 3 * 4
    for i in dups:
        assert a.render(i, 8080) == a.render(a.pages[i].original, 8080)
    for i in nears:
        mine, theirs = a.render(i, 8080), a.render(a.pages[i].original, 8080)
        assert mine != theirs and len(mine) == len(theirs) + len(str(i)) - len(str(a.pages[i].original))
    sizes = [len(a.render(i, 8080)) for i in range(len(a.pages))]
    assert 0.5 * 2048 < sum(sizes) / len(sizes) < 1.5 * 2048


def _canonical(url: str) -> str:
    """A test-local canonicalizer for the link forms the generator writes (independent of the server)."""
    parts = urlsplit(url)
    path = re.sub(r"%2[dD]", "-", normalize_path(parts.path or "/"))
    query = sorted(
        (k, v) for k, v in parse_qsl(parts.query) if not k.startswith("utm_") and k not in ("gclid", "fbclid")
    )
    q = "&".join(f"{k}={v}" for k, v in query)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port}{path}{'?' + q if q else ''}"


async def test_ground_truth_equals_a_robots_respecting_bfs_over_http(test_web: TestWebFactory) -> None:
    spec = SiteSpec(
        hosts=5,
        pages_per_host=30,
        seed=11,
        robots=ROBOTS_VARIANTS,
        dup_ratio=0.1,
        near_dup_ratio=0.1,
        private_ratio=0.2,
        query_ratio=0.2,
    )
    web = test_web(spec)
    robots: dict[str, protego.Protego | None] = {}
    fetched: set[str] = set()
    async with client(web) as session:
        for host in web.site.hosts:
            status, body, _ = await get(session, web.base_url(host) + "/robots.txt")
            robots[host] = (
                protego.Protego.parse(body.decode())
                if status == 200
                else None
                if status < 500
                else protego.Protego.parse("User-agent: *\nDisallow: /")
            )

        def allowed(url: str) -> bool:
            parser = robots[urlsplit(url).hostname or ""]
            return parser is None or bool(parser.can_fetch(url, "polecat"))

        seen = set(web.seeds)
        queue = deque(u for u in web.seeds if allowed(u))
        while queue:
            url = queue.popleft()
            status, body, _ = await get(session, url)
            assert status == 200, url
            fetched.add(url)
            for node in LexborHTMLParser(body).css("a[href]"):
                href = node.attributes["href"] or ""
                if href.startswith(("mailto:", "javascript:")):
                    continue
                target = _canonical(urljoin(url, href))
                if target not in seen:
                    seen.add(target)
                    if allowed(target):
                        queue.append(target)
    truth = web.ground_truth()
    assert fetched == truth
    assert not any("h05.test" in u for u in truth)  # robots 500: the whole host is off limits
    assert any("/private/open-" in u for u in truth) and any("/private/page-" in u for u in seen - truth)
    assert web.robots_violations() == []
    assert max(web.fetch_counts().values()) == 1
    # Host scope only follows same-host links; every page is still reachable from its own root.
    assert ground_truth(spec, web.port, scope="host") <= truth


def test_robots_violations_flag_disallowed_fetches() -> None:
    site = Site(SiteSpec(hosts=2, pages_per_host=20, robots=("disallow_private", "error")))
    private = next(p for p in site.pages if p.host == "h01.test" and p.kind == "private")
    log = [
        RequestRecord("h01.test", private.path, f"http://h01.test:1{private.path}", "GET", 0, 0, 200),
        RequestRecord("h01.test", "/", "http://h01.test:1/", "GET", 0, 0, 200),
        RequestRecord("h02.test", "/robots.txt", "http://h02.test:1/robots.txt", "GET", 0, 0, 500),
        RequestRecord("h02.test", "/", "http://h02.test:1/", "GET", 0, 0, 200),
    ]
    from polecat.testing.serverlog import robots_violations

    assert [r.url for r in robots_violations(log, site)] == [log[0].url, log[3].url]
