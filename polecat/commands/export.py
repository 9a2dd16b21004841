"""``polecat export DIR --jsonl FILE``: one JSON object per fetched page, as a feed export gives.

Each page record of the store (archived robots.txt responses left out) becomes one line, in append
order, streamed (one body in memory at a time):

- ``url``, ``status``, ``fetched_at`` (ISO 8601 UTC), ``content_type``, ``hash`` (content hash, hex, of the
  body the fetch received, also for a near-duplicate whose body is not stored), ``duplicate_of`` (the
  URL this page duplicates, or null), ``truncated``.
- ``final_url``: where the page ended up. For a redirect (3xx) the ``Location`` chain is followed through
  the crawl's own records (at most :data:`MAX_HOPS`); otherwise the URL itself.
- ``title``, ``text`` (visible text) and ``outlinks`` (canonical URLs) of a 2xx HTML page, parsed again
  from the bytes that fetch received, with the crawler's own parser and canonicalizer: a near-duplicate's
  own page (polecat/store/delta.py), an exact copy's or an unchanged refetch's identical bytes. Empty for
  other types, redirects, and a near-duplicate crawled with ``dedup.near_duplicates = "drop"`` (its
  bytes were not kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from polecat.commands.pages import is_robots, iso
from polecat.commands.stores import add_store_args, body_store, canonicalizer, open_stores, sealed_fetches
from polecat.commands.stores import latest as newest
from polecat.dedup.canon import Canonicalizer
from polecat.errors import NotFound
from polecat.parse.charset import decode_html
from polecat.parse.html import parse_html
from polecat.store.base import FetchRecord

MAX_HOPS = 10
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def _media_type(record: FetchRecord) -> tuple[str, str | None]:
    value = record.header("content-type") or ""
    media, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.strip().partition("=")
        if key.lower() == "charset":
            charset = val.strip('"\' ') or None
    return media.strip().lower(), charset


class Feed:
    """Turns store records into feed objects. ``latest(url)`` gives the URL's newest record (any store),
    ``body(record)`` the bytes that fetch received (its own hash's body: for a near-duplicate its own
    page, not the one it resembles), None when they are not stored; ``canon`` is the crawl's
    canonicalizer (for outlinks)."""

    def __init__(self, latest: Callable[[str], FetchRecord | None],
                 body: Callable[[FetchRecord], bytes | None],
                 canon: Canonicalizer) -> None:
        self._latest = latest
        self._body = body
        self._canon = canon

    def final_url(self, record: FetchRecord) -> str:
        url, current = record.url, record
        for _ in range(MAX_HOPS):
            location = current.header("location")
            if not (300 <= current.status < 400) or location is None:
                return url
            target = self._canon.canonicalize(location, url)
            if target is None:
                return url
            url = target
            found = self._latest(url)
            if found is None:
                return url
            current = found
        return url

    def item(self, record: FetchRecord) -> dict[str, Any]:
        media, charset = _media_type(record)
        title, text, links = "", "", []
        body = self._body(record) if media in HTML_TYPES and record.size and 200 <= record.status < 300 \
            else None
        if body is not None:
            parsed = parse_html(decode_html(body, charset), record.url)
            title, text = parsed.title, parsed.text
            links = list(dict.fromkeys(self._canon.canonicalize_links(parsed.links, parsed.base)))
        return {
            "url": record.url, "final_url": self.final_url(record), "status": record.status,
            "fetched_at": iso(record.fetched_at), "content_type": media, "title": title, "text": text,
            "outlinks": links, "hash": record.own_hash.hex(), "duplicate_of": record.duplicate_of,
            "truncated": record.truncated,
        }

    def write(self, records: Iterator[FetchRecord], out: TextIO) -> int:
        """Write one line per record; returns how many."""
        n = 0
        for record in records:
            out.write(json.dumps(self.item(record), ensure_ascii=False) + "\n")
            n += 1
        return n


def cmd_export(args: argparse.Namespace) -> int:
    """``polecat export DIR --jsonl FILE|-``: every page of the crawl through :class:`Feed`."""
    with open_stores(args) as stores:
        def latest_record(url: str) -> FetchRecord | None:
            try:
                return newest(stores, url, with_body=False)[1].record
            except NotFound:
                return None

        def body(record: FetchRecord) -> bytes | None:
            try:
                return body_store(stores, record.own_hash).get(record.own_hash)
            except NotFound:  # a near-duplicate crawled with dedup.near_duplicates = "drop"
                return None

        records = (r for store in stores for r in store.records() if not is_robots(r.url))
        feed = Feed(latest_record, body, canonicalizer(args))
        # A dead node's store, from its sealed segments (polecat/commands/stores.py): each fetch with the
        # body its record holds (a revisit there has none).
        held: list[bytes | None] = [None]
        skipped: list[str] = []

        def sealed() -> Iterator[FetchRecord]:
            for f in sealed_fetches(args, stores, skipped):
                if not is_robots(f.record.url):
                    held[0] = f.payload
                    yield f.record

        dead = Feed(latest_record, lambda _: held[0], canonicalizer(args))
        if str(args.jsonl) == "-":
            n = feed.write(records, sys.stdout) + dead.write(sealed(), sys.stdout)
            sys.stdout.flush()
        else:
            with open(args.jsonl, "w", encoding="utf-8") as out:
                n = feed.write(records, out) + dead.write(sealed(), out)
        print(f"{n} pages written to {args.jsonl}", file=sys.stderr)
        for why in skipped:
            print(f"skipped: {why}", file=sys.stderr)
    return 1 if skipped else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``export`` (JSON lines) to the ``polecat`` command."""
    p = subparsers.add_parser("export", help="one JSON line per fetched page (url, status, title, text...)")
    add_store_args(p)
    p.add_argument("--jsonl", type=Path, required=True, metavar="FILE|-", help="output file, - for stdout")
    p.set_defaults(func=cmd_export)
