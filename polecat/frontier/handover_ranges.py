"""Moving whole slices between frontiers: the table side of export and release.

A slice is one contiguous key range in every slice-keyed table (polecat/frontier/keys.py), so export
reads ranges (through polecat/frontier/tables.py) and release deletes them (in LMDB, for
:class:`~polecat.frontier.db.FrontierDB`'s ``DeleteSlices``); neither scans another slice. The
frontier's in-memory state (host records, the ready heap, leases) is its own business:
:class:`~polecat.frontier.handover.SliceHandover` flushes it before export and drops it on release.

Bundles list tables in :data:`SLICED_TABLES` order, which is the order adoption needs: operator controls
and robots answers first, host records before their queues, queues before the seen entries (a queued
URL the adopter has already seen is not queued twice). Content claims (polecat/cluster/claims.py rule 8)
are keyed by content slice, which the Ring places with the URL slice of the same number: they move with
it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from polecat.frontier.bundle import BundleWriter, Fence, SliceBundle
from polecat.frontier.keys import GLOBAL, host_of_row, queue_key_num, wire_queue_key
from polecat.frontier.records import QueuedUrl, UrlRecord, decode_host, encode_host_v4
from polecat.frontier.slices import PREFIX_LEN, SLICES, check_slices, prefixes_slices, slice_prefix
from polecat.frontier.tables import Snapshot, TableReader
from polecat.writes import Table

log = logging.getLogger("polecat")

SLICED_TABLES: tuple[Table, ...] = ("ops", "robots", "hosts", "urls", "queue", "seen", "priors", "claims")


class WrittenSlices:
    """The slice marks of polecat/frontier/tables.py rule 6, kept by both databases: marks are the
    2-byte key prefixes written (a set add per write), turned into slice numbers at a commit."""

    def __init__(self) -> None:
        self.marks: set[bytes] = set()
        """Key prefixes written since the last commit (``marks.add(key[:PREFIX_LEN])`` per write)."""
        self.sliced = frozenset(SLICED_TABLES)
        self._committed: set[int] = set(range(SLICES))

    def mark_all(self, ids: Iterable[int]) -> None:
        self.marks.update(slice_prefix(s) for s in ids)

    def commit(self) -> None:
        slices = prefixes_slices(self.marks)  # one unpack: a seeds batch marks ~a slice a seed
        if slices is None or max(slices, default=0) >= SLICES:
            # a cross-slice op (GLOBAL, or a key naming no slice): in every slice's bundle
            self._committed.update(range(SLICES))
        else:
            self._committed.update(slices)
        self.marks.clear()

    def take(self) -> frozenset[int]:
        taken = frozenset(self._committed)
        self._committed.clear()
        return taken

    def give_back(self, slices: Iterable[int]) -> None:
        self._committed.update(slices)


def export_ranges(tables: TableReader, ids: frozenset[int], *, created: float,
                  hosts: Mapping[bytes, bytes] | None = None, fence: Fence | None = None,
                  books: bool = True) -> SliceBundle:
    """A bundle of every record of the slices ``ids`` (plus the cross-slice ops, rule 4 of keys.py).
    ``hosts``: host records newer than the transaction's (kept in memory until the next commit);
    ``fence``: the sender's fencing token, for a hand-over; ``books`` False: without the content claim
    books, for a reader of wire 2 (0.3.0), which refuses a table it does not know."""
    names = SLICED_TABLES if books else tuple(t for t in SLICED_TABLES if t != "claims")
    out = BundleWriter(ids, names, created=created, fence=fence)
    newer: dict[bytes, dict[bytes, bytes]] = {}
    for key, value in (hosts or {}).items():
        newer.setdefault(key[:PREFIX_LEN], {})[key] = value
    order = sorted(ids)
    names_of: dict[int, str] = {}
    """Host numbers to names, learnt from the ``hosts`` rows (keys.py rule 1)."""
    for table in names:
        prefixes = [slice_prefix(s) for s in order]
        if table == "ops":
            prefixes.append(GLOBAL)
        for prefix in prefixes:
            items: Iterable[tuple[bytes, bytes]] = tables.items(table, prefix)
            if table == "hosts" and prefix in newer:
                items = sorted({**dict(items), **newer[prefix]}.items())
            if table == "hosts":
                items = _hosts_wire(items, names_of)
            elif table == "queue":
                items = _queue_wire(items, names_of)
            elif table == "urls":
                items = ((key, UrlRecord.decode(value).encode_v3()) for key, value in items)
            for key, value in items:
                out.add(table, key, value)
    return out.finish()


# A bundle carries the rows in the form 0.3.0 reads and writes (slice bundle version 1): ``hosts`` values
# without their number, ``queue`` keys with the host's name (keys.py rule 1) and values of schema 3,
# ``urls`` values of schema 3. They are converted from this schema's rows on export and back on adoption
# (polecat/frontier/handover.py), so the bundle and the cluster's wire stay as they were.


def _hosts_wire(items: Iterable[tuple[bytes, bytes]],
                names_of: dict[int, str]) -> Iterator[tuple[bytes, bytes]]:
    """The ``hosts`` rows in the wire form; ``names_of`` learns each host's number (its queue rows come
    next, in :data:`SLICED_TABLES` order)."""
    for key, value in items:
        st = decode_host(value)
        names_of[st.num] = host_of_row(key)
        yield key, encode_host_v4(st)


def _queue_wire(items: Iterable[tuple[bytes, bytes]],
                names_of: dict[int, str]) -> Iterator[tuple[bytes, bytes]]:
    for key, value in items:
        host = names_of.get(queue_key_num(key))
        if host is None:  # a row no host record numbers: it cannot be named, so it is not carried
            log.warning("slice export: a queued URL of host number %d, which no host record has, "
                        "left out", queue_key_num(key))
            continue
        yield wire_queue_key(key, host), QueuedUrl.decode(value, key, host).encode_v3()


def delete_ranges(txn: Any, tables: Mapping[str, Any], ids: frozenset[int]) -> int:
    """Delete every record of the slices ``ids`` from the slice-keyed tables among ``tables`` (LMDB's:
    the seen table has its own, polecat/frontier/seenlog.py rule 3); returns how many."""
    n = 0
    for table in SLICED_TABLES:
        db = tables.get(table)
        if db is None:
            continue
        for s in sorted(ids):
            prefix = slice_prefix(s)
            with txn.cursor(db=db) as cur:
                if not cur.set_range(prefix):
                    continue
                while bytes(cur.key()).startswith(prefix):
                    n += 1
                    if not cur.delete():
                        break
    return n


class CommittedSnapshot:
    """The frontier's last commit, to export slices from (polecat/frontier/tables.py rule 5). Use it on
    the thread that opened it only (a worker thread exporting from an LMDB snapshot crashed the process
    at a later ``lmdb.open``). Close it once done: an open snapshot keeps LMDB from reusing the pages it
    reads."""

    def __init__(self, tables: Snapshot) -> None:
        self._tables = tables

    def export(self, ids: frozenset[int], now: float, *, books: bool = True) -> SliceBundle:
        """A bundle of the slices ``ids`` as of the snapshot, stamped ``now`` (``books``: as
        :func:`export_ranges`)."""
        return export_ranges(self._tables, check_slices(ids), created=now, books=books)

    def close(self) -> None:
        self._tables.close()
