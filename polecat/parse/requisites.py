"""Page requisites: the images, stylesheets, scripts, icons and fonts a page needs to be shown.

Which of them are fetched is the frontier's decision (polecat/frontier/requisites.py); this module only
reads them out of a document, as raw references to resolve against the page's base URL
(:attr:`polecat.parse.html.ParsedPage.base`).

Rules:

1. A requisite is, in document order: ``<img src>`` and every candidate of ``<img srcset>`` and
   ``<source srcset>``; ``<video poster>``; ``<input type=image src>``, ``<embed src>``, ``<object data>``,
   ``<track src>`` and SVG ``<image href>`` (or ``xlink:href``); the legacy ``background`` attribute (``<body
   background>``, ``<td background>``, as ``wget -p`` reads it); ``<script src>``; ``<link href>`` whose
   ``rel`` holds one of :data:`LINK_RELS` (``stylesheet``, the icons, ``preload``, ``modulepreload``,
   ``manifest``); and the ``url()`` and ``@import`` references of inline CSS, ``<style>`` elements and
   ``style`` attributes (polecat/parse/css.py, with its bounds). Media sources (``<audio>``/``<video>``
   ``src``, their ``<source src>``) and frames are not: a movie is no part of showing a page, and a frame
   is a page.
2. A ``srcset`` candidate is its URL, up to the first whitespace (or trailing commas), followed by
   descriptors up to the next comma outside parentheses, as the HTML standard splits it, in one linear
   pass.
3. The document read is the one the link extraction read (the parse guard's bounds apply:
   polecat/parse/guard.py); at most :data:`MAX_REQUISITES` references are kept, duplicates removed, none
   longer than :data:`polecat.parse.guard.MAX_HREF_CHARS`, and skipped schemes (``data:``, ...) are
   dropped as for links. What a bound cut is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from polecat.parse.css import css_links, may_reference
from polecat.parse.guard import MAX_HREF_CHARS
from polecat.parse.html import skip_href

MAX_REQUISITES = 2_000
LINK_RELS = frozenset(("stylesheet", "icon", "apple-touch-icon", "apple-touch-icon-precomposed", "mask-icon",
                       "preload", "modulepreload", "manifest"))
_SELECTOR = ("img, source[srcset], video[poster], script[src], link[rel][href], input[src], embed[src], "
             "object[data], track[src], image, [background]")
_CSS_SELECTOR = _SELECTOR + ", style, [style]"
"""With inline CSS: only where the document holds a ``url(`` or an ``@import`` somewhere (a page whose
``style`` attributes load nothing pays nothing for them: ~80 of them a page on the SQLite docs)."""
_CANDIDATE = re.compile(r"[\s,]*+(\S++)")
_DESCRIPTORS = re.compile(r"(?:[^,(]++|\([^)]*+\)?)*+")
"""Descriptors up to the candidate's comma; a comma inside parentheses is the descriptor's own."""


@dataclass(frozen=True, slots=True)
class Requisites:
    """A page's requisites (rule 3) and whether a bound cut them."""

    urls: tuple[str, ...]
    """Raw references in document order."""
    cut: bool


def srcset_urls(value: str) -> list[str]:
    """The candidate URLs of a ``srcset`` value (rule 2)."""
    out: list[str] = []
    pos = 0
    while (m := _CANDIDATE.match(value, pos)) is not None:
        url, pos = m.group(1), m.end()
        if url.endswith(","):
            url = url.rstrip(",")
        else:
            pos = _DESCRIPTORS.match(value, pos).end()  # type: ignore[union-attr]  # matches ""
        if url:
            out.append(url)
    return out


class _Collector:
    """References in order, duplicates removed, within rule 3's bounds."""

    def __init__(self) -> None:
        self.found: dict[str, None] = {}
        self.cut = False

    def add(self, ref: str | None) -> None:
        if ref is None:
            return
        ref = ref.strip()
        if skip_href(ref) or ref.startswith("#"):
            return
        if len(ref) > MAX_HREF_CHARS or len(self.found) >= MAX_REQUISITES:
            self.cut = True
            return
        self.found[ref] = None

    def add_css(self, css: str | None) -> None:
        if css:
            links = css_links(css)
            self.cut = self.cut or links.cut
            for ref in links.urls:
                self.add(ref)


def page_requisites(html: str) -> Requisites:
    """The requisites of an HTML document (see the module's rules)."""
    out = _Collector()
    selector = _CSS_SELECTOR if may_reference(html) else _SELECTOR
    for node in LexborHTMLParser(html).css(selector):
        attrs = node.attributes
        tag = node.tag
        if tag == "img":
            out.add(attrs.get("src"))
            for url in srcset_urls(attrs.get("srcset") or ""):
                out.add(url)
        elif tag == "source":
            for url in srcset_urls(attrs.get("srcset") or ""):
                out.add(url)
        elif tag == "video":
            out.add(attrs.get("poster"))
        elif tag == "input":
            if (attrs.get("type") or "").strip().lower() == "image":
                out.add(attrs.get("src"))
        elif tag in ("embed", "track"):
            out.add(attrs.get("src"))
        elif tag == "object":
            out.add(attrs.get("data"))
        elif tag == "image":
            out.add(attrs.get("href") or attrs.get("xlink:href"))
        elif tag == "script":
            out.add(attrs.get("src"))
        elif tag == "link":
            if not LINK_RELS.isdisjoint((attrs.get("rel") or "").lower().split()):
                out.add(attrs.get("href"))
        elif tag == "style":
            out.add_css(node.text(deep=True))
        out.add(attrs.get("background"))
        out.add_css(attrs.get("style"))
        if out.cut and len(out.found) >= MAX_REQUISITES:
            break
    return Requisites(tuple(out.found), out.cut)
