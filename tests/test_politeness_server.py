"""Politeness under pressure, measured at the server: a real Crawler against the loopback test web.

Every timing assertion here reads request arrival times from the server's log (or, for DNS, from the
DNS server's query counter), never the client's own clock. The lower bounds are exact (a gap measured
at the server cannot be shorter than the crawler's wait, since the crawler waits from the moment the
response reached it); ``CLOCK_SLACK`` only absorbs comparing the server's monotonic clock with the
crawler's wall clock. Upper bounds are loose (the shared 2-core machine delays timers): they only show
the crawler does not wait far longer than the rules ask.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from email.utils import formatdate
from pathlib import Path
from typing import Any

import lmdb
import pytest

from polecat import Crawler
from polecat.config import Config
from polecat.fetch.http import Fetcher, Response
from polecat.frontier.records import UrlRecord
from polecat.node.stats import CrawlStats
from polecat.testing.dns import LocalDnsServer
from polecat.testing.serverlog import RequestRecord, politeness_violations
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, summary_errors
from tests.frontier_helpers import queued_urls_in

CLOCK_SLACK = 0.005
"""Seconds: server monotonic vs crawler wall-clock arithmetic (float rounding, clock slew)."""
LATE = 1.0
"""Seconds a wait may overrun on a loaded machine before we call it a bug."""
BACKOFF = frozenset({429, 503})
DNS_POLL_SLACK = 0.02
"""Seconds: the DNS query counter is polled every 1 ms from a thread that may wait for the GIL."""
CONNECT_SLACK = 0.15
"""Seconds: a fetch timeout counts from the crawler's start, before its connect; the server sees the
request after it, so two attempts' arrivals can be closer than their starts by that connect latency
(a fresh-clone CI run on the 2-core VM, the suite's two processes busy, saw 0.1 s of it: a gap of 1.83 s
for a wait of at least 1.95 s)."""


def crawl(cfg: Config, timeout: float = 40.0) -> CrawlStats:
    async def main() -> CrawlStats:
        async with Crawler(cfg) as crawler:
            return await asyncio.wait_for(crawler.run(), timeout)

    return asyncio.run(main())


def simple_site(hosts: int, pages: int, seed: int = 1, **kw: Any) -> SiteSpec:
    """Hosts whose robots.txt allows everything, no private pages, links within each host only."""
    return SiteSpec(hosts=hosts, pages_per_host=pages, seed=seed, robots=("allow",), private_ratio=0.0,
                    cross_host_ratio=0.0, **kw)


def host_urls(web: TestWeb, host: str) -> list[str]:
    """Every page URL of ``host``, root first."""
    return [web.site.url(g, web.port) for g, p in enumerate(web.site.pages) if p.host == host]


def requests_to(web: TestWeb, host: str) -> list[RequestRecord]:
    return sorted((r for r in web.log if r.host == host), key=lambda r: r.start)


def gaps(records: Sequence[RequestRecord]) -> list[float]:
    """Start-to-start gaps between consecutive requests."""
    return diffs([r.start for r in records])


def diffs(times: Sequence[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def aimd_min_gaps(records: Sequence[RequestRecord], rate: float, cut: float, step: float) -> list[float]:
    """The shortest start-to-start gap after each request that AIMD allows, replayed from the statuses
    the server sent: x ``cut`` on 429/503, + ``step`` (up to 1) on anything else."""
    factor, out = 1.0, []
    for r in records[:-1]:
        factor = factor * cut if r.status in BACKOFF else min(1.0, factor + step)
        out.append(1.0 / (rate * factor))
    return out


def wait_for_log(web: TestWeb, host: str, n: int, timeout: float = 5.0) -> list[RequestRecord]:
    """The server logs a request when its handler finishes; a delayed handler may outlive the crawl."""
    deadline = time.monotonic() + timeout
    while len(records := requests_to(web, host)) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return records


def frontier_state(data: Path) -> tuple[dict[str, UrlRecord], set[str]]:
    """(finished URL records by URL, queued URLs) read straight from the crawl's LMDB after it closed."""
    env = lmdb.open(str(data / "frontier"), max_dbs=16, readonly=True, lock=False)
    try:
        urls_db = env.open_db(b"urls", create=False)
        queue_db = env.open_db(b"queue", create=False)
        hosts_db = env.open_db(b"hosts", create=False)
        with env.begin() as txn:
            done = {(rec := UrlRecord.decode(v)).url: rec for _, v in txn.cursor(db=urls_db)}
            queued = set(queued_urls_in(txn.cursor(db=hosts_db), txn.cursor(db=queue_db)))
    finally:
        env.close()
    return done, queued


@contextmanager
def dns_arrivals(dns: LocalDnsServer, names: Sequence[str]) -> Iterator[dict[str, list[float]]]:
    """Monotonic times at which the DNS server's query count for each name went up (1 ms polling)."""
    times: dict[str, list[float]] = {n: [] for n in names}
    stop = threading.Event()

    def poll() -> None:
        last = {n: 0 for n in names}
        while not stop.is_set():
            now = time.monotonic()
            for n in names:
                count = dns.queries.get(n, 0)
                if count != last[n]:
                    times[n].append(now)
                    last[n] = count
            time.sleep(0.001)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield times
    finally:
        stop.set()
        thread.join()


def backed_off_lookups(times: Sequence[float], base: float) -> list[float]:
    """First times of the lookups of a name that backs off from ``base``: a query starts lookup n + 1 when
    it comes at least ``base * 2 ** (n - 1)`` (less the poll's slack) after lookup n's first; the others
    belong to the lookup before (its A, AAAA and c-ares retries, which a loaded machine spread over 265 ms
    once, so a fixed quiet gap split one lookup in two). Lookups that did not back off merge into fewer."""
    starts: list[float] = []
    for t in times:
        if not starts or t - starts[-1] >= base * 2 ** (len(starts) - 1) - DNS_POLL_SLACK:
            starts.append(t)
    return starts


# --- Retry-After -----------------------------------------------------------------------------------


def test_a_node_waits_for_hosts_on_the_kernels_timer_and_never_early(
        test_web: TestWebFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # polecat/runloop.py rule 4: a crawl on Linux with the system clock waits on a timerfd, not on
    # uvloop's millisecond timers (which spin through the last half millisecond of each wait).
    if sys.platform != "linux":
        pytest.skip("timerfd is Linux's")
    from polecat import runloop
    from polecat.node import leases as node

    chosen: list[runloop.AlarmClock] = []
    sets = [0]

    class Counting(runloop.TimerFdAlarmClock):
        __slots__ = ()

        def set(self, until: float, event: asyncio.Event) -> None:
            sets[0] += 1
            super().set(until, event)

    def recording(loop: asyncio.AbstractEventLoop, clock: Any) -> runloop.AlarmClock:
        made = runloop.alarm_clock(loop, clock)
        if isinstance(made, runloop.TimerFdAlarmClock):
            made.close()
            made = Counting(loop)
        chosen.append(made)
        return made

    monkeypatch.setattr(node, "alarm_clock", recording)
    rate = 5.0  # 200 ms between pages: a loaded machine's fetch (seen past 50 ms) still leaves a wait
    web = test_web(simple_site(1, 8))
    stats = crawl(crawl_config(web, tmp_path / "data", politeness={"rate": rate}))
    assert [type(c) for c in chosen] == [Counting] and sets[0] >= 7  # a wait before each page after robots
    assert stats.politeness_violations == 0
    log = requests_to(web, web.site.hosts[0])
    assert len(log) == 9  # robots.txt and the 8 pages
    assert min(gaps(log)) >= 1 / rate - CLOCK_SLACK  # judged at the server


def test_retry_after_seconds_and_http_date_hold_to_the_second(test_web: TestWebFactory,
                                                               tmp_path: Path) -> None:
    rate, cut, step = 10.0, 0.5, 0.1
    web = test_web(simple_site(3, 10))
    by_seconds, by_date, calm = web.site.hosts
    for host in (by_seconds, by_date):
        web.set_robots(host, 200)  # an explicit robots rule: the 429 below is for pages only
    web.respond(by_seconds, "/", 429, headers={"Retry-After": "2"}, times=1)
    # A whole second, so the date on the wire is exact and the bound below needs no rounding.
    retry_at = math.ceil(time.time()) + 3
    web.respond(by_date, "/", 429, headers={"Retry-After": formatdate(retry_at, usegmt=True)}, times=1)
    cfg = crawl_config(web, tmp_path / "data",
                       politeness={"rate": rate, "backoff_factor": cut, "recover_step": step})
    stats = crawl(cfg)
    assert stats.politeness_violations == 0 and stats.queued == 0

    for host in (by_seconds, by_date):
        log = requests_to(web, host)
        statuses = [r.status for r in log]
        assert statuses[:3] == [200, 429, 200], statuses  # robots, the 429, the retried root
        refused, retried = log[1], log[2]
        if host == by_seconds:
            waited = retried.start - refused.end
            assert 2.0 - CLOCK_SLACK <= waited < 2.0 + LATE, waited
        else:
            # An HTTP-date is a wall-clock instant: judged on the server's wall clock, not by converting
            # its monotonic arrival with an offset read earlier (a clock step in between moved that).
            assert retry_at <= retried.wall < retry_at + LATE, (retried.wall, retry_at)
        # The 429 cut the rate: every later gap respects the replayed AIMD interval, the first ones are
        # visibly longer than the uncut 1/rate, and the rate recovers as successes come in.
        after = gaps(log)
        assert all(g >= m - CLOCK_SLACK for g, m in zip(after, aimd_min_gaps(log, rate, cut, step),
                                                          strict=True)), after
        assert after[2] >= 1.5 / rate, after
        assert min(after[-3:]) < after[2], after
        fetched = {r.url for r in log if r.status == 200 and r.target != "/robots.txt"}
        assert fetched == set(host_urls(web, host))
    assert politeness_violations(requests_to(web, calm), 1.0 / rate) == []


# --- AIMD without Retry-After -----------------------------------------------------------------------


def test_429_and_503_without_retry_after_still_back_off(test_web: TestWebFactory, tmp_path: Path) -> None:
    rate, cut, step = 10.0, 0.5, 0.1
    web = test_web(simple_site(2, 12))
    storm, single = web.site.hosts
    web.set_robots(storm, 200)
    web.respond(storm, "*", 429, times=3)
    web.respond(single, "/", 503, times=1)
    cfg = crawl_config(web, tmp_path / "data",
                       scope={"seeds": [*host_urls(web, storm), web.base_url(single) + "/"]},
                       politeness={"rate": rate, "backoff_factor": cut, "recover_step": step})
    stats = crawl(cfg)
    assert stats.politeness_violations == 0 and stats.queued == 0

    log = requests_to(web, storm)
    assert [r.status for r in log[:5]] == [200, 429, 429, 429, 200]
    g = gaps(log)
    floor = aimd_min_gaps(log, rate, cut, step)
    assert all(a >= b - CLOCK_SLACK for a, b in zip(g, floor, strict=True)), list(zip(g, floor, strict=True))
    # Gaps grow with each 429 (0.2, 0.4, 0.8 s at least), then shrink as successes restore the rate.
    assert g[1] < g[2] < g[3], g[:4]
    assert g[3] >= 8 / rate - CLOCK_SLACK
    assert max(g[-3:]) < 0.5 * g[3], g
    assert sorted(r.url for r in log if r.status == 200 and r.target != "/robots.txt") == sorted(
        host_urls(web, storm))  # the 429'd URLs were retried and fetched, each once

    log = requests_to(web, single)
    assert [r.status for r in log[:3]] == [200, 503, 200]
    assert log[2].start - log[1].start >= 2 / rate - CLOCK_SLACK  # at least 2x the interval


# --- timeouts and refused connections: quarantine, park, report -----------------------------------------


def test_unresponsive_hosts_are_quarantined_parked_and_reported(test_web: TestWebFactory,
                                                                 tmp_path: Path) -> None:
    base, park_after = 0.2, 4
    # The header deadline (connect budget + first-byte budget): a connect budget of 1 s, so no attempt
    # fails before it reaches the server (a 0.15 s budget once timed out connecting under CI load, and
    # the server then saw 3 attempts, not 4), and the first byte is due 0.15 s later, long before the
    # 1.5 s the pages take.
    connect, timeout = 1.0, 1.15
    web = test_web(simple_site(5, 6))
    *slow, healthy = web.site.hosts
    for host in slow:
        web.set_robots(host, 200)
        web.respond(host, "*", None, delay=1.5)  # every page times out; robots.txt answers at once
    web.add_host("refused.test", "127.0.0.9")  # nothing listens there: connection refused
    refused_seed = f"http://refused.test:{web.port}/"
    seeds = [u for h in slow for u in host_urls(web, h)[:3]] + [web.base_url(healthy) + "/", refused_seed]
    data = tmp_path / "data"
    cfg = crawl_config(
        web, data, scope={"seeds": seeds},
        politeness={"rate": 10.0, "quarantine_base": base, "quarantine_cap": 30.0,
                    "park_after_failures": park_after, "max_url_attempts": 2},
        fetch={"connect_timeout": connect, "first_byte_timeout": timeout - connect, "total_timeout": 2.0},
        robots={"retry_base": base},
    )
    started = time.monotonic()
    stats = crawl(cfg)
    assert time.monotonic() - started < 20  # the crawl ends although hosts never answer

    assert dict(stats.parked).keys() == {f"{h}:{web.port}" for h in (*slow, "refused.test")}
    assert all("consecutive failures" in why for _, why in stats.parked), stats.parked
    errors = dict(stats.errors)
    assert errors.get("timeout") == park_after * len(slow), errors
    assert errors.get("robots:connect") == park_after, errors
    assert "internal" not in errors

    ratios = []
    for host in slow:
        pages = [r for r in wait_for_log(web, host, 1 + park_after) if r.target != "/robots.txt"]
        assert len(pages) == park_after, [r.target for r in pages]  # parked: no attempt after the last
        for n, gap in enumerate(gaps(pages), start=1):
            # The n-th consecutive failure waits base * 2**(n-1) times a jitter in [1, 1.5) after the
            # timeout fired; at the server that is the timeout plus the quarantine.
            q = base * 2 ** (n - 1)
            assert timeout + q - CONNECT_SLACK <= gap <= timeout + 1.5 * q + 0.2, (host, n, gap)
            ratios.append((gap - timeout) / q)
    # Jitter: hosts that failed together do not retry in lockstep.
    assert max(ratios) - min(ratios) > 0.15, ratios

    # Nothing silently dropped: each seed of a parked host is recorded failed (max_url_attempts reached,
    # with its reason) or still queued for a later run; the healthy host was crawled meanwhile.
    done, queued = frontier_state(data)
    for url in seeds:
        if url.startswith(web.base_url(healthy)):
            continue
        rec = done.get(url)
        assert (rec is not None and rec.outcome == "failed" and rec.reason == "timeout") or url in queued, url
    assert sum(1 for r in done.values() if r.outcome == "failed") == len(slow)  # 4 failures, 2 attempts
    assert stats.queued == len(queued) == 2 * len(slow) + 1
    assert {r.url for r in requests_to(web, healthy) if r.status == 200 and r.target != "/robots.txt"} == set(
        host_urls(web, healthy))


# --- DNS failures ------------------------------------------------------------------------------------


def test_dns_failures_back_off_park_and_never_crash(test_web: TestWebFactory, tmp_path: Path) -> None:
    base, park_after = 0.2, 3
    web = test_web(simple_site(1, 4))
    (host,) = web.site.hosts
    web.dns.fail("servfail.test")  # SERVFAIL; nxdomain.test was never added: NXDOMAIN
    nx_url = f"http://nxdomain.test:{web.port}/linked"
    links = "".join(f'<a href="{u}">x</a>' for u in (nx_url, *host_urls(web, host)[1:]))
    web.respond(host, "/", 200, headers={"Content-Type": "text/html"},
                body=f"<html><body>{links}</body></html>".encode())
    servfail_seed = f"http://servfail.test:{web.port}/"
    data = tmp_path / "data"
    cfg = crawl_config(
        web, data, scope={"seeds": [web.base_url(host) + "/", servfail_seed], "mode": "any"},
        politeness={"rate": 10.0, "quarantine_base": base, "park_after_failures": park_after},
        dns={"negative_ttl": 0.0, "timeout": 1.0},  # no negative cache: every attempt asks the server
        robots={"retry_base": base},
    )
    with dns_arrivals(web.dns, ["servfail.test", "nxdomain.test"]) as arrivals:
        stats = crawl(cfg)

    assert dict(stats.parked).keys() == {f"{h}:{web.port}" for h in ("servfail.test", "nxdomain.test")}
    errors = dict(stats.errors)
    assert errors.get("robots:dns") == 2 * park_after, errors
    assert "internal" not in errors
    for name, times in arrivals.items():  # as many lookups as failures counted, each after its back-off
        assert len(backed_off_lookups(times, base)) == park_after, (name, times)
    _, queued = frontier_state(data)
    assert {nx_url, servfail_seed} <= queued  # kept, reported in stats.queued, never dropped
    assert stats.queued == 2
    fetched = {r.url for r in web.log if r.status == 200 and r.target != "/robots.txt"}
    assert fetched == set(host_urls(web, host))


# --- mixed rates: throttle overrides and Crawl-delay ------------------------------------------------


def test_zero_violations_with_throttles_and_crawl_delays(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(simple_site(6, 16, seed=9, crawl_delays=(("h03.test", 0.25), ("h04.test", 0.3))))
    throttle = {"h01.test": 20.0, "h02.test": 4.0, "h04.test": 20.0, "*.test": 8.0}
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 2.0, "throttle": throttle})
    stats = crawl(cfg)
    assert stats.politeness_violations == 0 and stats.queued == 0

    def rate_of(h: str) -> float:
        return throttle.get(h, throttle["*.test"])

    interval = {h: max(1.0 / rate_of(h), web.site.crawl_delay(h)) for h in web.site.hosts}
    assert interval == {"h01.test": 0.05, "h02.test": 0.25, "h03.test": 0.25, "h04.test": 0.3,
                        "h05.test": 0.125, "h06.test": 0.125}
    assert politeness_violations(web.log, interval) == []
    for host, need in interval.items():
        log = requests_to(web, host)
        assert len(log) == 1 + 16, (host, len(log))
        # Each host runs at its own pace, not a slower shared one: the override and the delay apply.
        assert statistics.median(gaps(log)) < 2 * need, (host, gaps(log))


# --- a 429 storm ----------------------------------------------------------------------------------


def test_429_storm_ends_fetched_or_failed_after_max_attempts(test_web: TestWebFactory,
                                                              tmp_path: Path) -> None:
    web = test_web(simple_site(1, 8))
    (host,) = web.site.hosts
    urls = host_urls(web, host)
    first, root, third = urls[5], urls[0], urls[6]
    web.set_robots(host, 200)
    storm = 4
    web.respond(host, "*", 429, headers={"Retry-After": "1"}, times=storm)
    data = tmp_path / "data"
    cfg = crawl_config(web, data, scope={"seeds": [first, root, third]},
                       politeness={"rate": 20.0, "max_url_attempts": 2, "recover_step": 0.2})
    stats = crawl(cfg)
    assert stats.politeness_violations == 0 and stats.queued == 0

    log = [r for r in requests_to(web, host) if r.target != "/robots.txt"]
    assert [r.status for r in log[: storm + 1]] == [429] * storm + [200]
    for a, b in itertools.pairwise(log[: storm + 1]):
        assert b.start - a.end >= 1.0 - CLOCK_SLACK, (a.target, b.target, b.start - a.end)
    # Round robin over the three seeds: the first is refused twice and recorded failed with its reason,
    # the other two were retried and fetched, and the crawl went on from them.
    done, queued = frontier_state(data)
    assert not queued
    assert done[first].outcome == "failed" and done[first].reason == "429"
    assert done[root].outcome == "fetched" and done[third].outcome == "fetched"
    fetched = {r.url for r in log if r.status == 200}
    assert fetched == set(urls) - {first}
    assert dict(stats.urls_done).get("failed") == 1


# --- a failed request still counts against the host's interval --------------------------------------


def test_timeout_retry_waits_at_least_the_crawl_delay(test_web: TestWebFactory, tmp_path: Path) -> None:
    """A request that timed out did reach the server: the retry must keep the host's interval (here a
    Crawl-delay longer than the quarantine), measured from the first request's arrival."""
    crawl_delay = 1.0
    web = test_web(simple_site(1, 3))
    (host,) = web.site.hosts
    web.set_robots(host, 200, crawl_delay=crawl_delay)
    web.respond(host, "/", None, delay=0.6, times=1)  # the first fetch of / times out, the retry works
    cfg = crawl_config(
        web, tmp_path / "data",
        politeness={"rate": 10.0, "quarantine_base": 0.1},
        fetch={"connect_timeout": 0.1, "first_byte_timeout": 0.1, "total_timeout": 1.0},
    )
    stats = crawl(cfg)
    assert dict(stats.errors).get("timeout") == 1
    roots = [r for r in wait_for_log(web, host, 1 + 3) if r.target == "/"]
    assert len(roots) == 2
    assert roots[1].start - roots[0].start >= crawl_delay - CLOCK_SLACK, roots[1].start - roots[0].start
    assert politeness_violations(web.log, crawl_delay) == []


# --- the politeness anchor must not depend on when the fetcher's own clock started -------------------


def test_anchor_survives_a_pause_before_the_fetch_starts(test_web: TestWebFactory, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the node noting a request's start and the fetcher starting its own clock, the event loop
    (or the GIL, with the store's flush thread) may pause. Simulate a 50 ms pause on every other request:
    the response's header time must still anchor the next request, so server-side gaps stay >= 1/rate."""
    rate = 5.0
    web = test_web(simple_site(1, 8))
    (host,) = web.site.hosts
    original = Fetcher._get
    calls = itertools.count()

    async def paused_get(self: Fetcher, url: str, *args: Any, **kwargs: Any) -> Response:
        if next(calls) % 2 == 0:
            await asyncio.sleep(0.05)
        return await original(self, url, *args, **kwargs)

    monkeypatch.setattr(Fetcher, "_get", paused_get)
    stats = crawl(crawl_config(web, tmp_path / "data", politeness={"rate": rate}))
    assert stats.queued == 0 and len(requests_to(web, host)) == 1 + 8
    assert politeness_violations(web.log, 1.0 / rate) == []


# --- efficiency: a crawl of many hosts must not lose hosts to its own DNS burst ---------------------------


def test_start_of_a_many_host_crawl_loses_no_host_to_dns(test_web: TestWebFactory, tmp_path: Path) -> None:
    """Every host's robots.txt is due at once when a crawl starts: hundreds of lookups in the same
    millisecond. A failed lookup closes the host (robots.txt unreachable) and quarantines it, which at
    default settings idles it for a minute (benchmarks/README.md, Frontier). The crawler runs as its own
    process, as in production: in the test's process the DNS server's thread would pace it."""
    hosts = 500
    web = test_web(simple_site(hosts, 1))
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(web.seeds) + "\n")
    conf = tmp_path / "fast-retry.toml"  # failures, if any, retried quickly: the crawl ends either way
    conf.write_text("[robots]\nretry_base = 0.5\n[politeness]\nquarantine_base = 0.5\n")
    done = subprocess.run(
        [sys.executable, "-m", "polecat", "crawl", "--seeds-file", str(seeds),
         "--data", str(tmp_path / "d"), "--rate", "10", "--concurrency", str(hosts),
         "--dns-server", web.dns_address, "--allow-private", "--quiet", "--config", str(conf)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = done.stdout
    assert f"{hosts} fetches" in summary and "0 still queued" in summary, summary
    # e.g. "errors: robots:dns 166" without the fix. A loaded machine (the suite's test processes on two
    # cores) once left the test's DNS server, a Python thread of the test's process, 3 answers late: up to
    # 1 % of the hosts' lookups may fail that way, each retried (every host was fetched all the same).
    errors = summary_errors(summary)
    assert set(errors) <= {"robots:dns"} and errors.get("robots:dns", 0) <= hosts // 100, summary


# --- one request in flight per key -------------------------------------------------------------------


def test_slow_host_never_has_two_requests_in_flight(test_web: TestWebFactory, tmp_path: Path) -> None:
    """Responses slower than the interval: the next request waits for the previous one to end."""
    slow = 0.3
    web = test_web(simple_site(1, 8))
    (host,) = web.site.hosts
    web.respond(host, "*", None, delay=slow)  # robots.txt and pages, all served after 0.3 s
    stats = crawl(crawl_config(web, tmp_path / "data", politeness={"rate": 20.0}))
    assert stats.queued == 0
    log = requests_to(web, host)
    assert len(log) == 1 + 8
    assert politeness_violations(log, 1 / 20.0) == []  # includes the overlap check
    assert all(b.start >= a.end for a, b in itertools.pairwise(log))


def test_hosts_sharing_an_address_share_its_budget_with_key_by_ip(test_web: TestWebFactory,
                                                                  tmp_path: Path) -> None:
    """With ``key_by_ip`` several hosts on one server are one politeness key as well: measured at that
    server, requests of all its hosts together keep the interval and never overlap."""
    rate = 10.0
    web = test_web(simple_site(4, 5), addresses=1)  # every host resolves to 127.0.0.1
    stats = crawl(crawl_config(web, tmp_path / "data", politeness={"rate": rate, "key_by_ip": True}))
    assert stats.queued == 0 and stats.politeness_violations == 0
    one_server = [dataclasses.replace(r, host="127.0.0.1") for r in web.log]
    assert len(one_server) == 4 * (1 + 5)
    assert politeness_violations(one_server, 1.0 / rate) == []


# --- robots.txt answered 503 with Retry-After ----------------------------------------------------------


def test_robots_503_retry_after_keeps_the_host_closed_until_then(test_web: TestWebFactory,
                                                                 tmp_path: Path) -> None:
    """robots.txt 503 + Retry-After: nothing (no page, no robots retry) reaches the host before the
    Retry-After time; then robots.txt is fetched again and the host is crawled."""
    web = test_web(simple_site(1, 4))
    (host,) = web.site.hosts
    web.respond(host, "/robots.txt", 503, headers={"Retry-After": "2"}, times=1)
    cfg = crawl_config(web, tmp_path / "data", robots={"retry_base": 0.2},
                       politeness={"rate": 10.0, "quarantine_base": 0.2})
    stats = crawl(cfg)
    assert stats.queued == 0
    log = requests_to(web, host)
    assert [(r.target, r.status) for r in log[:2]] == [("/robots.txt", 503), ("/robots.txt", 200)]
    assert log[1].start - log[0].end >= 2.0 - CLOCK_SLACK, log[1].start - log[0].end
    assert log[1].start - log[0].end < 2.0 + LATE
    assert {r.url for r in log[2:] if r.status == 200} == set(host_urls(web, host))


# --- robots.txt redirected to another host -------------------------------------------------------------


def test_robots_redirect_hops_respect_each_hosts_interval(test_web: TestWebFactory, tmp_path: Path) -> None:
    """robots.txt fetches count as requests to the host that serves them, redirect hops included: many
    hosts whose robots.txt redirects to one central host (www -> apex, a CDN) must not burst it, and a
    redirect to another path of the same host must wait that host's interval."""
    rate = 10.0
    web = test_web(simple_site(6, 3))
    central, same, *others = web.site.hosts
    web.redirect(same, "/robots.txt", f"{web.base_url(same)}/moved/robots.txt")  # a 404 there: allow all
    for host in others:
        web.redirect(host, "/robots.txt", f"{web.base_url(central)}/robots.txt")
    stats = crawl(crawl_config(web, tmp_path / "data", politeness={"rate": rate}))
    assert stats.queued == 0
    robots_at_central = [r for r in requests_to(web, central) if r.target == "/robots.txt"]
    assert len(robots_at_central) == 1 + len(others)
    assert [r.target for r in requests_to(web, same)][:2] == ["/robots.txt", "/moved/robots.txt"]
    assert politeness_violations(web.log, 1.0 / rate) == []
