"""robots.txt matching is bounded per URL whatever the rules: hostile wildcard sets are indexed and
capped (fail closed, counted), and the indexed matcher agrees with a plain scan of every rule.

The bounds are asserted as counts of the work done (wildcard rules tried a URL, bytes parsed), which a
loaded machine cannot change; the times are benchmarks/README.md's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat import Crawler
from polecat.config import RobotsConfig
from polecat.frontier.robots import Ready, RobotsPolicy
from polecat.parse import robots_match
from polecat.parse.robots import RobotsRules
from polecat.parse.robots_match import INDEX_FROM, MAX_TRIES, RuleMatcher
from polecat.testing.hostile_pages import ROBOTS
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config


class Tries:
    """Counts the wildcard rules tried for each path (``_Wildcard.match`` calls between two paths)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.per_path: list[int] = []
        match, allowed_path = robots_match._Wildcard.match, RuleMatcher.allowed_path

        def counted_match(wildcard: object, path: str) -> bool:
            self.per_path[-1] += 1
            return match(wildcard, path)  # type: ignore[arg-type]

        def counted_allowed(matcher: RuleMatcher, path: str) -> bool:
            self.per_path.append(0)
            return allowed_path(matcher, path)

        monkeypatch.setattr(robots_match._Wildcard, "match", counted_match)
        monkeypatch.setattr(RuleMatcher, "allowed_path", counted_allowed)


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_a_512k_hostile_robots_txt_costs_little_per_url(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Unbounded, 25,000 rules "Disallow: /*q<n>*z" cost 7-13 ms per URL (every rule tried): a page of
    # 5,000 links into the host held the loop for a minute.
    rules = RobotsRules(ROBOTS[name](512 * 1024).decode(), "polecat")
    urls = [f"http://h.test/q{i}/some/ordinary/path?id={i}" for i in range(500)]
    tries = Tries(monkeypatch)
    verdicts = [rules.allowed(u) for u in urls]
    assert len(tries.per_path) == len(urls)
    assert max(tries.per_path) <= MAX_TRIES, max(tries.per_path)
    assert all(verdicts)  # none of the rules matches these paths, and none is over the bound
    assert not rules.too_complex


def test_a_path_past_the_bound_is_disallowed_and_counted() -> None:
    # Every rule shares the only 3-character piece it has: a path holding it would try them all.
    rules = [(False, f"/*abc*{chr(97 + i % 26)}{chr(97 + i // 26)}") for i in range(2 * MAX_TRIES)]
    matcher = RuleMatcher(rules)
    assert matcher.allowed_path("/zzz") and matcher.exhausted == 0
    assert not matcher.allowed_path("/abc/other")
    assert matcher.exhausted == 1 and not matcher.too_complex


def test_urls_past_the_bound_are_reported_by_the_policy() -> None:
    text = "User-agent: *\n" + "".join(f"Disallow: /*abc*{chr(97 + i % 26)}{chr(97 + i // 26)}\n"
                                       for i in range(2 * MAX_TRIES))
    policy = RobotsPolicy(RobotsConfig(), "polecat")
    for host in ("a.test", "b.test"):  # only a.test is asked below
        policy.record_response(host, 200, text.encode(), 0.0)
    decision = policy.lookup("a.test", 0.0)
    assert isinstance(decision, Ready)
    assert decision.rules.allowed("http://a.test/zzz") and not decision.rules.allowed("http://a.test/abc")
    assert policy.stats().over_bound == 1 and policy.stats().too_complex == 0


def test_rules_too_short_to_index_make_the_host_too_complex_and_reported() -> None:
    text = "User-agent: *\n" + "".join(f"Disallow: /*{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}*"
                                       f"{chr(97 + i // 676 % 26)}\n" for i in range(MAX_TRIES + 50))
    policy = RobotsPolicy(RobotsConfig(), "polecat")
    policy.record_response("h.test", 200, text.encode(), 0.0)
    assert policy.stats().too_complex == 1
    assert not RobotsRules(text, "polecat").allowed("http://h.test/0")


_PIECE = st.text(alphabet="abc/", min_size=0, max_size=5)
_PATTERN = st.builds(lambda parts, end: "/" + "*".join(parts) + end,
                     st.lists(_PIECE, min_size=1, max_size=4), st.sampled_from(["", "$"]))
_RULE = st.tuples(st.booleans(), _PATTERN)


@settings(max_examples=75, deadline=None)
@given(st.lists(_RULE, min_size=INDEX_FROM, max_size=3 * INDEX_FROM),
       st.lists(st.text(alphabet="abc/", max_size=20).map(lambda p: "/" + p), min_size=1, max_size=20))
def test_indexed_matching_agrees_with_a_scan_of_every_rule(rules: list[tuple[bool, str]],
                                                           paths: list[str]) -> None:
    indexed = RuleMatcher(rules)
    saved = robots_match.INDEX_FROM
    robots_match.INDEX_FROM = 10**9
    try:
        scan = RuleMatcher(rules)
    finally:
        robots_match.INDEX_FROM = saved
    for path in paths:
        before = indexed.exhausted
        verdict = indexed.allowed_path(path)
        if indexed.exhausted == before and not indexed.too_complex:
            assert verdict == scan.allowed_path(path), path
        else:
            assert verdict is False


@pytest.mark.parametrize("name", sorted(ROBOTS))
def test_a_10_mib_robots_txt_of_100k_rules_is_cut_at_the_cap(name: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    body = ROBOTS[name](10 * 2**20)
    assert body.count(b"\n") > 100_000
    parsed: list[int] = []
    parse = RobotsRules.parse

    def measured(text: str, token: str) -> RobotsRules:
        parsed.append(len(text))
        return parse(text, token)

    monkeypatch.setattr(RobotsRules, "parse", measured)
    policy = RobotsPolicy(RobotsConfig(), "polecat")
    policy.record_response("h.test", 200, body, 0.0)
    assert len(parsed) == 1 and RobotsConfig().max_bytes - 200 < parsed[0] <= RobotsConfig().max_bytes
    assert policy.host_state("h.test") == "ok" and policy.stats().too_complex == 0


def test_a_crawl_meeting_hostile_robots_rules_keeps_serving_other_hosts(
        test_web: TestWebFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: 25,000 wildcard rules and a page of 5,000 links they disallow. Unbounded, each
    lease of that host checked up to 256 URLs at ~7 ms each (every rule tried), holding the loop ~1 s a
    lease: the other host got one request a second or so. Bounded, no URL tries more than MAX_TRIES
    rules, and the other host is crawled whole."""
    web = test_web(SiteSpec(hosts=2, pages_per_host=40, seed=4))
    web.set_robots("h01.test", body=ROBOTS["wildcards"](512 * 1024).decode())
    web.respond("h01.test", "/", 200, headers={"Content-Type": "text/html"},
                body="".join(f'<a href="/q{i}z">x</a>' for i in range(5000)).encode())
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 20.0})
    tries = Tries(monkeypatch)

    async def main() -> None:
        async with Crawler(cfg) as crawler:
            await asyncio.wait_for(crawler.run(), 120)

    asyncio.run(main())
    assert not [r for r in web.log if r.host == "h01.test" and r.target.startswith("/q")]
    h02 = {r.url for r in web.log if r.host == "h02.test" and r.target != "/robots.txt"}
    assert h02 == {u for u in web.ground_truth("any") if "//h02.test" in u}
    assert len(tries.per_path) >= 5000 and max(tries.per_path) <= MAX_TRIES, max(tries.per_path)
