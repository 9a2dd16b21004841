"""A sitemap's or a feed's body read as it arrives: the fetcher's :class:`~polecat.fetch.http.BodySink`
for the responses that may be one.

Rules (this module owns them):

1. The body goes to each candidate reader (a sitemap parser, a feed parser, or both for a plain XML type)
   as it is read, and into an incremental content hash (the change test of the refresh policy), never
   whole into memory: up to the protocol's 50 MB (:data:`polecat.parse.sitemap.MAX_BYTES`, plus one read
   to see it exceeded), whatever ``fetch.max_body_bytes`` says for pages.
2. Until a reader accepts the document's root, the body is also kept, up to the page cap: an XML
   response that is neither a sitemap nor a feed is then handled as a page, cut at the cap like any.
   Once a reader accepted the root the kept bytes are dropped.
3. The read stops (``done``) once every reader has stopped and nothing more is kept: past a reader's
   caps, the rest of a hostile body is never read.
"""

from __future__ import annotations

import hashlib

from polecat.parse.feed import FeedParser, FeedResult
from polecat.parse.sitemap import MAX_BYTES, SitemapParser, SitemapResult
from polecat.store.base import SHA256

STREAM_MAX_BYTES = MAX_BYTES + 64 * 1024
"""Decoded bytes read at most (rule 1): the protocol's cap and a read more, so the parser names it."""


class XmlBody:
    """One response's body into its readers (see the module docstring)."""

    __slots__ = ("_hash", "_keep", "cut", "head", "readers")

    def __init__(self, readers: tuple[SitemapParser | FeedParser, ...], hash_name: str, keep: int) -> None:
        self.readers = readers
        self._hash = hashlib.sha256() if hash_name == SHA256 else hashlib.blake2b(digest_size=32)
        self._keep = keep
        self.head: bytearray | None = bytearray()
        """The body so far while no reader accepted it (rule 2); None after one did."""
        self.cut = False
        """The kept body reached the page cap."""

    @property
    def max_bytes(self) -> int:
        return STREAM_MAX_BYTES

    def feed(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        for reader in self.readers:
            reader.feed(chunk)
        head = self.head
        if head is None:
            return
        if any(reader.root is not None for reader in self.readers):
            self.head = None
        elif not self.cut:
            room = self._keep - len(head)
            head += chunk[:room]
            self.cut = len(chunk) > room

    @property
    def done(self) -> bool:
        return all(reader.failed for reader in self.readers) and (self.head is None or self.cut)

    def digest(self) -> bytes:
        """The content hash of the body read (the store's hash function)."""
        return self._hash.digest()

    def close(self) -> tuple[SitemapResult | FeedResult, bool]:
        """What the reader that accepted the document found, and True; else the first reader's (its
        error names why it did not), and False."""
        results = [reader.close() for reader in self.readers]
        for reader, result in zip(self.readers, results, strict=True):
            if reader.root is not None:
                return result, True
        return results[0], False
