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

Two paths give the same answer: :func:`parse_html_python` (selectolax's Python API: the specification)
and, when it is built and verified, the native kernel (``polecat/parse/_extract.c``: lexbor's parse and one
walk of its tree in C; see polecat/parse/html_native.py). Both hand the ``<meta>``, ``<link>`` and
``<base>`` attributes they read to :func:`_page`, the one owner of those rules.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ada_url import join_url
from selectolax.lexbor import LexborHTMLParser

from polecat import native
from polecat.parse.html_native import Kernel

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


def skip_href(href: str) -> bool:
    """Whether ``href`` is empty or of a scheme no fetch serves (``javascript:``, ``data:``, ...)."""
    head = href[:12].lstrip().lower()
    return not head or head.startswith(_SKIP_SCHEMES)


_SELECTOR = "a[href], area[href], base[href], link[rel][href], meta[name], title, " + ", ".join(_INVISIBLE)
"""Everything parse_html needs, in one tree traversal (each css() call walks the whole document)."""


def _page(url: str, agent_token: str, links: tuple[str, ...], title: str, text: str,
          metas: list[tuple[str | None, str | None]], canonicals: list[tuple[str | None, str | None]],
          bases: list[str | None]) -> ParsedPage:
    """The page from its followable links and the raw attributes of its ``<meta name>`` (name, content),
    ``<link rel>`` (rel, href) and ``<base href>`` elements, each in document order: one owner of these
    rules for both paths."""
    nofollow = noindex = False
    for name, content in metas:
        if (name or "").strip().lower() in ("robots", agent_token):
            nf, ni = _robots_meta(content or "")
            nofollow, noindex = nofollow or nf, noindex or ni
    canonical = None
    for rel, href in canonicals:
        if "canonical" in (rel or "").lower().split():
            canonical = (href or "").strip() or None
            if canonical is not None:
                break
    base = url
    for href in bases:
        base_href = (href or "").strip()
        if base_href and not skip_href(base_href):  # the first <base href> wins, as in browsers
            with contextlib.suppress(ValueError):  # an unparsable <base> is ignored, as browsers do
                base = join_url(url, base_href)
            break
    return ParsedPage(base, () if nofollow else links, canonical, nofollow, noindex, text, title)


def parse_html_python(html: str, url: str, *, agent_token: str = "polecat") -> ParsedPage:
    """:func:`parse_html` with selectolax's Python API: the specification of the native kernel."""
    tree = LexborHTMLParser(html)
    hrefs: list[tuple[str, str | None]] = []
    metas: list[tuple[str | None, str | None]] = []
    canonicals: list[tuple[str | None, str | None]] = []
    bases: list[str | None] = []
    title = ""
    invisible = []
    for node in tree.css(_SELECTOR):
        tag = node.tag
        if tag == "a" or tag == "area":
            attrs = node.attributes  # one dict: cheaper than two lookups through node.attrs
            href = attrs.get("href")
            if href and not skip_href(href):
                hrefs.append((href, attrs.get("rel")))
        elif tag in _INVISIBLE:
            invisible.append(node)
        elif tag == "meta":
            metas.append((node.attrs.get("name"), node.attrs.get("content")))
        elif tag == "link":
            canonicals.append((node.attrs.get("rel"), node.attrs.get("href")))
        elif tag == "base":
            bases.append(node.attrs.get("href"))
        elif tag == "title" and not title:
            title = node.text(strip=True)
    links: dict[str, None] = {}
    for href, rel in hrefs:
        if rel and "nofollow" in rel.lower().split():
            continue
        links[href.strip()] = None
    for node in invisible:
        node.decompose()
    body = tree.body
    text = body.text(separator=" ", strip=True) if body is not None else ""
    return _page(url, agent_token, tuple(links), title, text, metas, canonicals, bases)


def parse_html(html: str | bytes, url: str, *, agent_token: str = "polecat") -> ParsedPage:
    """Extract links, canonical, meta robots and text from an HTML document fetched from ``url``: its text,
    or its bytes when they are well-formed UTF-8 (the native kernel parses them as they are; only the
    Python path decodes them)."""
    extract = _kernel.extract
    if extract is not None:
        try:
            raw = extract(html)
        except _kernel.error as e:
            _kernel.fell_back(url, e)
        else:
            return _page(url, agent_token, *raw)
    return parse_html_python(html if isinstance(html, str) else html.decode(), url, agent_token=agent_token)


def _differs(html: str) -> str | None:
    """How the native and Python paths differ on ``html`` (``None``: they agree)."""
    assert _kernel.extract is not None
    url = "http://self.test/a/"
    native_page = _page(url, "polecat", *_kernel.extract(html))
    python_page = parse_html_python(html, url)
    return None if native_page == python_page else f"on {html[:60]!r}: {native_page} != {python_page}"


_kernel = Kernel(native.load("polecat.parse._extract"))
"""The native kernel, when built, bound and verified (polecat/parse/html_native.py)."""
_kernel.verify(_differs)
