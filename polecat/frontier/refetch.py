"""URLs to fetch again because what was fetched of them was lost (``polecat store repair``).

Rules (this module owns them):

1. A tool outside the crawl asks for a refetch by writing a ``refetch`` op (key: polecat/frontier/keys.py)
   -> URL into the frontier's ``ops`` table. It holds the page store's writer lock meanwhile, so no
   crawl runs.
2. The frontier, when it opens, queues each such URL that it records as done again, at depth 0 with
   seed importance: its done record is dropped and the seen-set is not asked (the URL was accepted once
   already). A URL not recorded done is still queued and needs nothing. The entry is deleted in the
   same transaction, so a crash before the commit replays it and nothing is lost.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import lmdb

from polecat.faults import storage_fault
from polecat.frontier.db import TABLES
from polecat.frontier.keys import refetch_key

KIND = "refetch"
"""The op kind of a refetch request."""


def request_refetch(frontier_dir: Path, urls: Iterable[str]) -> int:
    """Ask the frontier in ``frontier_dir`` to fetch ``urls`` again when it next opens; returns how many
    requests were written (0 when there is no frontier there)."""
    if not (frontier_dir / "data.mdb").exists():
        return 0
    try:
        env = lmdb.open(str(frontier_dir), max_dbs=len(TABLES) + 2, subdir=True)
        try:
            ops = env.open_db(b"ops")
            n = 0
            with env.begin(write=True) as txn:
                for url in urls:
                    txn.put(refetch_key(url), url.encode(), db=ops)
                    n += 1
            return n
        finally:
            env.close()
    except lmdb.Error as exc:
        raise storage_fault(exc, "frontier", frontier_dir) from exc
