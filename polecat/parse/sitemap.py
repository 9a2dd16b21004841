"""Sitemaps (the sitemaps.org protocol), parsed streaming over a capped body. Sans-IO.

Rules (each violation stops the file with a named, counted error; entries read before it are kept, and
they are already bounded by the caps):

1. The body is fed in chunks. A gzip body (magic ``1f 8b``) is decompressed incrementally, never more than
   the cap at a time: at most ``max_bytes`` (the protocol's 50 MB) of XML per file, else ``too_large``
   (a gzip bomb stops there, after at most one chunk over). A broken gzip stream is ``bad_gzip``.
2. The XML goes through expat as it arrives. A DOCTYPE or any entity declaration is refused
   (``entities``): sitemaps need neither, and refusing them defeats entity expansion ("billion laughs")
   and external entities. Malformed XML is ``malformed``; a root other than ``urlset`` or
   ``sitemapindex`` is ``not_a_sitemap``.
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

import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal
from xml.parsers import expat

MAX_ENTRIES = 50_000
MAX_BYTES = 50 * 1024 * 1024
MAX_TEXT = 4096
CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1024 * 1024


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


class SitemapError(Exception):
    """Internal: stops parsing with the rule's name."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


class SitemapParser:
    """Feed a sitemap body chunk by chunk; :meth:`close` returns the :class:`SitemapResult`."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._started = False
        self._gunzip: zlib._Decompress | None = None
        self._result = SitemapResult()
        self._path: list[str] = []
        self._text: list[str] = []
        self._text_len = 0
        self._fields: dict[str, str] = {}
        p = expat.ParserCreate(namespace_separator=" ")
        p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        p.StartDoctypeDeclHandler = self._refuse_entities
        p.EntityDeclHandler = self._refuse_entities
        p.StartElementHandler = self._start
        p.EndElementHandler = self._end
        p.CharacterDataHandler = self._chars
        self._xml = p

    @property
    def failed(self) -> bool:
        return self._result.error is not None

    def feed(self, chunk: bytes) -> None:
        """Take the next piece of the body (as fetched; gzip or not)."""
        if self.failed or not chunk:
            return
        if not self._started:
            self._started = True
            if chunk[:2] == _GZIP_MAGIC:
                self._gunzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            if self._gunzip is None:
                self._xml_feed(chunk, final=False)
                return
            data = chunk
            while True:
                # Inflate in bounded steps, never past the cap (+1 byte to see it exceeded).
                step = min(_INFLATE_STEP, self._max_bytes - self._bytes + 1)
                try:
                    out = self._gunzip.decompress(data, step)
                except zlib.error as exc:
                    raise SitemapError("bad_gzip") from exc
                data = self._gunzip.unconsumed_tail
                self._xml_feed(out, final=False)
                if not data and len(out) < step:
                    break
        except SitemapError as exc:
            self._result.error = exc.reason

    def close(self) -> SitemapResult:
        """End of body: finish parsing and return what the file held."""
        if not self.failed:
            try:
                if self._gunzip is not None and not self._gunzip.eof:
                    raise SitemapError("bad_gzip")
                self._xml_feed(b"", final=True)
                if self._result.kind is None:
                    raise SitemapError("not_a_sitemap")
            except SitemapError as exc:
                self._result.error = exc.reason
        return self._result

    def _xml_feed(self, data: bytes, *, final: bool) -> None:
        self._bytes += len(data)
        if self._bytes > self._max_bytes:
            raise SitemapError("too_large")
        try:
            self._xml.Parse(data, final)
        except expat.ExpatError as exc:
            raise SitemapError("malformed") from exc

    def _refuse_entities(self, *_: object) -> None:
        raise SitemapError("entities")

    def _start(self, name: str, _attrs: dict[str, str]) -> None:
        local = name.rpartition(" ")[2]
        depth = len(self._path)
        self._path.append(local)
        if depth == 0:
            if local not in ("urlset", "sitemapindex"):
                raise SitemapError("not_a_sitemap")
            self._result.kind = "urlset" if local == "urlset" else "sitemapindex"
        elif depth == 1:
            self._fields = {}
        self._text.clear()
        self._text_len = 0

    def _chars(self, data: str) -> None:
        if len(self._path) == 3 and self._text_len <= MAX_TEXT:
            self._text.append(data)
            self._text_len += len(data)

    def _end(self, _name: str) -> None:
        depth = len(self._path)
        local = self._path.pop()
        if depth == 3:
            self._fields[local] = "".join(self._text).strip() if self._text_len <= MAX_TEXT else ""
        elif depth == 2 and local in ("url", "sitemap"):
            self._entry(local)

    def _entry(self, local: str) -> None:
        r = self._result
        if len(r.urls) + len(r.sitemaps) >= self._max_entries:
            raise SitemapError("too_many_entries")
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
