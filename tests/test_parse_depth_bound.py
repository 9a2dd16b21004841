"""The vectorised depth bound (polecat/parse/depth_bound.py): never below the guard's scan, whatever the
page, so skipping the scan when it says "cannot exceed" never lets a deep page through."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from polecat.parse import guard
from polecat.parse.guard import _too_deep, depth_bound

# Pieces that exercise every rule: case, flat and raw-text elements, comments, stray and foreign end
# tags, "<" inside names, Unicode whitespace that ends a name (and ASCII control bytes that do not),
# non-ASCII and long names, names that lowercase to ASCII (the Kelvin sign), NUL bytes.
PIECES = [
    "<div>", "</div>", "<DIV ", "</Div>", "<span>", "</span>", "<p>", "</p>", "<br>", "<a", "</a>", "<b>",
    "</b>", "<!--", "-->", "<script>", "</script>", "</SCRIPT>", "<style>", "</style", "<plaintext>",
    "<textarea>", "</textarea>", "<title>", "</title>", "<blockquote>", "</blockquote>", "<b\xa0x>",
    "</b\xa0y>", "<\u017fcript>", "</\u017fcript>", "<", "/", ">", " ", "\x1c", "\xa0", "x", "<<", "</",
    "<1", "\xe9", "<\xe9>", "<a\xe9>", "</a\xe9>", "<customelement>", "</customelement>", "<lin\u212a>",
    "\x00", "<a\x00>", "</a\x00>", "<a<b", "</a<", "<scripts>", "<!---->", "\u3000", "<x\u3000>", "</x>",
    "<a</div>", "</a<>", "</x</div>", "</dix>", "</divx>",
]


def scan_exceeds(html: str, limit: int, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(guard, "MAX_DEPTH", limit)
    return _too_deep(html) is not None


@settings(max_examples=1500, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=60), limit=st.integers(0, 6))
@example(pieces=["<a<b", "</b>"] + ["<div>"] * 3, limit=2)
@example(pieces=["</a<", "/div>"] + ["<div>"] * 3, limit=2)
@example(pieces=["<scripts>", "</div>"] * 4, limit=2)
@example(pieces=["<div>", "<a</div>", "</a<>"] * 4, limit=3)  # an end tag inside a start tag's name
@example(pieces=["<div>", "</x</div>"] * 4, limit=3)  # ... inside an end tag's name
@example(pieces=["<div>", "</dix>"] * 4, limit=3)  # names differ in their last byte
@example(pieces=["<customelementa>", "</customelementb>"] * 4, limit=3)  # ... past their 8th
def test_bound_is_never_below_the_scan(pieces: list[str], limit: int) -> None:
    html = "".join(pieces)
    with pytest.MonkeyPatch.context() as mp:
        exceeds = scan_exceeds(html, limit, mp)
    if exceeds:
        assert depth_bound().may_exceed(html, limit), html


def test_ordinary_pages_skip_the_scan_and_deep_ones_do_not() -> None:
    page = "<html><body>" + "<div><p>text <span>a</span> <a href='/x'>x</a></div>\n" * 5_000
    assert page.count("<") > guard.SHALLOW_TAGS
    assert not depth_bound().may_exceed(page, guard.MAX_DEPTH)
    deep = "<div>" * (guard.MAX_DEPTH + 1)
    assert depth_bound().may_exceed(deep, guard.MAX_DEPTH)
    # An end tag the scan cannot see (in a script, a comment or another tag's name) closes nothing.
    for hidden in ("<script>{}</script>", "<!--{}-->", "<a{}"):
        page = ("<div>" + hidden.format("</div>")) * (guard.MAX_DEPTH + 1)
        assert _too_deep(page) is not None
        assert depth_bound().may_exceed(page, guard.MAX_DEPTH)


def test_guard_results_are_the_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "_NATIVE", None)  # the pure path: the kernel has no prefilter
    deep = "<p>ok</p>" * 5_000 + "<div>" * 300 + "</div>" * 300
    cut = guard.bound_html(deep)
    assert cut.cut == "depth" and cut.html == deep[: _too_deep(deep)]
    calls: list[str] = []
    monkeypatch.setattr(guard, "_too_deep", lambda html: calls.append(html))
    flat = "<p>ok</p>" * 5_000
    assert guard.bound_html(flat).cut is None and calls == []  # the bound skipped the scan
