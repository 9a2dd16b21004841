"""HTML link and text extraction with selectolax (lexbor).

What is extracted, and why:

- ``<base href>`` sets the base URL for every relative link (the first one wins, as in browsers).
- ``<a href>`` and ``<area href>`` are outlinks; ``rel=nofollow`` on one excludes it.
- ``<link rel=canonical>`` is reported separately (the node queues it like an outlink).
- ``<meta name=robots|<product-token>>`` ``nofollow`` drops every outlink, ``noindex`` marks the page
  as not to be stored; ``none`` means both.
- ``javascript:``, ``mailto:``, ``data:``, ``tel:`` and similar hrefs are skipped before URL parsing.
- Text is the document's visible text (scripts, styles and templates removed), whitespace-collapsed:
  the input of SimHash.

Links come back unresolved (raw hrefs plus the effective base): the canonicalizer resolves them with the
WHATWG parser in one step.
"""

from __future__ import annotations

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


def _robots_meta(tree: LexborHTMLParser, agent_token: str) -> tuple[bool, bool]:
    nofollow = noindex = False
    for node in tree.css("meta[name]"):
        name = (node.attributes.get("name") or "").strip().lower()
        if name not in ("robots", agent_token):
            continue
        for value in (node.attributes.get("content") or "").lower().split(","):
            v = value.strip()
            if v in ("nofollow", "none"):
                nofollow = True
            if v in ("noindex", "none"):
                noindex = True
    return nofollow, noindex


def _skip(href: str) -> bool:
    head = href[:12].lstrip().lower()
    return not head or head.startswith(_SKIP_SCHEMES)


def parse_html(html: str, url: str, *, agent_token: str = "polecat") -> ParsedPage:
    """Extract links, canonical, meta robots and text from an HTML document fetched from ``url``."""
    tree = LexborHTMLParser(html)
    base = url
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        base_href = (base_node.attributes.get("href") or "").strip()
        if base_href and not _skip(base_href):
            try:
                base = join_url(url, base_href)
            except ValueError:  # an unparsable <base> is ignored, as browsers do
                base = url
    nofollow, noindex = _robots_meta(tree, agent_token)
    links: dict[str, None] = {}
    if not nofollow:
        for node in tree.css("a[href], area[href]"):
            attrs = node.attributes
            href = attrs.get("href")
            if not href or _skip(href):
                continue
            rel = attrs.get("rel")
            if rel and "nofollow" in rel.lower().split():
                continue
            links[href.strip()] = None
    canonical = None
    for node in tree.css("link[rel][href]"):
        if "canonical" in (node.attributes.get("rel") or "").lower().split():
            canonical = (node.attributes.get("href") or "").strip() or None
            break
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node is not None else ""
    tree.strip_tags(list(_INVISIBLE))
    body = tree.body
    text = " ".join(body.text(separator=" ").split()) if body is not None else ""
    return ParsedPage(base, tuple(links), canonical, nofollow, noindex, text, title)
