"""HTML link and text extraction with selectolax (lexbor).

What is extracted, and why:

- ``<base href>`` sets the base URL for every relative link (the first one wins, as in browsers).
- ``<a href>`` and ``<area href>`` are outlinks; ``rel=nofollow`` on one excludes it.
- ``<link rel=canonical>`` is reported separately (the node queues it like an outlink).
- ``<meta name=robots|<product-token>>`` ``nofollow`` drops every outlink, ``noindex`` marks the page
  as not to be stored; ``none`` means both.
- ``javascript:``, ``mailto:``, ``data:``, ``tel:`` and similar hrefs are skipped before URL parsing.
- Text is the document's visible text (scripts, styles and templates removed), each text node stripped,
  joined by spaces: the input of the near-duplicate fingerprint, which tokenizes it. Runs of spaces are
  left where empty nodes were: collapsing them costs more than parsing the page.

Links come back unresolved (raw hrefs plus the effective base): the canonicalizer resolves them with the
WHATWG parser in one step.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ada_url import join_url
from selectolax.lexbor import LexborHTMLParser

_SKIP_SCHEMES = ("javascript:", "mailto:", "data:", "tel:", "about:", "blob:", "file:", "ftp:", "sms:")
_INVISIBLE = ("script", "style", "noscript", "template")


@dataclass(frozen=True, slots=True)
class ParsedPage:
    base: str
    """Effective base URL for ``links`` (the page URL, or its ``<base href>``)."""
    links: tuple[str, ...]
    """Raw hrefs of followable outlinks, in document order, duplicates removed."""
    canonical: str | None
    nofollow: bool
    noindex: bool
    text: str
    title: str


def _robots_meta(content: str) -> tuple[bool, bool]:
    nofollow = noindex = False
    for value in content.lower().split(","):
        v = value.strip()
        if v in ("nofollow", "none"):
            nofollow = True
        if v in ("noindex", "none"):
            noindex = True
    return nofollow, noindex


def _skip(href: str) -> bool:
    head = href[:12].lstrip().lower()
    return not head or head.startswith(_SKIP_SCHEMES)


_SELECTOR = "a[href], area[href], base[href], link[rel][href], meta[name], title, " + ", ".join(_INVISIBLE)
"""Everything parse_html needs, in one tree traversal (each css() call walks the whole document)."""


def parse_html(html: str, url: str, *, agent_token: str = "polecat") -> ParsedPage:
    """Extract links, canonical, meta robots and text from an HTML document fetched from ``url``."""
    tree = LexborHTMLParser(html)
    base = url
    base_seen = False
    nofollow = noindex = False
    hrefs: list[tuple[str, str | None]] = []
    canonical = None
    title = ""
    invisible = []
    for node in tree.css(_SELECTOR):
        tag = node.tag
        if tag == "a" or tag == "area":
            attrs = node.attributes  # one dict: cheaper than two lookups through node.attrs
            href = attrs.get("href")
            if href and not _skip(href):
                hrefs.append((href, attrs.get("rel")))
        elif tag in _INVISIBLE:
            invisible.append(node)
        elif tag == "meta":
            name = (node.attrs.get("name") or "").strip().lower()
            if name in ("robots", agent_token):
                nf, ni = _robots_meta(node.attrs.get("content") or "")
                nofollow, noindex = nofollow or nf, noindex or ni
        elif tag == "link":
            if canonical is None and "canonical" in (node.attrs.get("rel") or "").lower().split():
                canonical = (node.attrs.get("href") or "").strip() or None
        elif tag == "base":
            base_href = (node.attrs.get("href") or "").strip()
            if not base_seen and base_href and not _skip(base_href):
                base_seen = True  # the first <base href> wins, as in browsers
                with contextlib.suppress(ValueError):  # an unparsable <base> is ignored, as browsers do
                    base = join_url(url, base_href)
        elif tag == "title" and not title:
            title = node.text(strip=True)
    links: dict[str, None] = {}
    if not nofollow:
        for href, rel in hrefs:
            if rel and "nofollow" in rel.lower().split():
                continue
            links[href.strip()] = None
    for node in invisible:
        node.decompose()
    body = tree.body
    text = body.text(separator=" ", strip=True) if body is not None else ""
    return ParsedPage(base, tuple(links), canonical, nofollow, noindex, text, title)
