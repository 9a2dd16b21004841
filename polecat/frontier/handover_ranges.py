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

from collections.abc import Iterable, Mapping
from typing import Any

from polecat.frontier.bundle import BundleWriter, Fence, SliceBundle
from polecat.frontier.keys import GLOBAL
from polecat.frontier.records import QueuedUrl, UrlRecord
from polecat.frontier.slices import PREFIX_LEN, SLICES, check_slices, prefix_slice, slice_prefix
from polecat.frontier.tables import Snapshot, TableReader
from polecat.writes import Table

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
        for prefix in self.marks:
            s = prefix_slice(prefix) if len(prefix) == PREFIX_LEN else SLICES
            if s >= SLICES:  # a cross-slice op (GLOBAL, or a key naming no slice): in every slice's bundle
                self._committed.update(range(SLICES))
                break
            self._committed.add(s)
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
    for table in names:
        prefixes = [slice_prefix(s) for s in order]
        if table == "ops":
            prefixes.append(GLOBAL)
        for prefix in prefixes:
            items: Iterable[tuple[bytes, bytes]] = tables.items(table, prefix)
            if table == "hosts" and prefix in newer:
                items = sorted({**dict(items), **newer[prefix]}.items())
            if table in _WIRE_FORM:
                items = ((key, _WIRE_FORM[table](key, value)) for key, value in items)
            for key, value in items:
                out.add(table, key, value)
    return out.finish()


def _queue_wire(key: bytes, value: bytes) -> bytes:
    return QueuedUrl.from_row(key, value).encode_v3()


def _urls_wire(_key: bytes, value: bytes) -> bytes:
    return UrlRecord.decode(value).encode_v3()


_WIRE_FORM = {"queue": _queue_wire, "urls": _urls_wire}
"""The values a bundle carries in the form of schema 3 (slice bundle version 1, what 0.3.0 reads and
writes), converted from this schema's compact rows on export and back on adoption
(polecat/frontier/handover.py), so the bundle and the cluster's wire stay as they were."""


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
