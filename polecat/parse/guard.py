"""Bounds on what the per-page stages see: no page, however written, makes a node slow or big.

The HTML parser (lexbor) is linear in ordinary pages but not in three shapes an attacker can write, and
the stages after it are linear in what it returns. Measured on one core (benchmarks/README.md, "Worst
case per stage"):

- Nesting: every start or stray end tag walks the stack of open elements, so ``<div>`` x n costs O(n^2)
  (24 s at n = 80,000; 18 minutes for a 5 MB page).
- Attributes: each attribute is checked against the element's earlier ones, so one element with n
  attributes costs O(n^2) (0.8 s at n = 20,000, from a 170 KB tag).
- Size: parse, text and fingerprint are linear, but a 10 MiB body costs ~100 ms and 20-40x its size in
  memory on the way.

Rules, applied in order to a decoded page before it is parsed:

1. Only the first :data:`MAX_PARSE_BYTES` of the body are decoded and parsed (the stored body is whole;
   ``fetch.max_parse_bytes`` sets it for a node).
2. The document is cut before the first tag that would open more than :data:`MAX_DEPTH` elements (a
   count of start tags minus matched end tags, which over-counts a browser's tree, never under-counts,
   except for elements with optional end tags, which a parser closes itself and this count skips).
   Pages with at most :data:`SHALLOW_TAGS` "<" skip the count, however deep they nest: lexbor parses
   8,192 nested elements in ~40 ms.
3. The document is cut before the first tag with more than :data:`MAX_ATTRS` attributes.
4. The page's text, the fingerprint's input, is its first :data:`MAX_TEXT_CHARS` characters.
5. At most :data:`MAX_LINKS` links of a page are kept, in document order, and none longer than
   :data:`MAX_HREF_CHARS` (4x the longest URL the scope admits by default; canonicalization and its memo
   never see more).

Rules 2 and 3 have a native kernel (polecat/parse/_guard.c, used when :func:`polecat.native.load` gives
it): it returns exactly what :func:`_too_deep` (behind the SHALLOW_TAGS gate) and :func:`_too_many_attrs`
return, which stay the specification and the fallback, 5-6x faster on real documentation pages
(benchmarks/README.md, "Issue 17, third pass: native parse guard").

A page cut by rule 1, 2, 3 or 5 is counted (``pages_cut``, not an error) and logged at info: its links up
to the cut are kept and the crawl goes on. Worst case with these bounds: see benchmarks/README.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polecat.config import FetchConfig
from polecat.native import load

if TYPE_CHECKING:
    from polecat.parse.depth_bound import DepthBound

__all__ = ["MAX_ATTRS", "MAX_DEPTH", "MAX_HREF_CHARS", "MAX_LINKS", "MAX_PARSE_BYTES", "MAX_TEXT_CHARS",
           "Bounded", "bound_body", "bound_html", "bound_links", "whole_utf8"]

MAX_PARSE_BYTES = FetchConfig().max_parse_bytes
MAX_DEPTH = 256
SHALLOW_TAGS = 8192
MAX_ATTRS = 256
MAX_TEXT_CHARS = 256 * 1024
MAX_LINKS = 10_000
MAX_HREF_CHARS = 8192

# Elements that never nest (void) or that the parser closes itself when the next one opens (optional end
# tags): counting them would make an ordinary list of unclosed <p> or <li> look deep.
_FLAT = frozenset((
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr",
    "param", "keygen", "frame", "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "tbody",
    "thead", "tfoot", "colgroup", "caption", "rb", "rt", "rp", "rtc", "html", "head", "body",
))
# Elements whose content is text up to their own end tag: a "<div>" in a script is not a tag.
_RAW = frozenset(("script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes",
                  "plaintext"))
_RAW_END = {name: re.compile("</" + name, re.IGNORECASE) for name in _RAW}


@functools.cache
def depth_bound() -> DepthBound:
    """Skips the Python scan of rule 2 on pages that cannot nest past MAX_DEPTH (2.7 ms -> ~0.3 ms on 150
    KB pages). Made on first use: it is numpy, and the kernel (which scans every page past the gate,
    faster than this bound) leaves it unused."""
    from polecat.parse.depth_bound import DepthBound

    return DepthBound(_FLAT, _RAW)


_NATIVE = load("polecat.parse._guard")
_TAG = re.compile(r"<(?:(!--)|(/?)([A-Za-z][^\s/>]*))")
# A tag that may hold more than MAX_ATTRS attributes: at least 8 items, an item being a run of up to 64
# characters outside quotes or one quoted value. 257 attributes take at least 514 characters outside
# quotes (a name and a separator each), so 9 items or more: every such tag matches. Runs instead of single
# characters keep the regex engine in its fast loops (34 -> 29 us a small-web page, 689 -> 23 us a real
# documentation page); the few ordinary tags that match are counted exactly by _ATTR.
_LONG_TAG = re.compile(r"""<[A-Za-z](?:[^>"']{1,64}+|"[^"]*+"|'[^']*+'){8}+""")
_NAME = re.compile(r"<[^\s/>]*+")
# One attribute as the tokenizer reads it (a quoted value may hold spaces and ">").
_ATTR = re.compile(r"""[\s/]*+[^\s/>=]++(?:\s*+=\s*+(?:"[^"]*+"|'[^']*+'|[^\s>]*+))?+""")


@dataclass(frozen=True, slots=True)
class Bounded:
    """What the parser is given, and whether a bound cut it."""

    html: str
    cut: str | None
    """Which bound cut the page (``size``, ``depth``, ``attributes``), or None if it is whole."""


def bound_body(body: bytes, limit: int = MAX_PARSE_BYTES) -> tuple[bytes, bool]:
    """Rule 1: the part of a body that is decoded and parsed (its first ``limit`` bytes), and whether it
    was cut."""
    if len(body) <= limit:
        return body, False
    return body[:limit], True


def _too_deep(html: str) -> int | None:
    """Offset of the first tag past :data:`MAX_DEPTH` open elements (rule 2), or None."""
    depth = 0
    open_: dict[str, int] = {}
    search = _TAG.search
    m = search(html)
    while m is not None:
        pos = m.end()
        if m.group(1):  # a comment: nothing inside is a tag
            end = html.find("-->", pos)
            if end < 0:
                return None
            m = search(html, end + 3)
            continue
        name = m.group(3).lower()
        if name in _FLAT:
            pass
        elif m.group(2):
            if open_.get(name):
                open_[name] -= 1
                depth -= 1
        else:
            depth += 1
            if depth > MAX_DEPTH:
                return m.start()
            open_[name] = open_.get(name, 0) + 1
            if name in _RAW:
                raw_end = _RAW_END[name].search(html, pos) if name != "plaintext" else None
                if raw_end is None:
                    return None
                pos = raw_end.start()
        m = search(html, pos)
    return None


def _too_many_attrs(html: str) -> int | None:
    """Offset of the first tag with more than :data:`MAX_ATTRS` attributes (rule 3), or None. Only tags
    long enough to hold that many are counted, and in each at most MAX_ATTRS + 1 attributes."""
    m = _LONG_TAG.search(html)
    while m is not None:
        pos = _NAME.match(html, m.start()).end()  # type: ignore[union-attr]  # "<" and a letter match
        count = 0
        while count <= MAX_ATTRS and (attr := _ATTR.match(html, pos)) is not None:
            count += 1
            pos = attr.end()
        if count > MAX_ATTRS:
            return m.start()
        m = _LONG_TAG.search(html, pos)
    return None


def bound_html(html: str, *, cut: bool = False) -> Bounded:
    """Rules 2 and 3 for a decoded page (``cut``: rule 1 already cut its body)."""
    reason = "size" if cut else None
    at = _NATIVE.too_many_attrs(html, MAX_ATTRS) if _NATIVE else _too_many_attrs(html)
    if at is not None:
        html, reason = html[:at], "attributes"
    if _NATIVE:
        at = _NATIVE.too_deep(html, MAX_DEPTH, SHALLOW_TAGS)
    elif html.count("<") > SHALLOW_TAGS:
        at = _too_deep(html) if depth_bound().may_exceed(html, MAX_DEPTH) else None
    else:
        at = None
    if at is not None:
        html, reason = html[:at], "depth"
    return Bounded(html, reason)


def whole_utf8(html: bytes) -> bool:
    """Whether ``html`` is well-formed UTF-8 whose text rules 2 and 3 leave whole (``bound_html`` of
    ``html.decode()`` would cut nothing), told from the bytes without decoding them (polecat/parse/_guard.c).
    False without the kernel, for any other bytes, and where the bytes cannot tell (a non-ASCII character
    inside a tag the rules read): the caller decodes and asks :func:`bound_html`."""
    return _NATIVE is not None and _NATIVE.whole_utf8(html, MAX_ATTRS, MAX_DEPTH, SHALLOW_TAGS)


def bound_links(links: Sequence[str]) -> tuple[list[str], int]:
    """Rule 5: the links kept, and how many were dropped."""
    kept = [href for href in links[:MAX_LINKS] if len(href) <= MAX_HREF_CHARS]
    return kept, len(links) - len(kept)
