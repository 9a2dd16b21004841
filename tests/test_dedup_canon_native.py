"""The native canonicalization kernel (polecat/dedup/_canon.c) against canon.py's Python code, its
specification: the same results, memo entries and counters on generated hostile input."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.dedup import canon as canon_module
from polecat.dedup.canon import Canonicalizer
from tests.test_dedup_canon import NEAR_SIMPLE_HREFS, SIMPLE_BASES

needs_kernel = pytest.mark.skipif(canon_module._KERNEL is None,
                                  reason="the native kernel is not built or POLECAT_PURE_PYTHON=1")


def test_kernel_is_bound_when_required() -> None:
    """In CI (POLECAT_REQUIRE_NATIVE) the kernel must not only import (tests/test_native.py) but bind to
    ada: an ada_url whose C API moved would otherwise skip every test below."""
    if os.environ.get("POLECAT_REQUIRE_NATIVE") and os.environ.get("POLECAT_PURE_PYTHON") != "1":
        assert canon_module._KERNEL is not None
    assert (canon_module._KERNEL is None) == (Canonicalizer()._kernel is None)


def pure(*args: tuple[str, ...]) -> Canonicalizer:
    """A Canonicalizer that runs canon.py's Python code."""
    with mock.patch.object(canon_module, "_KERNEL", None):
        made = Canonicalizer(*args)
    assert made._kernel is None
    return made


def native(*args: tuple[str, ...]) -> Canonicalizer:
    made = Canonicalizer(*args)
    assert made._kernel is not None
    return made


def assert_same(fast: Canonicalizer, slow: Canonicalizer) -> None:
    assert fast.stats() == slow.stats()
    assert fast._memo == slow._memo
    assert list(fast._memo) == list(slow._memo)  # the same insertions, in the same order


_ESCAPES = ["%", "%%", "%4", "%41", "%4g", "%g4", "%e9", "%E9", "%2f", "%2F", "%7e", "%7E", "%5f", "%5F",
            "%26", "%3d", "%23", "%3F", "%00", "%25", "%2e", "%2E%2e", "%ff", "%C3%A9"]
_PIECES = ["x", "/", "//", "\\", ".", "..", "#", "?", "&", "=", "a", "b.test", ":", "@", ";", "http:",
           "https:", "HTTP://", "http://", "https://", "hTtP://", "ftp://", "mailto:", "javascript:",
           "\t", "\n", "\r", " ", "\x00", "\x01", "\x1f", "\x7f", "\ud800", "\udfff", "\u00e9", "\u4e2d",
           "\u0130", "\u212a", "\U0001f600", "xn--pple-43d.com", "[::1]", "[fe80::1%25eth0]", "[1:2",
           "1.2.3.4.5", "0x7f.1", ":0", ":80", ":443", ":8080", ":65535", ":65536", ":-1", "u:p@", "@@",
           "utm_source=1", "UTM_Medium=2", "Utm_x", "utm_", "gclid=3", "GCLID", "fbclid=", "gclidx=1",
           "sid=4", "SID", "ref_a=5", "k=6", "K=7", "b=1", "a=2", "a", *_ESCAPES]
_HREFS = st.lists(st.sampled_from(_PIECES), max_size=10).map("".join) | st.text(max_size=20)
_BASES = ["http://a.test/dir/page1.html?q=1", "http://a.test/dir/page2.html", "http://a.test/other/x",
          "https://u:p@a.test:8443/dir/", "http://a.test", "http://b.test/dir/p#frag/x", "ftp://a.test/dir/",
          "foo:opaque", "http://[::1]:8080/?q/r#f", "", "not a base", "http://\u00e9.test/d/",
          "http://a.test/\ud800/", "https://xn--pple-43d.com/a?b", "HTTP://A.TEST:80/D/", "http://a.test:99999/",
          "http://a.test/d%7e/%zz?x=%41#y", "http:?x", "\x01http://a.test/d/", "http://a.test/d/ "]
_TRACKING = [(), ("utm_*", "gclid", "fbclid"), ("sid", "ref_*", "\u00dcNI*", "\u212a", "k*", "x\u0130")]
_KEEP = [(), ("a.test",), ("*.test", "[::1]")]


@needs_kernel
@settings(max_examples=750, deadline=None)
@given(st.lists(_HREFS, max_size=12), st.lists(st.sampled_from(_BASES), min_size=1, max_size=4),
       st.sampled_from(_TRACKING), st.sampled_from(_KEEP))
def test_links_and_canonicalize_are_the_python_code(hrefs: list[str], bases: list[str],
                                                    tracking: tuple[str, ...], keep: tuple[str, ...]) -> None:
    fast, slow = native(tracking, keep), pure(tracking, keep)
    for base in bases:
        assert fast.canonicalize_links(hrefs, base) == slow.canonicalize_links(hrefs, base)
        for href in hrefs[:3]:
            assert fast.canonicalize(href, base) == slow.canonicalize(href, base)
            assert fast.canonicalize(href) == slow.canonicalize(href)
    assert_same(fast, slow)


_KEY = st.text(alphabet="abAB_utmUTMgclidsK%25f", max_size=6)
_QUERY = st.lists(st.tuples(_KEY, st.sampled_from(["", "=", "=1", "=%7e", "=a=b", "=%2F"])), max_size=400)


@needs_kernel
@settings(max_examples=200, deadline=None)
@given(_QUERY, st.sampled_from(["http://h.test/p", "https://h.test:8443/d/", "http://[::1]/"]),
       st.sampled_from(_KEEP))
def test_long_queries(pairs: list[tuple[str, str]], base: str, keep: tuple[str, ...]) -> None:
    """Queries of hundreds of parameters (past the kernel's stack buffers): drops, sort, escapes."""
    query = "&".join(k + v for k, v in pairs)
    hrefs = [f"?{query}", f"/x?{query}#f", f"http://a.test/{query}?{query}", f"y?&&{query}&&"]
    fast, slow = native((), keep), pure((), keep)
    fast_tracking, slow_tracking = native(("utm_*", "Gclid", "k"), keep), pure(("utm_*", "Gclid", "k"), keep)
    assert fast.canonicalize_links(hrefs, base) == slow.canonicalize_links(hrefs, base)
    assert fast_tracking.canonicalize_links(hrefs, base) == slow_tracking.canonicalize_links(hrefs, base)
    assert_same(fast, slow)
    assert_same(fast_tracking, slow_tracking)


@contextmanager
def memo_bound(entries: int) -> Iterator[None]:
    with mock.patch.object(canon_module, "MEMO_ENTRIES", entries):
        yield


@needs_kernel
def test_bounded_memo_is_cleared_alike() -> None:
    with memo_bound(5):
        fast, slow = native(), pure()
    hrefs = [f"/p{i}?b=1&a={i}" for i in range(40)] + [f"q{i}#x" for i in range(13)]
    for page in range(3):
        base = f"http://A.test/d{page}/index.html"  # not its own serialization: every href is memoized
        with memo_bound(5):
            assert fast.canonicalize_links(hrefs, base) == slow.canonicalize_links(hrefs, base)
        assert 0 < len(fast._memo) <= 5
    assert_same(fast, slow)


@needs_kernel
def test_wrong_types_raise_type_error() -> None:
    fast = native()
    with pytest.raises(TypeError):
        fast.canonicalize_links([b"http://a.test/"], "http://a.test/")  # type: ignore[list-item]
    with pytest.raises(TypeError):
        fast.canonicalize_links(["/x"], b"http://a.test/")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fast.canonicalize_links(None, "http://a.test/")  # type: ignore[arg-type]
    assert fast.canonicalize_links(iter(["/x", "/y#z"]), "http://a.test/") == \
        ["http://a.test/x", "http://a.test/y"]


@needs_kernel
@settings(max_examples=500, deadline=None)
@given(NEAR_SIMPLE_HREFS, st.lists(st.sampled_from(SIMPLE_BASES), min_size=1, max_size=4),
       st.sampled_from(_TRACKING), st.sampled_from(_KEEP))
def test_simple_hrefs_are_the_python_code(hrefs: list[str], bases: list[str], tracking: tuple[str, ...],
                                          keep: tuple[str, ...]) -> None:
    """The kernel's string-built serializations (simple_link) are the Python code's, counters included."""
    fast, slow = native(tracking, keep), pure(tracking, keep)
    for base in bases:
        assert fast.canonicalize_links(hrefs, base) == slow.canonicalize_links(hrefs, base)
    assert_same(fast, slow)


@needs_kernel
def test_benchmark_webs_in_crawl_order() -> None:
    """Every link of the real web's pages and of the small web's first 400 pages breadth-first, through
    one canonicalizer each as a crawl runs them (benchmarks/bench_canon.py runs the whole small web)."""
    from benchmarks.bench_canon import docs_web, small_web

    for pages in (small_web(400), docs_web()):
        if pages is None:  # the Debian documentation packages are not installed
            continue
        fast, slow = native(), pure()
        for hrefs, base in pages:
            assert fast.canonicalize_links(hrefs, base) == slow.canonicalize_links(hrefs, base)
        assert_same(fast, slow)


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@needs_kernel
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_no_leak_on_any_path() -> None:
    """Misses, hits, rejects, surrogates, non-ASCII, bad bases, long queries and keep_query_order hosts:
    RSS stays flat once the (bounded) memo is full."""
    kinds = ["/p{i}?b=%7e&utm_source=1&a={i}#f", "http://x{i}.keep.test/?z=1&a=2", "q{i}%zz%41", "\ud800{i}",
             "mailto:{i}", "http://[bad{i}", "\u00e9{i}?x", "{i}" + "&k=v" * 100, "?{i}=1&a"]
    bases = ["http://a.test/d/", "http://\u00e9.test/", "bad base", "http://a.test/\ud800"]
    with memo_bound(500):
        fast = native((), ("*.keep.test",))
        sizes = []
        for rounds in range(6):
            for i in range(rounds * 5_000, (rounds + 1) * 5_000):
                hrefs = [kind.format(i=i) for kind in kinds]
                fast.canonicalize_links(hrefs, bases[i % 4])
                fast.canonicalize(hrefs[i % 9], bases[i % 4])
            sizes.append(_rss_mb())
    assert fast.stats().total == 6 * 5_000 * 10
    assert sizes[-1] - sizes[1] < 1.0, sizes
