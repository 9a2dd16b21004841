"""RobotsRules: group selection by product token, crawl-delay, sitemaps, fixed rule sets."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st
from protego import Protego

from polecat.parse.robots import RobotsRules, product_token
from polecat.parse.robots_match import normalize_path

UA = "polecat/0.1 (+https://example.org/bot)"


def test_product_token() -> None:
    assert product_token(UA) == "polecat"
    assert product_token("Foo-Bot_2/1.0") == "foo-bot_"
    assert product_token("  FooBot  ") == "foobot"


def test_own_group_beats_star() -> None:
    text = "User-agent: *\nDisallow: /\n\nUser-agent: POLECAT\nDisallow: /private\n"
    rules = RobotsRules(text, UA)
    assert rules.allowed("http://a.test/page")
    assert not rules.allowed("http://a.test/private/x")


def test_star_group_applies_when_not_named() -> None:
    rules = RobotsRules("User-agent: otherbot\nDisallow: /\nUser-agent: *\nDisallow: /tmp/\n", UA)
    assert rules.allowed("http://a.test/x")
    assert not rules.allowed("http://a.test/tmp/x")


def test_prefix_of_our_token_does_not_match() -> None:
    """protego alone would match ``User-agent: pole`` to ``polecat``; RFC 9309 wants the exact token."""
    rules = RobotsRules("User-agent: pole\nDisallow: /\n", UA)
    assert rules.allowed("http://a.test/x")


def test_unknown_line_does_not_end_group() -> None:
    text = "User-agent: polecat\nNoindex: /x\nUser-agent: otherbot\nDisallow: /\n"
    assert not RobotsRules(text, UA).allowed("http://a.test/")


def test_versioned_agent_value_matches() -> None:
    assert not RobotsRules("User-agent: polecat/2.0\nDisallow: /\n", UA).allowed("http://a.test/x")


def test_crawl_delay_and_sitemaps() -> None:
    text = (
        "Sitemap: http://a.test/s1.xml\nUser-agent: *\nCrawl-delay: 9\n"
        "User-agent: polecat\nCrawl-delay: 2.5\nDisallow: /x\nSitemap: http://a.test/s2.xml\n"
    )
    rules = RobotsRules(text, UA)
    assert rules.crawl_delay == 2.5
    assert rules.sitemaps == ("http://a.test/s1.xml", "http://a.test/s2.xml")


def test_no_applicable_group_still_collects_sitemaps() -> None:
    rules = RobotsRules("User-agent: otherbot\nDisallow: /\nSitemap: http://a.test/s.xml\n", UA)
    assert rules.allowed("http://a.test/anything")
    assert rules.crawl_delay is None
    assert rules.sitemaps == ("http://a.test/s.xml",)


def test_robots_txt_itself_always_allowed() -> None:
    assert RobotsRules("User-agent: *\nDisallow: /\n", UA).allowed("http://a.test/robots.txt")


def test_fixed_rule_sets() -> None:
    assert RobotsRules.allow_all().allowed("http://a.test/x")
    assert not RobotsRules.disallow_all().allowed("http://a.test/x")
    assert RobotsRules.disallow_all().crawl_delay is None


def test_parse_interns_small_files() -> None:
    text = "User-agent: *\nDisallow: /interned\n"
    assert RobotsRules.parse(text, UA) is RobotsRules.parse(text, "polecat/9")
    assert not RobotsRules.parse(text, UA).allowed("http://a.test/interned/1")


PATH_CHARS = st.characters(min_codepoint=33, max_codepoint=126)


@given(st.text(max_size=400), st.text(alphabet=PATH_CHARS, max_size=40))
def test_never_raises(text: str, path: str) -> None:
    """Any text parses and any path gets a bool answer."""
    rules = RobotsRules(text, UA)
    assert isinstance(rules.allowed("http://a.test/" + path), bool)


@given(st.lists(st.sampled_from(["/a", "/a/b", "/c", "/a*", "/*.php$", "/"]), max_size=5),
       st.sampled_from(["/a", "/a/b/c", "/c.php", "/d", "/"]))
def test_disallow_matches_longest_rule(disallows: list[str], path: str) -> None:
    """With only Disallow lines, a path is refused iff some pattern matches it (reference matcher)."""
    def matches(pattern: str, p: str) -> bool:
        rx = re.escape(pattern).replace(r"\*", ".*")
        rx = rx[:-2] + "$" if rx.endswith(r"\$") else rx
        return re.match(rx, p) is not None

    text = "User-agent: polecat\n" + "".join(f"Disallow: {d}\n" for d in disallows)
    expected = not any(matches(d, path) for d in disallows)
    assert RobotsRules(text, UA).allowed("http://a.test" + path) is expected


PATTERN_PIECES = st.sampled_from(["/", "a", "b", "/a", "/b/", "*", ".php", "?", "=", "%2F", "%61", "é", "-"])
PATTERNS = st.lists(PATTERN_PIECES, min_size=1, max_size=5).map("".join)
DOLLAR = st.sampled_from(["", "$"])
PATHS = st.lists(st.sampled_from(["/", "a", "b", "/a", "b/", ".php", "?", "=x", "%2F", "%61", "é", "-"]),
                 max_size=6).map(lambda parts: "/" + "".join(parts))


@given(st.lists(st.tuples(st.booleans(), PATTERNS, DOLLAR), max_size=6), PATHS)
def test_matcher_agrees_with_protego(rules: list[tuple[bool, str, str]], path: str) -> None:
    """Differential: our compiled matcher against protego's on the same single-group file."""
    text = "User-agent: *\n" + "".join(f"{'Allow' if a else 'Disallow'}: {p}{d}\n" for a, p, d in rules)
    url = "http://a.test" + path
    assert RobotsRules(text, UA).allowed(url) is Protego.parse(text).can_fetch(url, "polecat")


def test_hostile_wildcards_stay_linear() -> None:
    """A pattern that makes a backtracking regex explode (about 3000**12 steps here: longer than the
    universe has existed) costs microseconds with the linear scan. The bound is generous, so a loaded
    machine cannot break it, and still that many orders of magnitude below a backtracking match."""
    text = "User-agent: *\nDisallow: /*a*a*a*a*a*a*a*a*a*a*a*a*b$\n"
    rules = RobotsRules(text, UA)
    url = "http://a.test/" + "a" * 3000
    t = time.perf_counter()
    assert rules.allowed(url)
    assert time.perf_counter() - t < 10.0


def test_combined_groups_and_precedence() -> None:
    text = (
        "User-agent: polecat\nDisallow: /a\n\nUser-agent: other\nDisallow: /\n\n"
        "User-agent: POLECAT\nAllow: /a/b\nDisallow: /*.pdf$\n"
    )
    rules = RobotsRules(text, UA)
    assert not rules.allowed("http://a.test/a/x")
    assert rules.allowed("http://a.test/a/b/x")  # longer Allow wins
    assert not rules.allowed("http://a.test/x/file.pdf")
    assert rules.allowed("http://a.test/x/file.pdf?v=1")
    assert rules.allowed("http://a.test/elsewhere#frag")


def test_a_lone_surrogate_in_the_path_is_escaped_not_raised() -> None:
    # Found by tests/test_fuzz_hostile.py: urllib's quote raised UnicodeEncodeError on it.
    assert normalize_path("/\ud800") == "/%ED%A0%80"
    assert RobotsRules("USERAGENT:*\rDISALOW:0", UA).allowed("http://h.test/\ud800") is True
