"""Sitemaps (the sitemaps.org protocol), parsed streaming over a capped body. Sans-IO.

Rules (each violation stops the file with a named, counted error; entries read before it are kept, and
they are already bounded by the caps):

1. The body is read under polecat/parse/boundedxml.py's guards (gzip inflated in bounded steps, entities
   refused, ``too_large``, ``bad_gzip``, ``entities``, ``malformed``), with ``max_bytes`` the protocol's
   50 MB of XML per file, gzip or not. The node streams a sitemap's body into the parser as it arrives,
   so a file of the protocol's size takes bounded memory whatever ``fetch.max_body_bytes`` says.
2. A root other than ``urlset`` or ``sitemapindex`` is ``not_a_sitemap``.
3. At most ``max_entries`` (the protocol's 50,000) ``<url>`` or ``<sitemap>`` entries per file, else
   ``too_many_entries``. Text of one element is kept up to ``MAX_TEXT`` characters (a URL longer than that
   is dropped as ``bad_loc``, a counted skip, not an error).
4. ``<loc>`` must be an absolute http(s) URL; ``lastmod`` is a W3C datetime (kept as epoch seconds, else
   ignored), ``changefreq`` one of the protocol's words (else ignored), ``priority`` a number in [0, 1]
   (else ignored).
5. Indexes nest (:class:`SitemapWalk`): a child sitemap is followed at most ``max_depth`` levels below a
   root, each file at most once, at most ``max_files`` files per walk; beyond that the walk refuses with
   ``too_deep``, ``repeated`` or ``too_many_files`` (an endless or cyclic index ends there).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from polecat.parse.boundedxml import XmlRecords, XmlRefused

MAX_ENTRIES = 50_000
MAX_BYTES = 50 * 1024 * 1024
CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})


@dataclass(frozen=True, slots=True)
class SitemapUrl:
    """One ``<url>`` of a urlset, with the hints it carried."""

    loc: str
    lastmod: float | None = None
    changefreq: str | None = None
    priority: float | None = None


@dataclass(slots=True)
class SitemapResult:
    """What one sitemap file held. ``error`` names the rule that stopped it (None: read whole)."""

    kind: Literal["urlset", "sitemapindex"] | None = None
    urls: list[SitemapUrl] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    error: str | None = None
    skipped: int = 0
    """Entries dropped for a bad ``<loc>``."""


def parse_lastmod(text: str) -> float | None:
    """W3C datetime (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, with time and zone) to epoch seconds."""
    t = text.strip()
    if len(t) == 4 and t.isdigit():
        t += "-01-01"
    elif len(t) == 7 and t[4] == "-":
        t += "-01"
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _is_url(loc: str) -> bool:
    head, sep, rest = loc.partition("://")
    if not sep or not rest or head.lower() not in ("http", "https"):
        return False
    return not any(c.isspace() for c in loc)


class SitemapParser(XmlRecords[SitemapResult]):
    """Feed a sitemap body chunk by chunk; :meth:`close` returns the :class:`SitemapResult`."""

    refusal = "not_a_sitemap"

    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(SitemapResult(), max_bytes=max_bytes)
        self._max_entries = max_entries

    def _root(self, local: str) -> int:
        if local not in ("urlset", "sitemapindex"):
            raise XmlRefused("not_a_sitemap")
        self._result.kind = "urlset" if local == "urlset" else "sitemapindex"
        return 1

    def _record(self, local: str) -> None:
        if local not in ("url", "sitemap"):
            return
        r = self._result
        if len(r.urls) + len(r.sitemaps) >= self._max_entries:
            raise XmlRefused("too_many_entries")
        loc = self._fields.get("loc", "")
        if not _is_url(loc):
            r.skipped += 1
            return
        if local == "sitemap":
            if r.kind == "sitemapindex":
                r.sitemaps.append(loc)
            return
        if r.kind != "urlset":
            return
        r.urls.append(SitemapUrl(loc, self._lastmod(), self._changefreq(), self._priority()))

    def _lastmod(self) -> float | None:
        raw = self._fields.get("lastmod")
        return parse_lastmod(raw) if raw else None

    def _changefreq(self) -> str | None:
        raw = self._fields.get("changefreq", "").lower()
        return raw if raw in CHANGEFREQS else None

    def _priority(self) -> float | None:
        try:
            value = float(self._fields.get("priority", ""))
        except ValueError:
            return None
        return value if 0.0 <= value <= 1.0 else None


def parse_sitemap(body: bytes, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES,
                  chunk: int = 64 * 1024) -> SitemapResult:
    """Parse a whole body, fed in ``chunk``-sized pieces as the network would."""
    parser = SitemapParser(max_entries=max_entries, max_bytes=max_bytes)
    for i in range(0, len(body), chunk):
        parser.feed(body[i : i + chunk])
        if parser.failed:
            break
    return parser.close()


@dataclass(slots=True)
class SitemapWalk:
    """Which sitemap files to fetch, over nested indexes (rule 5). One walk per root's host and run."""

    max_depth: int = 3
    max_files: int = 1000
    _depth: dict[str, int] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    """Refusals by reason, including the files' own errors (rules 1-3), each under ``prefix``."""
    prefix: str = ""

    def __contains__(self, url: str) -> bool:
        return url in self._depth

    def add_root(self, url: str) -> bool:
        """A sitemap named by robots.txt or guessed (``/sitemap.xml``): True if it should be fetched."""
        return self._admit(url, 0)

    def children(self, url: str, result: SitemapResult) -> list[str]:
        """Record a fetched file's result; return the child sitemaps to fetch next."""
        if result.error is not None:
            self._count(result.error)
        depth = self._depth.get(url, 0) + 1
        return [child for child in result.sitemaps if self._admit(child, depth)]

    def _admit(self, url: str, depth: int) -> bool:
        if url in self._depth:
            self._count("repeated")
            return False
        if depth > self.max_depth:
            self._count("too_deep")
            return False
        if len(self._depth) >= self.max_files:
            self._count("too_many_files")
            return False
        self._depth[url] = depth
        return True

    def _count(self, reason: str) -> None:
        self.errors[self.prefix + reason] += 1
