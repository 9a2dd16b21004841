"""Fail fast and say why: a run against dead hosts ends, names them, and exits with a code a script uses."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from polecat.node.crawler import Crawler
from polecat.node.verdict import EXIT_NOTHING_FETCHED, GAVE_UP, QUEUE_EMPTY, fix_for
from polecat.testing.dns import LocalDnsServer
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config
from tests.test_cli import polecat


@pytest.mark.slow
def test_unresolvable_seed_ends_in_a_minute_with_cause(dns_server: LocalDnsServer, tmp_path: Path) -> None:
    started = time.monotonic()
    run = polecat("crawl", "http://nowhere.test/", "--data", str(tmp_path / "d"),
                  "--dns-server", dns_server.address, timeout=90)
    took = time.monotonic() - started
    assert run.returncode == EXIT_NOTHING_FETCHED, run.stderr
    assert took < 60, took
    assert "gave up nowhere.test" in run.stdout and "ended: every host left was given up" in run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("polecat: nothing could be fetched: nowhere.test: gave up after 3 attempts (dns:")
    assert "--dns-server" in last


def test_robots_503_is_given_up_and_reported(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=3, seed=4))
    web.set_robots("h01.test", 503)
    fast = tmp_path / "fast.toml"
    fast.write_text("[politeness]\ngive_up_backoff = 0.2\n")
    run = polecat("crawl", *web.seeds, "--data", str(tmp_path / "d"), "--rate", "20", "--config", str(fast),
                  "--dns-server", web.dns_address, "--allow-private", timeout=60)
    assert run.returncode == 0, run.stderr  # h02 was crawled: something was fetched
    assert "gave up h01.test" in run.stdout and "robots.txt answered 503" in run.stdout, run.stdout
    robots_requests = [r for r in web.log if r.host.startswith("h01.test") and r.target == "/robots.txt"]
    assert len(robots_requests) == 3


def test_loopback_without_allow_private_says_the_fix(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=2, seed=1))
    run = polecat("crawl", *web.seeds, "--data", str(tmp_path / "d"), "--dns-server", web.dns_address)
    assert run.returncode == EXIT_NOTHING_FETCHED
    assert web.log == []
    last = run.stderr.splitlines()[-1]
    assert "127.0.0.1 is a loopback address; add --allow-private" in last
    assert last.count("is a loopback address") == 1, last  # the cause is said once


def test_library_run_carries_the_verdict(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=2, seed=1))

    async def go(**over: object) -> tuple[str, str, bool]:
        async with Crawler(crawl_config(web, tmp_path / "d", **over)) as crawler:
            stats = await crawler.run()
        return stats.ended, stats.cause, stats.fetched_nothing

    ended, cause, nothing = asyncio.run(go(dns={"allow_private": False}, politeness={"give_up_after": 3}))
    assert (ended, nothing) == (GAVE_UP, True) and "--allow-private" in cause
    ended, cause, nothing = asyncio.run(go())
    assert (ended, cause, nothing) == (QUEUE_EMPTY, "", False)


def test_hanging_robots_is_given_up(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=2, seed=3))
    web.set_robots("h01.test", 200, delay=30)  # never answers within the timeouts below
    fast = tmp_path / "fast.toml"
    fast.write_text("[politeness]\ngive_up_backoff = 0.2\n[fetch]\nfirst_byte_timeout = 0.5\n"
                    "total_timeout = 1.0\n")
    started = time.monotonic()
    run = polecat("crawl", *web.seeds, "--data", str(tmp_path / "d"), "--config", str(fast),
                  "--dns-server", web.dns_address, "--allow-private", timeout=60)
    assert run.returncode == EXIT_NOTHING_FETCHED, run.stderr
    assert time.monotonic() - started < 30
    assert "gave up after 3 attempts (timeout:" in run.stderr.splitlines()[-1]


def test_robots_over_tls_to_a_plain_http_port_is_given_up(test_web: TestWebFactory, tmp_path: Path) -> None:
    """A TLS error is not retryable, but an unread robots.txt keeps the host closed: each attempt is a
    strike, so the run ends instead of asking for the robots.txt for ever."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=2, seed=3))
    seed = web.seeds[0].replace("http://", "https://", 1)
    fast = tmp_path / "fast.toml"
    fast.write_text("[politeness]\ngive_up_backoff = 0.2\n")
    started = time.monotonic()
    run = polecat("crawl", seed, "--data", str(tmp_path / "d"), "--config", str(fast),
                  "--dns-server", web.dns_address, "--allow-private", timeout=60)
    assert run.returncode == EXIT_NOTHING_FETCHED, run.stderr
    assert time.monotonic() - started < 30
    last = run.stderr.splitlines()[-1]
    assert "gave up after 3 attempts (tls: https://" in last and "try an http:// URL" in last, last
    assert len([r for r in web.log if r.target == "/robots.txt"]) <= 3  # the TLS hello is all it saw


def test_the_fix_follows_the_kind_the_reason_starts_with() -> None:
    def fix(reason: str) -> str:
        return fix_for(f"gave up after 3 attempts ({reason})")

    assert "certificate" in fix("tls: https://a.test/: connect: TLS failed: [SSL: CERTIFICATE_VERIFY_FAILED]")
    assert "http:// URL" in fix("tls: https://a.test/: connect: TLS failed: [SSL: WRONG_VERSION_NUMBER] x")
    assert "did not answer in time" in fix("timeout: http://a.test/: connect: timed out (connect)")
    assert "connection failed" in fix("connect: http://a.test/: connect: refused")
    assert "check --proxy" in fix("connect: proxy http://127.0.0.3:9: cannot connect: [Errno 111] refused")
    assert "check --proxy" in fix("robots.txt: timeout: proxy http://p:3128: no connection within 5 s")
    assert "--dns-server" in fix("dns: a.test: NXDOMAIN")
    assert "refuses crawlers" in fix("robots.txt answered 503")
    assert fix("http_500") == ""
