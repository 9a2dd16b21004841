"""URL canonicalization: rules, equivalent spellings, properties, and the WHATWG resolution data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ada_url
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.config import config_from_mapping
from polecat.dedup.canon import Canonicalizer, CanonStats, url_fingerprint
from polecat.errors import ConfigError
from polecat.hosts import host_key

URLTESTDATA = Path("/work/shared/conformance/urltestdata.json")
if not URLTESTDATA.exists():
    URLTESTDATA = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "urltestdata.json"

canon = Canonicalizer()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://Example.COM/", "http://example.com/"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/a/%2e%2E/c", "http://example.com/c"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/%7euser/%41", "http://example.com/~user/A"),
        ("http://example.com/a%2fb%3a", "http://example.com/a%2Fb%3A"),
        ("http://example.com/?q=%7e%2f", "http://example.com/?q=~%2F"),
        ("http://example.com/%zz%4", "http://example.com/%zz%4"),
        ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
        ("http://example.com/?a=2&b=0&a=1", "http://example.com/?a=2&a=1&b=0"),
        ("http://example.com/?", "http://example.com/"),
        ("http://example.com/?&&", "http://example.com/"),
        ("http://example.com/?a=1&&b=2&", "http://example.com/?a=1&b=2"),
        ("http://example.com/?utm_source=x&UTM_Medium=y&gclid=1&fbclid=2", "http://example.com/"),
        ("http://example.com/?id=3&utm_campaign=z", "http://example.com/?id=3"),
        ("http://example.com/?utm%5Fsource=x&id=3", "http://example.com/?id=3"),
        ("http://example.com/?gclidx=1", "http://example.com/?gclidx=1"),
        ("http://Ex\u00c4mple.com/", "http://xn--exmple-cua.com/"),
        ("http://[::1]:80/", "http://[::1]/"),
        ("http://u:p@Example.com:8080/x", "http://u:p@example.com:8080/x"),
    ],
)
def test_rules(url: str, expected: str) -> None:
    assert canon.canonicalize(url) == expected


@pytest.mark.parametrize(
    "url",
    ["mailto:a@example.com", "javascript:void(0)", "ftp://example.com/", "http://", "not a url", "\ud800"],
)
def test_rejects_non_http_and_unparsable(url: str) -> None:
    assert canon.canonicalize(url) is None


def test_resolves_against_base() -> None:
    base = "https://example.com/dir/page.html?x=1"
    assert canon.canonicalize("../other?utm_source=a#top", base) == "https://example.com/other"
    assert canon.canonicalize("?b=1&a=2", base) == "https://example.com/dir/page.html?a=2&b=1"
    assert canon.canonicalize("//cdn.example.org/x", base) == "https://cdn.example.org/x"
    assert canon.canonicalize("x", "not a base") is None


def test_configurable_tracking_params() -> None:
    custom = Canonicalizer(("sid", "ref_*"))
    assert (
        custom.canonicalize("http://a.test/?SID=1&ref_a=2&utm_source=3&id=4")
        == "http://a.test/?id=4&utm_source=3"
    )
    assert Canonicalizer(()).canonicalize("http://a.test/?utm_source=3") == "http://a.test/?utm_source=3"


@pytest.mark.parametrize("pattern", ["*", "a*b", "*id", ""])
def test_rejects_unsupported_patterns(pattern: str) -> None:
    with pytest.raises(ConfigError, match="tracking_params"):
        Canonicalizer((pattern,))


def test_stats_count_collapsed_and_rejected() -> None:
    c = Canonicalizer()
    c.canonicalize("http://a.test/x")  # already canonical
    c.canonicalize("http://a.test/x#frag")  # fragment: collapsed
    c.canonicalize("http://a.test/x?utm_source=1")  # tracking: collapsed
    c.canonicalize("HTTP://A.TEST/x")  # the WHATWG parser lowercases: not counted as collapsed
    c.canonicalize("mailto:x@a.test")
    assert c.stats() == CanonStats(total=5, collapsed=2, rejected=1)


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://example.com/a", "example.com"),
        ("http://example.com:8080/a?b", "example.com:8080"),
        ("https://u:p@example.com/", "example.com"),
        ("http://[::1]:8443/", "[::1]:8443"),
    ],
)
def test_host_key(url: str, key: str) -> None:
    assert host_key(url) == key


def test_url_fingerprint_is_16_bytes_and_distinguishes() -> None:
    a, b = url_fingerprint("http://a.test/1"), url_fingerprint("http://a.test/2")
    assert len(a) == len(b) == 16
    assert a != b
    assert a == url_fingerprint("http://a.test/1")


# --- properties ---------------------------------------------------------------------------------------

_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
_hosts = st.lists(_label, min_size=1, max_size=3).map(lambda labels: ".".join([*labels, "test"]))
_seg_chars = "abcXYZ019-._~!$&'()*+,;=:@%/?#[]\\ \u00e9\u4e2d"
_segments = st.text(alphabet=_seg_chars, max_size=8)
_keys = st.text(alphabet="abcdeUTM_%2F5f", min_size=1, max_size=8)
_values = st.text(alphabet="ab1%2f=~ +é", max_size=6)


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "hTTps"]))
    host = draw(_hosts)
    port = draw(st.sampled_from(["", ":80", ":443", ":8080"]))
    path = "/".join(draw(st.lists(_segments, max_size=4)))
    params = draw(st.lists(st.tuples(_keys, _values), max_size=4))
    query = "&".join(f"{k}={v}" for k, v in params)
    frag = draw(st.sampled_from(["", "#", "#x"]))
    return f"{scheme}://{host}{port}/{path}" + (f"?{query}" if params or draw(st.booleans()) else "") + frag


@settings(max_examples=400, deadline=None)
@given(urls() | st.text(max_size=40).map(lambda s: "http://h.test/" + s))
def test_idempotent_and_host_preserved(url: str) -> None:
    once = canon.canonicalize(url)
    if once is None:
        return
    assert canon.canonicalize(once) == once
    assert ada_url.URL(once).host == ada_url.URL(url).host
    assert host_key(once) == ada_url.URL(url).host


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["http", "https"]),
    _hosts,
    st.lists(st.text(alphabet="abc~-._", min_size=1, max_size=4), min_size=1, max_size=4),
    st.dictionaries(st.text(alphabet="abcd", min_size=1, max_size=3), st.text(alphabet="xy~", max_size=3)),
    st.randoms(use_true_random=False),
)
def test_equivalent_spellings_meet(
    scheme: str, host: str, segments: list[str], params: dict[str, str], rnd: Any
) -> None:
    """Case of scheme and host, default port, escapes of unreserved characters and their hex case,
    dot segments, fragment, tracking parameters and the order of distinct keys do not matter."""
    plain = (
        f"{scheme}://{host}/"
        + "/".join(segments)
        + "".join(("?" if i == 0 else "&") + f"{k}={v}" for i, (k, v) in enumerate(sorted(params.items())))
    )

    def escape(text: str) -> str:
        hexcase = str.upper if rnd.random() < 0.5 else str.lower
        return "".join(hexcase(f"%{ord(c):02x}") if rnd.random() < 0.5 else c for c in text)

    items = [f"{escape(k)}={escape(v)}" for k, v in params.items()]
    rnd.shuffle(items)
    items.insert(rnd.randrange(len(items) + 1), "utm_source=feed")
    port = {"http": ":80", "https": ":443"}[scheme] if rnd.random() < 0.5 else ""
    path = "/".join(escape(s) for s in segments)
    variant = (
        f"{scheme.upper()}://{host.upper()}{port}/x/../{path}/./?" + "&".join(items) + "#frag"
    ).replace("/./?", "?")
    assert canon.canonicalize(variant) == canon.canonicalize(plain)


def _whatwg_cases() -> list[dict[str, Any]]:
    data = json.loads(URLTESTDATA.read_text(encoding="utf-8"))
    return [
        case
        for case in data
        if isinstance(case, dict) and not case.get("failure") and case.get("protocol") in ("http:", "https:")
    ]


def test_whatwg_resolution_keeps_the_expected_host() -> None:
    cases = _whatwg_cases()
    assert len(cases) > 200
    wrong = []
    for case in cases:
        got = canon.canonicalize(case["input"], case["base"])
        if got is None or host_key(got) != case["host"] or not got.startswith(case["protocol"]):
            wrong.append((case["input"], case["base"], got, case["href"]))
    assert wrong == []


def test_canonicalize_links_memo_matches_plain_and_counts() -> None:
    plain, memo = Canonicalizer(), Canonicalizer()
    bases = ["http://a.test/dir/page1.html?q=1", "http://a.test/dir/page2.html", "http://a.test/other/x"]
    hrefs = ["x.html", "../up?utm_source=z&b=2&a=1#f", "/abs", "?only=query", "#frag", "",
             "HTTP://A.TEST:80/./y", "https://b.test/z#t", "javascript:void(0)", "http://[bad"]
    for base in bases * 2:
        expected = [c for h in hrefs if (c := plain.canonicalize(h, base)) is not None]
        assert memo.canonicalize_links(hrefs, base) == expected
    assert memo.stats() == plain.stats()


def test_query_keys_sorted_by_default_counted_and_kept_in_order_where_asked() -> None:
    canon = Canonicalizer()
    a = canon.canonicalize("http://shop.example/list?sort=new&lang=en")
    b = canon.canonicalize("http://shop.example/list?lang=en&sort=new")
    assert a == b == "http://shop.example/list?lang=en&sort=new"
    assert canon.stats().collapsed == 1  # the reordered spelling was rewritten
    keep = Canonicalizer(keep_query_order=("*.example",))
    assert keep.canonicalize("http://shop.example/list?sort=new&lang=en") == \
        "http://shop.example/list?sort=new&lang=en"
    assert keep.canonicalize("http://other.test/list?sort=new&lang=en") == \
        "http://other.test/list?lang=en&sort=new"
    assert keep.stats().collapsed == 1


def test_keep_query_order_patterns_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"dedup\.keep_query_order"):
        config_from_mapping({"dedup": {"keep_query_order": ["not a host"]}})


_BASES = ["http://a.test/dir/page1.html?q=1", "http://a.test/dir/page2.html", "http://a.test/other/x",
          "https://u:p@a.test:8443/dir/", "http://a.test", "http://b.test/dir/p#frag/x", "ftp://a.test/dir/",
          "foo:opaque", "http://[::1]:8080/?q/r#f", ""]
_PIECES = ["x", "/", "//", "\\", ".", "..", "#", "?", "%2e", "%41", "&", "=", "a", "b.test", "http:",
           "https:", "HTTP://", "http://", "https://", "\t", "\n", " ", "\ud800", "\u00e9", ":", "@",
           "utm_source=1"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=8).map("".join), max_size=12),
       st.lists(st.sampled_from(_BASES), min_size=1, max_size=4))
def test_canonicalize_links_memo_is_canonicalize_href_by_href(hrefs: list[str], bases: list[str]) -> None:
    """The memo's keys (fragment dropped, base cut to its authority or directory) never change a result
    nor a counter: pages of one site, in any order, give what canonicalize gives href by href."""
    plain, memo = Canonicalizer(), Canonicalizer()
    for base in bases:
        expected = [c for h in hrefs if (c := plain.canonicalize(h, base)) is not None]
        assert memo.canonicalize_links(hrefs, base) == expected
    assert memo.stats() == plain.stats()


def test_canonicalize_links_shares_root_relative_and_fragment_spellings_across_pages() -> None:
    canon = Canonicalizer()
    for page in range(5):  # a base that is not its own serialization: every href goes through the memo
        canon.canonicalize_links(["/a.html", "/a.html#top", "http://b.test/x#y", "#z"],
                                 f"http://A.test/d{page}/p.html")
    # /a.html and its #top spelling: one entry for the site; b.test/x: one; #z: one per page
    assert len(canon._memo) == 2 + 5


def test_simple_hrefs_on_a_serialized_base_skip_the_memo() -> None:
    canon, plain = Canonicalizer(), Canonicalizer()
    hrefs = ["/a.html", "/a.html#top", "http://B.test:80/x#y", "../c/./d?b=2&a=1&utm_source=x", "e%7e/",
             "#z", "/f%2e/", "g:h", "//i.test/", "?j", "k l"]
    for page in range(5):
        base = f"http://a.test/d{page}/p.html"
        expected = [c for h in hrefs if (c := plain.canonicalize(h, base)) is not None]
        assert canon.canonicalize_links(hrefs, base) == expected
    assert canon.stats() == plain.stats()
    # memoized as before: "#z" (one per page), "/f%2e/" (a %2e could be a dot segment), "//i.test/"
    # (scheme-relative) and "k l" (one per page); "g:h" and "?j" are not
    assert sorted(canon._memo) == sorted([*((f"http://a.test/d{p}/p.html", "") for p in range(5)),
                                          ("http://a.test", "/f%2e/"), ("http://a.test", "//i.test/"),
                                          *((f"http://a.test/d{p}/", "k l") for p in range(5))])


_NEAR_SIMPLE = ["a", "B", "0", "-", "_", "~", ".", "..", "/", "./", "../", "/..", "/.", "//", "%41", "%2D",
                  "%2f", "%7E", "%2e", "%e9", "%", "%4", ":", "@", "!", "$", "&", "'", "(", "*", "+", ",",
                  ";", "=", "?", "?a=1", "&b=", "&utm_source=z", "&gclid=", "#", "#f", " ", "\\", "|", "^",
                  "{", "`", '"', "<", "\t", "\u00e9"]
_NEAR_AUTHORITIES = ["http://a.test", "https://a.test", "http://A.TEST:80", "https://a.test:443", "http://a.test:8080",
                "http://u:p@a.test", "http://1.2.3", "http://0x7f.1", "http://xn--pple-43d.com",
                "http://xn--abc.test", "http://a..test", "http://", "http:///a.test", "http://a\\b",
                "http://a.test:99999", "http://[::1]", "http://a b", "http://a%41.test", "http://a.test:"]
SIMPLE_BASES = ["http://a.test/", "http://a.test/d/e/p.html", "https://a.test:8443/d/?q=1#f",
                 "http://u:p@a.test/d/", "http://[::1]/x/y", "http://a.test/d%7e/.x/", "http://a.test/d/p?x=/y/z"]

NEAR_SIMPLE_HREFS = st.lists(
    st.tuples(st.sampled_from(["", "/", *_NEAR_AUTHORITIES]),
              st.lists(st.sampled_from(_NEAR_SIMPLE), max_size=8))
    .map(lambda t: t[0] + ("/" if t[0] not in ("", "/") else "") + "".join(t[1])), max_size=10)
"""Pages' hrefs near the simple ones (Canonicalizer._plain): dot segments, escapes, authorities ada
rewrites or refuses, characters it would encode or strip."""


@settings(max_examples=500, deadline=None)
@given(NEAR_SIMPLE_HREFS, st.lists(st.sampled_from(SIMPLE_BASES), min_size=1, max_size=3))
def test_plain_serialization_is_the_whatwg_parsers(hrefs: list[str], bases: list[str]) -> None:
    """Hrefs near the simple ones (dot segments, escapes, authorities ada rewrites or refuses) give what
    the WHATWG parser gives, href by href, with the same counters."""
    plain, links = Canonicalizer(), Canonicalizer()
    for base in bases:
        expected = [c for h in hrefs if (c := plain.canonicalize(h, base)) is not None]
        assert links.canonicalize_links(hrefs, base) == expected
    assert links.stats() == plain.stats()
