"""``polecat cat DIR URL-or-HASH``: a stored body to stdout, named by the URL as typed or by its content hash
(or a unique prefix of at least 6 hex digits). A body in none of the named stores is looked for in the
stores found only in the crawl's object store (a dead node's sealed segments: polecat/commands/stores.py),
by a scan of them."""

from __future__ import annotations

import argparse
import sys

from polecat.commands.stores import (
    add_store_args,
    body_store,
    canonicalizer,
    digest_for,
    is_hash_prefix,
    latest,
    open_stores,
    sealed_fetches,
)
from polecat.errors import NotFound
from polecat.store.segstore import SegmentStore


def cmd_cat(args: argparse.Namespace) -> int:
    with open_stores(args) as stores:
        key: str = args.key
        try:
            body = _named(args, stores, key)
        except NotFound:
            found = _sealed(args, stores, *((key.lower(), None) if is_hash_prefix(key) else
                                             (None, canonicalizer(args).canonicalize(key.strip()))))
            if found is None:
                raise
            body = found
        sys.stdout.buffer.write(body)
        sys.stdout.buffer.flush()
    return 0


def _named(args: argparse.Namespace, stores: list[SegmentStore], key: str) -> bytes:
    """The body ``key`` names in the named stores; NotFound if none holds it."""
    found = digest_for(stores, key)
    if found is not None:
        store, digest = found
    else:
        url = canonicalizer(args).canonicalize(key.strip())
        if url is None:
            raise NotFound(f"{key!r} is neither an http(s) URL nor a content hash (or a prefix of "
                           "at least 6 hex digits)")
        store, entry = latest(stores, url, with_body=True)
        digest = entry.record.own_hash
    return store.get(digest)


def _sealed(args: argparse.Namespace, stores: list[SegmentStore], prefix: str | None, url: str | None
            ) -> bytes | None:
    """The body a hash prefix or URL names in the stores found in object storage only: the URL's newest
    fetch there (a revisit's body from whichever store holds its original), else None."""
    if prefix is None and url is None:
        return None
    newest: tuple[float, bytes | None, bytes] | None = None
    for f in sealed_fetches(args, stores, []):
        r = f.record
        if prefix is not None and f.payload is not None and r.content_hash.hex().startswith(prefix):
            return f.payload
        if url is not None and r.url == url and (newest is None or r.fetched_at > newest[0]):
            newest = (r.fetched_at, f.payload, r.own_hash)
    if newest is None:
        return None
    if newest[1] is not None:
        return newest[1]
    try:
        return body_store(stores, newest[2]).get(newest[2])
    except NotFound:
        return _sealed(args, stores, newest[2].hex(), None)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cat`` to the ``polecat`` command."""
    p = subparsers.add_parser("cat", help="write a stored page body to stdout")
    add_store_args(p)
    p.add_argument("key", metavar="URL-or-HASH", help="a URL as typed, or a content hash or unique prefix")
    p.set_defaults(func=cmd_cat)
