"""Streaming XML read under the guards every crawled XML document gets (sitemaps, feeds). Sans-IO.

Rules (each violation stops the document with a named error; what was read before it is kept, and it is
already bounded by the reader's own caps):

1. The body is fed in chunks. A gzip body (magic ``1f 8b``) is decompressed incrementally, never more than
   the cap at a time: at most ``max_bytes`` of XML per document, else ``too_large`` (a gzip bomb stops
   there, after at most one chunk over). A broken gzip stream is ``bad_gzip``.
2. The XML goes through expat as it arrives. A DOCTYPE or any entity declaration is refused
   (``entities``): neither sitemaps nor feeds need them, and refusing them defeats entity expansion
   ("billion laughs") and external entities. Malformed XML is ``malformed``.
3. Each reader (:class:`polecat.parse.sitemap.SitemapParser`, :class:`polecat.parse.feed.FeedParser`) is
   an :class:`XmlRecords`: it decides what its root may be (else its own ``not_a_...`` error) and at which
   depth its records are (``<url>``, ``<item>``, ``<entry>``); each record's child elements are its fields,
   their text kept up to :data:`MAX_TEXT` characters (longer text is kept as ``""``); deeper elements
   (extensions) are skipped. A reader stops with its own named errors by raising :class:`XmlRefused`.
"""

from __future__ import annotations

import zlib
from typing import Generic, Protocol, TypeVar
from xml.parsers import expat

MAX_TEXT = 4096
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1024 * 1024


class XmlRefused(Exception):
    """Stops reading with the rule's name (the reader's or this module's)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BoundedXml:
    """Rules 1 and 2 around expat; a reader subclasses it with ``_start``, ``_end`` and ``_chars`` (expat's
    element and text events, names as ``"namespace local"``) and ``_finished`` (the end of the body)."""

    def __init__(self, *, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._started = False
        self._gunzip: zlib._Decompress | None = None
        self.error: str | None = None
        """The rule that stopped the document (None: read whole so far)."""
        self.root: str | None = None
        """The root element, once the reader accepted it as its kind of document."""
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
        return self.error is not None

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
                    raise XmlRefused("bad_gzip") from exc
                data = self._gunzip.unconsumed_tail
                self._xml_feed(out, final=False)
                if not data and len(out) < step:
                    break
        except XmlRefused as exc:
            self.error = exc.reason

    def end(self) -> None:
        """End of body: finish parsing (the reader's ``_finished`` names a document it did not see)."""
        if self.failed:
            return
        try:
            if self._gunzip is not None and not self._gunzip.eof:
                raise XmlRefused("bad_gzip")
            self._xml_feed(b"", final=True)
            self._finished()
        except XmlRefused as exc:
            self.error = exc.reason

    def _xml_feed(self, data: bytes, *, final: bool) -> None:
        self._bytes += len(data)
        if self._bytes > self._max_bytes:
            raise XmlRefused("too_large")
        try:
            self._xml.Parse(data, final)
        except expat.ExpatError as exc:
            raise XmlRefused("malformed") from exc

    def _refuse_entities(self, *_: object) -> None:
        raise XmlRefused("entities")

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        raise NotImplementedError

    def _end(self, name: str) -> None:
        raise NotImplementedError

    def _chars(self, data: str) -> None:
        raise NotImplementedError

    def _finished(self) -> None:
        raise NotImplementedError


class _Result(Protocol):
    error: str | None


R = TypeVar("R", bound=_Result)


class XmlRecords(BoundedXml, Generic[R]):
    """Rule 3: a document of records, each a flat set of fields; a subclass accepts the root
    (:meth:`_root`, returning the records' depth) and takes each record (:meth:`_record`)."""

    refusal = "not_this_kind"
    """The error of a document whose root the reader does not accept."""

    def __init__(self, result: R, *, max_bytes: int) -> None:
        super().__init__(max_bytes=max_bytes)
        self._result = result
        self._path: list[str] = []
        self._depth = 0
        self._text: list[str] = []
        self._text_len = 0
        self._fields: dict[str, str] = {}

    def close(self) -> R:
        """End of body: finish parsing and return what the document held."""
        self.end()
        self._result.error = self.error
        return self._result

    def _finished(self) -> None:
        if self.root is None:
            raise XmlRefused(self.refusal)

    def _root(self, local: str) -> int:
        """Accept the root element ``local`` (else raise :class:`XmlRefused`); the records' depth."""
        raise NotImplementedError

    def _record(self, local: str) -> None:
        """A record ``local`` ended; its fields are in ``self._fields``."""
        raise NotImplementedError

    def _field_start(self, local: str, attrs: dict[str, str]) -> None:
        """A field element began (a reader that reads attributes overrides this)."""

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        local = name.rpartition(" ")[2]
        depth = len(self._path)
        self._path.append(local)
        if depth == 0:
            self._depth = self._root(local)
            self.root = local
        elif depth == self._depth:
            self._fields = {}
        elif depth == self._depth + 1:
            self._field_start(local, attrs)
        self._text.clear()
        self._text_len = 0

    def _chars(self, data: str) -> None:
        if len(self._path) == self._depth + 2 and self._text_len <= MAX_TEXT:
            self._text.append(data)
            self._text_len += len(data)

    def _end(self, _name: str) -> None:
        depth = len(self._path)
        local = self._path.pop()
        if depth == self._depth + 2 and local not in self._fields:
            self._fields[local] = "".join(self._text).strip() if self._text_len <= MAX_TEXT else ""
        elif depth == self._depth + 1:
            self._record(local)
