"""News feeds (RSS 2.0 and Atom), parsed streaming over a capped body. Sans-IO.

Rules (each violation stops the feed with a named error; items read before it are kept):

1. The body is read under polecat/parse/boundedxml.py's guards (gzip inflated in bounded steps, entities
   refused, ``too_large``, ``bad_gzip``, ``entities``, ``malformed``), with the sitemap protocol's caps:
   at most ``max_bytes`` (50 MB) of XML and ``max_items`` (50,000) items, else ``too_many_items``.
2. The root is ``rss`` (RSS 2.0: ``rss/channel/item``, the item's ``link`` text and ``pubDate``, an RFC 822
   date) or ``feed`` (Atom: ``feed/entry``, the entry's first ``link`` whose ``rel`` is ``alternate`` or
   absent, its ``href``, and ``updated``, else ``published``, an RFC 3339 date); anything else is
   ``not_a_feed``.
3. An item's link must be an absolute http(s) URL or a path (the node resolves it against the feed's
   URL); an item without one is a counted skip. An unparseable date is ignored.
4. A feed's own rate: its items' dates, newest minus oldest over the gaps between them
   (:meth:`FeedResult.item_gap`); the refresh policy takes it as the feed's prior (refresh rule 4).
5. The feeds a page links are its ``<link rel="alternate">`` elements whose ``type`` is a feed's
   (:data:`FEED_TYPES`), found in its first :data:`FEED_LINK_SCAN` bytes (a bounded scan, not a second
   HTML parse), at most :data:`MAX_FEED_LINKS` of them.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Literal

from polecat.parse.boundedxml import MAX_TEXT, XmlRecords, XmlRefused
from polecat.parse.sitemap import MAX_BYTES, MAX_ENTRIES, parse_lastmod

FEED_TYPES = frozenset({"application/rss+xml", "application/atom+xml"})
"""Media types of a feed, as ``<link rel="alternate" type=...>`` and servers name them."""


def parse_http_date(value: str | None) -> float | None:
    """An RFC 822 / HTTP-date (``pubDate``, ``Last-Modified``) as epoch seconds; None if absent, unparseable
    or without a zone."""
    if not value:
        return None
    import email.utils  # the email package costs ~7 ms to import: only dated documents need it

    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return None if when.tzinfo is None else when.timestamp()


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One item (RSS) or entry (Atom): its link and date (epoch seconds), if any."""

    link: str
    published: float | None = None


@dataclass(slots=True)
class FeedResult:
    """What one feed held. ``error`` names the rule that stopped it (None: read whole)."""

    kind: Literal["rss", "atom"] | None = None
    items: list[FeedItem] = field(default_factory=list)
    error: str | None = None
    skipped: int = 0
    """Items without a usable link."""

    def item_gap(self) -> float | None:
        """Mean seconds between the items' dates (rule 4); None with fewer than two distinct dates."""
        dates = [i.published for i in self.items if i.published is not None]
        if len(dates) < 2 or max(dates) <= min(dates):
            return None
        return (max(dates) - min(dates)) / (len(dates) - 1)


def _is_link(link: str) -> bool:
    if not link or any(c.isspace() for c in link):
        return False
    head, sep, _ = link.partition("://")
    return head.lower() in ("http", "https") if sep else link.startswith("/")


class FeedParser(XmlRecords[FeedResult]):
    """Feed a feed's body chunk by chunk; :meth:`close` returns the :class:`FeedResult`."""

    refusal = "not_a_feed"

    def __init__(self, *, max_items: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(FeedResult(), max_bytes=max_bytes)
        self._max_items = max_items

    def _root(self, local: str) -> int:
        if local not in ("rss", "feed"):
            raise XmlRefused("not_a_feed")
        self._result.kind = "rss" if local == "rss" else "atom"
        return 2 if local == "rss" else 1

    def _field_start(self, local: str, attrs: dict[str, str]) -> None:
        # Atom's link is an attribute: the first alternate one (rel absent means alternate).
        if (local == "link" and self._result.kind == "atom" and "href" not in self._fields
                and attrs.get("rel", "alternate") == "alternate"):
            self._fields["href"] = attrs.get("href", "")

    def _record(self, local: str) -> None:
        if local not in ("item", "entry"):
            return
        r = self._result
        if len(r.items) >= self._max_items:
            raise XmlRefused("too_many_items")
        link = self._fields.get("link" if r.kind == "rss" else "href", "")
        if len(link) > MAX_TEXT or not _is_link(link):
            r.skipped += 1
            return
        if r.kind == "rss":
            published = parse_http_date(self._fields.get("pubDate"))
        else:
            raw = self._fields.get("updated") or self._fields.get("published")
            published = parse_lastmod(raw) if raw else None
        r.items.append(FeedItem(link, published))


def parse_feed(body: bytes, *, max_items: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES,
               chunk: int = 64 * 1024) -> FeedResult:
    """Parse a whole body, fed in ``chunk``-sized pieces as the network would."""
    parser = FeedParser(max_items=max_items, max_bytes=max_bytes)
    for i in range(0, len(body), chunk):
        parser.feed(body[i : i + chunk])
        if parser.failed:
            break
    return parser.close()


FEED_LINK_SCAN = 64 * 1024
"""Bytes of a page searched for the feeds it links (rule 5): feeds are named in the ``<head>``."""
MAX_FEED_LINKS = 8
_LINK_TAG = re.compile(rb"<link\b[^>]{0,2000}>", re.IGNORECASE)
_ATTR = re.compile(rb"""([a-z][a-z0-9:_-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)


def linked_feeds(page: bytes) -> list[str]:
    """The hrefs (unresolved) of the feeds an HTML page links (rule 5)."""
    head = page[:FEED_LINK_SCAN]
    low = head.lower()
    if b"application/rss+xml" not in low and b"application/atom+xml" not in low:
        return []
    out: list[str] = []
    for tag in _LINK_TAG.finditer(head):
        attrs = {m[1].lower(): m[2] or m[3] or m[4] or b"" for m in _ATTR.finditer(tag[0])}
        if (b"alternate" in attrs.get(b"rel", b"").lower().split()
                and attrs.get(b"type", b"").strip().lower().decode("latin-1") in FEED_TYPES):
            href = html.unescape(attrs.get(b"href", b"").decode("utf-8", "replace")).strip()
            if href:
                out.append(href)
                if len(out) >= MAX_FEED_LINKS:
                    break
    return out
