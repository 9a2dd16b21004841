"""``polecat cat DIR URL-or-HASH``: a stored body to stdout, named by the URL as typed or by its content hash
(or a unique prefix of at least 6 hex digits)."""

from __future__ import annotations

import argparse
import sys

from polecat.commands.stores import add_store_args, canonicalizer, digest_for, latest, open_stores
from polecat.errors import NotFound


def cmd_cat(args: argparse.Namespace) -> int:
    with open_stores(args) as stores:
        key: str = args.key
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
        sys.stdout.buffer.write(store.get(digest))
        sys.stdout.buffer.flush()
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cat`` to the ``polecat`` command."""
    p = subparsers.add_parser("cat", help="write a stored page body to stdout")
    add_store_args(p)
    p.add_argument("key", metavar="URL-or-HASH", help="a URL as typed, or a content hash or unique prefix")
    p.set_defaults(func=cmd_cat)
