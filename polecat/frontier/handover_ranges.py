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
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from functools import partial
from typing import Any

from polecat.frontier.bundle import BundleWriter, Fence, SliceBundle
from polecat.frontier.keys import GLOBAL, SEED_HOST, host_of_row, op_key, queue_key_num, wire_queue_key
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


def export_steps(tables: TableReader, ids: frozenset[int], *, created: float,
                 hosts: Mapping[bytes, bytes] | None = None, fence: Fence | None = None, books: bool = True,
                 budget: int | None = None) -> Generator[int, None, SliceBundle]:
    """A bundle of every record of the slices ``ids`` (plus the cross-slice ops, rule 4 of keys.py), read
    ``budget`` rows at a time: each ``next`` reads at most ``budget`` rows of ``tables`` and yields how
    many it read; the last one returns the bundle (``budget`` None: all at once, in one ``next``).
    ``hosts``: host records newer than the transaction's (kept in memory until the next commit);
    ``fence``: the sender's fencing token, for a hand-over; ``books`` False: without the content claim
    books, for a reader of wire 2 (0.3.0), which refuses a table it does not know. ``tables`` must not
    change between two steps: a committed snapshot's (:class:`CommittedSnapshot`), or one call."""
    names = SLICED_TABLES if books else tuple(t for t in SLICED_TABLES if t != "claims")
    out = BundleWriter(ids, names, created=created, fence=fence)
    newer: dict[bytes, dict[bytes, bytes]] = {}
    for key, value in (hosts or {}).items():
        newer.setdefault(key[:PREFIX_LEN], {})[key] = value
    order = sorted(ids)
    names_of: dict[int, str] = {}
    """Host numbers to names, learnt from the ``hosts`` rows (keys.py rule 1)."""
    wire: dict[str, Callable[[bytes, bytes], tuple[bytes, bytes] | None]] = {
        "hosts": partial(_host_wire, names_of, out), "queue": partial(_queue_wire, names_of),
        "urls": _url_wire}
    n = 0
    for table in names:
        convert = wire.get(table)
        prefixes = [slice_prefix(s) for s in order]
        if table == "ops":
            prefixes.append(GLOBAL)
        for prefix in prefixes:
            rows: Iterator[tuple[bytes, bytes]] = iter(tables.items(table, prefix))
            if table == "hosts" and prefix in newer:
                rows = _overlaid(rows, newer[prefix])
            while True:
                if budget is not None and n >= budget:
                    yield n
                    n = 0
                row = next(rows, None)
                if row is None:
                    break
                n += 1
                if convert is not None:
                    row = convert(*row)
                if row is not None:
                    out.add(table, *row)
    return out.finish()


def export_step(steps: Generator[int, None, SliceBundle]) -> SliceBundle | None:
    """One step of ``steps`` (:func:`export_steps`): the bundle once it ends, else None."""
    try:
        next(steps)
    except StopIteration as done:
        bundle: SliceBundle = done.value
        return bundle
    return None


def export_ranges(tables: TableReader, ids: frozenset[int], *, created: float,
                  hosts: Mapping[bytes, bytes] | None = None, fence: Fence | None = None,
                  books: bool = True) -> SliceBundle:
    """:func:`export_steps` in one call."""
    bundle = export_step(export_steps(tables, ids, created=created, hosts=hosts, fence=fence, books=books))
    if bundle is None:
        raise AssertionError("an export without a budget ends in one step")
    return bundle


def _overlaid(rows: Iterator[tuple[bytes, bytes]],
              newer: Mapping[bytes, bytes]) -> Iterator[tuple[bytes, bytes]]:
    """``rows`` (in key order) with ``newer``'s records in their place or in their order, read as they go."""
    extra = sorted(newer.items())
    i = 0
    for key, value in rows:
        while i < len(extra) and extra[i][0] < key:
            yield extra[i]
            i += 1
        if i < len(extra) and extra[i][0] == key:
            i += 1
            yield key, newer[key]
        else:
            yield key, value
    yield from extra[i:]


# A bundle carries the rows in the form 0.3.0 reads and writes (slice bundle version 1): ``hosts`` values
# without their number, ``queue`` keys with the host's name (keys.py rule 1) and values of schema 3,
# ``urls`` values of schema 3, and a seed host's mark (schema 6, db.py rule 18) as a ``seedhost`` row of
# ``ops`` (keys.py rule 4), written just before its record. They are converted from this schema's rows on
# export and back on adoption (polecat/frontier/handover.py rule 11), so the bundle and the cluster's wire
# (hand-overs and checkpoints) stay as they were, readable both ways between 0.3.x and this release.


def _host_wire(names_of: dict[int, str], out: BundleWriter, key: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A ``hosts`` row in the wire form, with its seed mark as a row of ``ops`` put in ``out``; ``names_of``
    learns its host's number (its queue rows come next, in :data:`SLICED_TABLES` order)."""
    st = decode_host(value)
    host = names_of[st.num] = host_of_row(key)
    if st.seed:
        out.add("ops", op_key(SEED_HOST, host), b"")
    return key, encode_host_v4(st)


def _queue_wire(names_of: dict[int, str], key: bytes, value: bytes) -> tuple[bytes, bytes] | None:
    host = names_of.get(queue_key_num(key))
    if host is None:  # a row no host record numbers: it cannot be named, so it is not carried
        log.warning("slice export: a queued URL of host number %d, which no host record has, left out",
                    queue_key_num(key))
        return None
    queued = QueuedUrl.decode(value, key, host)
    return wire_queue_key(key, host, queued.depth), queued.encode_v3()


def _url_wire(key: bytes, value: bytes) -> tuple[bytes, bytes]:
    return key, UrlRecord.decode(value).encode_v3()


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

    def export_steps(self, ids: frozenset[int], now: float, *, fence: Fence | None = None,
                     books: bool = True, budget: int | None = None) -> Generator[int, None, SliceBundle]:
        """:meth:`export` in steps of at most ``budget`` rows (:func:`export_steps`): the snapshot does
        not change between two, whatever the loop writes meanwhile."""
        return export_steps(self._tables, check_slices(ids), created=now, fence=fence, books=books,
                            budget=budget)

    def get(self, table: Table, key: bytes) -> bytes | None:
        """The record of ``key`` in ``table`` as of the snapshot."""
        return self._tables.get(table, key)

    def close(self) -> None:
        self._tables.close()
