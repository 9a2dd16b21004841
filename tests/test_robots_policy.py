"""RobotsPolicy: the per-host robots.txt state machine (sans-IO, no sockets, time passed in)."""

from __future__ import annotations

import random

import pytest

from polecat.config import RobotsConfig
from polecat.errors import DnsError, FetchTimeout
from polecat.frontier.robots import MAX_HOSTS, Closed, Fetch, Ready, RobotsPolicy
from polecat.parse.robots import RobotsRules

UA = "polecat/0.1 (+https://example.org/bot)"
CFG = RobotsConfig(cache_ttl=3600.0, retry_base=60.0, retry_cap=600.0, max_unreachable_age=30 * 86400.0)
H = "a.test"


def policy(cfg: RobotsConfig = CFG) -> RobotsPolicy:
    return RobotsPolicy(cfg, UA, rng=random.Random(7))


def ready(p: RobotsPolicy, now: float) -> Ready:
    d = p.lookup(H, now)
    assert isinstance(d, Ready), d
    return d


def test_unknown_host_must_fetch_first() -> None:
    p = policy()
    assert p.lookup(H, 0.0) == Fetch()
    assert p.host_state(H) == "unknown"


def test_2xx_parses_and_serves_until_ttl_then_refresh_due() -> None:
    p = policy()
    p.record_response(H, 200, b"User-agent: *\nDisallow: /private\n", 100.0)
    d = ready(p, 100.0 + 3599)
    assert not d.refresh_due
    assert not d.rules.allowed("http://a.test/private/x") and d.rules.allowed("http://a.test/x")
    d = ready(p, 100.0 + 3600)
    assert d.refresh_due and not d.rules.allowed("http://a.test/private/x")
    assert p.host_state(H) == "ok"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451, 301, 308])
def test_4xx_and_exhausted_redirects_allow_all(status: int) -> None:
    p = policy()
    p.record_response(H, status, b"User-agent: *\nDisallow: /\n", 0.0)
    assert ready(p, 1.0).rules.allowed("http://a.test/anything")
    assert p.host_state(H) == "unavailable"


@pytest.mark.parametrize("status", [429, 500, 502, 503, 599, 101])
def test_429_5xx_fail_closed_then_retry(status: int) -> None:
    p = policy()
    p.record_response(H, status, b"", 0.0)
    d = p.lookup(H, 1.0)
    assert isinstance(d, Closed)
    assert 45.0 <= d.until <= 60.0  # retry_base with x0.75..1.0 jitter
    assert p.lookup(H, d.until) == Fetch()
    assert p.host_state(H) == "unreachable"


def test_backoff_doubles_to_cap() -> None:
    p = policy()
    now, delays = 0.0, []
    for _ in range(8):
        p.record_failure(H, now, FetchTimeout("t"))
        d = p.lookup(H, now)
        assert isinstance(d, Closed)
        delays.append(d.until - now)
        now = d.until
    for i, delay in enumerate(delays):
        nominal = min(600.0, 60.0 * 2**i)
        assert 0.75 * nominal <= delay <= nominal
    assert max(delays) <= 600.0


def test_retry_after_longer_than_backoff_wins_but_is_capped() -> None:
    p = policy()
    p.record_response(H, 503, b"", 0.0, retry_after=300.0)
    assert p.lookup(H, 0.0) == Closed(300.0)
    p.record_response("b.test", 429, b"", 0.0, retry_after=1e9)
    assert p.lookup("b.test", 0.0) == Closed(600.0)


def test_failed_refresh_closes_despite_cached_copy_and_success_reopens() -> None:
    p = policy()
    p.record_response(H, 200, b"User-agent: *\nDisallow: /x\n", 0.0)
    assert ready(p, 4000.0).refresh_due
    p.record_failure(H, 4000.0, DnsError("nx"))
    closed = p.lookup(H, 4001.0)
    assert isinstance(closed, Closed)
    assert p.lookup(H, closed.until) == Fetch()
    p.record_response(H, 404, b"", closed.until)
    d = ready(p, closed.until + 1)
    assert d.rules.allowed("http://a.test/x") and not d.refresh_due


def test_cached_copy_applies_again_after_long_unreachability() -> None:
    cfg = RobotsConfig(cache_ttl=3600.0, retry_base=60.0, retry_cap=600.0, max_unreachable_age=86400.0)
    p = policy(cfg)
    p.record_response(H, 200, b"User-agent: *\nDisallow: /x\n", 0.0)
    now = 5000.0
    while now < 5000.0 + 86400.0:
        p.record_response(H, 503, b"", now)
        d = p.lookup(H, now + 1)
        assert isinstance(d, Closed)
        now = d.until
    p.record_response(H, 503, b"", now)
    d = ready(p, now + 1)
    assert not d.rules.allowed("http://a.test/x") and d.rules.allowed("http://a.test/y")
    assert not d.refresh_due
    retry = p.lookup(H, now + 10_000)
    assert isinstance(retry, Ready) and retry.refresh_due


def test_never_fetched_host_stays_closed_after_long_unreachability() -> None:
    cfg = RobotsConfig(retry_base=60.0, retry_cap=600.0, max_unreachable_age=1000.0)
    p = policy(cfg)
    for now in range(0, 5000, 600):
        p.record_failure(H, float(now), ConnectionResetError())
    assert isinstance(p.lookup(H, 4801.0), Closed)


def test_body_capped_at_max_bytes_dropping_cut_line() -> None:
    cfg = RobotsConfig(max_bytes=512 * 1024)
    p = policy(cfg)
    head = b"User-agent: *\nDisallow: /early\n"
    filler = b"# " + b"x" * (cfg.max_bytes - len(head) - 20) + b"\n"
    tail = b"Disallow: /late-but-cut\nDisallow: /beyond\n"
    body = head + filler + tail + b"Disallow: /more\n" * 100_000  # ~2 MB
    assert len(body) > 2 * 1024 * 1024 - 500_000
    p.record_response(H, 200, body, 0.0)
    rules = ready(p, 1.0).rules
    assert not rules.allowed("http://a.test/early")
    assert rules.allowed("http://a.test/late-but-cut")  # the line straddling the cap is dropped
    assert rules.allowed("http://a.test/beyond")


def test_non_utf8_body_parses() -> None:
    p = policy()
    p.record_response(H, 200, b"User-agent: *\nDisallow: /\xff\xfe\nDisallow: /ok-to-block\n", 0.0)
    assert not ready(p, 0.0).rules.allowed("http://a.test/ok-to-block")


def test_stats_and_failure_rate() -> None:
    p = policy()
    p.record_response("a.test", 200, b"", 0.0)
    p.record_response("b.test", 404, b"", 0.0)
    p.record_response("c.test", 500, b"", 0.0)
    p.record_failure("d.test", 0.0, DnsError("nx"))
    s = p.stats()
    assert (s.fetches, s.ok, s.unavailable, s.unreachable) == (4, 1, 1, 2)
    assert s.failure_rate == 0.5
    assert s.errors == (("dns", 1),)
    assert [p.host_state(h) for h in ("a.test", "b.test", "c.test", "d.test", "e.test")] == [
        "ok", "unavailable", "unreachable", "unreachable", "unknown",
    ]


def test_fixed_rules_are_shared() -> None:
    p = policy()
    p.record_response("a.test", 404, b"", 0.0)
    p.record_response("b.test", 410, b"", 0.0)
    assert ready(p, 0.0).rules is RobotsRules.allow_all()


def test_restore_applies_an_earlier_answer_without_counting_a_fetch() -> None:
    p = policy()
    p.restore("h", 200, b"User-agent: *\nDisallow: /private/\n", 1000.0)
    p.restore("g", 404, b"", 1000.0)
    p.restore("f", 503, b"", 1000.0)  # not a usable answer: ignored
    d = p.lookup("h", 1000.0 + CFG.cache_ttl - 1)
    assert isinstance(d, Ready) and not d.refresh_due
    assert not d.rules.allowed("http://h/private/x") and d.rules.allowed("http://h/public")
    g = p.lookup("g", 1001.0)
    assert isinstance(g, Ready) and g.rules.allowed("http://g/anything")
    assert isinstance(p.lookup("f", 1001.0), Fetch)
    stale = p.lookup("h", 1000.0 + CFG.cache_ttl + 1)
    assert isinstance(stale, Ready) and stale.refresh_due
    assert p.stats().fetches == 0


def test_rule_8_memory_holds_the_bound_and_reads_dropped_answers_back() -> None:
    stored: dict[str, tuple[int, float, bytes]] = {}
    loads: list[str] = []

    def load(host: str) -> tuple[int, float, bytes] | None:
        loads.append(host)
        return stored.get(host)

    p = policy()
    p.set_loader(load)
    body = b"User-agent: *\nDisallow: /private\n"
    hosts = [f"h{i}.test" for i in range(MAX_HOSTS + 1000)]
    for i, host in enumerate(hosts):
        p.record_response(host, 200, body, 100.0)
        stored[host] = (200, 100.0, body)  # what the frontier keeps (robots_state.py rule 2)
        if i == MAX_HOSTS - 1:  # full, not yet past the bound
            ready_then = p.lookup(hosts[0], 100.0)  # asked again: the most recently asked now
    assert isinstance(ready_then, Ready)
    assert len(p._hosts) == MAX_HOSTS
    assert p.host_state(hosts[0]) == "ok" and p.host_state(hosts[1]) == "unknown"  # dropped: least recent
    assert not loads
    d = p.lookup(hosts[1], 200.0)  # read back, with its rules and its fetch time
    assert isinstance(d, Ready) and not d.rules.allowed("http://h1.test/private/x") and not d.refresh_due
    assert loads == [hosts[1]] and p.stats().fetches == len(hosts)  # a read-back is no fetch
    assert p.lookup("never.test", 200.0) == Fetch()
