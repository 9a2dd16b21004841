"""Upgrade a frontier written by an older schema, in place, each step in one transaction.

Schema 1 (polecat before slices) keyed tables by host, origin or bare URL fingerprint; schema 2 keys them
slice-first (polecat/frontier/keys.py). The upgrade rewrites every key and keeps every value. It runs in
the frontier's open write transaction and commits once at the end, so a crash part-way leaves the data
dir exactly as it was, and the next open starts over.

The seen-set of schema 1 holds only fingerprints, which do not tell their host. Its ground truth is
rebuilt from the URLs the frontier knows: every accepted URL is queued or has a ``urls`` record (the
frontier's invariant). A fingerprint found in neither (none should exist) cannot be placed in a slice;
it is counted in the report and logged, never dropped silently.

Schema 4 keeps the keys of schema 3 and compacts two tables' values (records.py): a ``queue`` row
holds the URL without the origin its key names and only the fields that are not their default, a
``urls`` row is packed instead of JSON. :func:`compact_v3` rewrites them in the caller's transaction,
key order kept, into full pages.

Schema 5 numbers the hosts (keys.py rule 1): a ``queue`` key holds its host's number, kept in the host's
record, instead of its name. :func:`renumber_v4` numbers the records in key order and rewrites both tables.

Schema 6 marks a seed's host in its record (db.py rule 18), not by a ``seedhost`` row of ``ops``:
:func:`mark_seeds_v5` moves each row into its host's record and deletes it (a host with no record keeps
its row).

Schema 7 shortens the ``queue`` key (keys.py rule 1: varint host number and FIFO seq, a 16-bit rank, an
8-bit depth): :func:`rekey_queue_v6` rewrites the table, adding to a value what its new key no longer
gives.

The other upgrade of a frontier (near-duplicate fingerprints of an older format) is
``FrontierDB._upgrade_near``. The release that last opened a frontier to write is kept in its schema
record (``"release"``, from 0.2.0 on); :func:`mismatch` words the refusal of what no upgrade can read.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import takewhile
from pathlib import Path
from typing import Any

from polecat.frontier import ovarint
from polecat.frontier.keys import (
    SEED_HOST,
    host_of_row,
    host_row,
    op_key,
    parse_wire_queue_key,
    queue_key_at,
    robots_key,
    url_key,
    wire_queue_prefix,
)
from polecat.frontier.politeness import HostState
from polecat.frontier.records import (
    QueuedUrl,
    UrlRecord,
    decode_host,
    decode_host_v4,
    encode_host,
)
from polecat.frontier.slices import PREFIX_LEN, SLICES, host_slice_prefix, slice_prefix
from polecat.version import __version__

log = logging.getLogger("polecat")

UNRECORDED_RELEASE = "0.1.0 or earlier"
"""What wrote a frontier whose schema names no release: 0.2.0 is the first release that records itself."""

_BATCH = 65_536


@dataclass(frozen=True, slots=True)
class MigrationReport:
    hosts: int
    queued: int
    urls: int
    seen: int
    ops: int
    robots: int
    unplaced_seen: int
    """Schema-1 seen fingerprints with no queued URL or URL record (not carried over)."""


def _drain(txn: Any, db: Any) -> Iterator[list[tuple[bytes, bytes]]]:
    """Yield the table's items in batches, deleting them as they go (keys are rewritten, not kept)."""
    while True:
        with txn.cursor(db=db) as cur:
            batch = [(bytes(k), bytes(v)) for k, v in _take(cur)]
        if not batch:
            return
        for k, _ in batch:
            txn.delete(k, db=db)
        yield batch


def _take(cur: Any) -> Iterator[tuple[bytes, bytes]]:
    if not cur.first():
        return
    for i, item in enumerate(cur):
        if i == _BATCH:
            return
        yield item


def _rewrite(txn: Any, db: Any, scratch: Any, new_key: Callable[[bytes, bytes], bytes]) -> int:
    """Move every item of ``db`` to ``scratch`` under its new key, then back; returns the count."""
    n = 0
    for batch in _drain(txn, db):
        for k, v in batch:
            txn.put(new_key(k, v), v, db=scratch)
            n += 1
    for batch in _drain(txn, scratch):
        for k, v in batch:
            txn.put(k, v, db=db)
    return n


def _queue_key(key: bytes, _: bytes) -> bytes:
    host, _, tail = key.partition(b"\x00")
    return wire_queue_prefix(host.decode()) + tail


def _queued_url(raw: bytes) -> str:
    return QueuedUrl.decode_v3(raw).url


def _recorded_url(raw: bytes) -> str:
    return UrlRecord.decode(raw).url


def _op_key(key: bytes, _value: bytes) -> bytes:
    kind, _, arg = key.decode().partition(":")
    return op_key(kind, arg)


def migrate_v1(txn: Any, tables: dict[str, Any], scratch: Any) -> MigrationReport:
    """Rewrite schema-1 keys to schema 2 in ``txn`` (``tables`` by name; ``scratch`` an empty table)."""
    hosts = _rewrite(txn, tables["hosts"], scratch, lambda k, _: host_row(k.decode()))
    queued = _rewrite(txn, tables["queue"], scratch, _queue_key)
    urls = _rewrite(txn, tables["urls"], scratch, lambda _, v: url_key(UrlRecord.decode(v).url))
    ops = _rewrite(txn, tables["ops"], scratch, _op_key)
    robots = _rewrite(txn, tables["robots"], scratch, lambda k, _: robots_key(k.decode()))
    seen_db = tables["seen"]
    old_seen = txn.stat(seen_db)["entries"]
    # Every accepted URL is queued or recorded: their keys are the new seen-set.
    sources: tuple[tuple[Any, Callable[[bytes], str]], ...] = (
        (tables["queue"], _queued_url), (tables["urls"], _recorded_url))
    for source, url_of in sources:
        with txn.cursor(db=source) as cur:
            for _, v in cur:
                txn.put(url_key(url_of(v)), b"", db=scratch)
    placed = 0
    with txn.cursor(db=scratch) as cur:
        for k in cur.iternext(keys=True, values=False):
            placed += txn.get(bytes(k)[PREFIX_LEN:], db=seen_db) is not None
    unplaced = old_seen - placed
    txn.drop(seen_db, delete=False)
    seen = 0
    for batch in _drain(txn, scratch):
        for k, v in batch:
            txn.put(k, v, db=seen_db)
            seen += 1
    if unplaced:
        log.warning("frontier upgrade: %d seen-set fingerprints had no queued URL or URL record and were "
                    "not carried over (their URLs may be accepted again)", unplaced)
    return MigrationReport(hosts, queued, urls, seen, ops, robots, unplaced)


@dataclass(frozen=True, slots=True)
class CompactReport:
    """What :func:`compact_v3` rewrote, and the bytes of the rows' values before and after."""

    queued: int
    urls: int
    bytes_before: int
    bytes_after: int


def compact_v3(txn: Any, tables: dict[str, Any], scratch: Any) -> CompactReport:
    """Rewrite the ``queue`` and ``urls`` values of schema 3 in schema 4's form, in ``txn`` (``scratch``:
    an empty table). Each table is copied in key order to ``scratch`` and back, appended, so its pages
    come out full (LMDB splits a page in half when a key lands inside it: an in-place rewrite would keep
    the old tree's half-empty pages)."""
    sizes = [0, 0]

    def queue_row(key: bytes, value: bytes) -> bytes:
        new = QueuedUrl.decode_v3(value).encode(parse_wire_queue_key(key)[0])
        sizes[0] += len(value)
        sizes[1] += len(new)
        return new

    def urls_row(_key: bytes, value: bytes) -> bytes:
        new = UrlRecord.decode(value).encode()
        sizes[0] += len(value)
        sizes[1] += len(new)
        return new

    queued = _append_rewrite(txn, tables["queue"], scratch, queue_row)
    urls = _append_rewrite(txn, tables["urls"], scratch, urls_row)
    return CompactReport(queued, urls, sizes[0], sizes[1])


@dataclass(frozen=True, slots=True)
class RenumberReport:
    """What :func:`renumber_v4` rewrote: host records numbered, queue rows rekeyed, and the records it
    made for hosts with URLs queued and no record (none should exist: their URLs are kept so)."""

    hosts: int
    queued: int
    made: int

    def __str__(self) -> str:
        return f"{self.hosts} hosts numbered, {self.queued} queue rows rekeyed, {self.made} records made"


def renumber_v4(txn: Any, tables: dict[str, Any], scratch: Any) -> tuple[RenumberReport, int]:
    """Rewrite the ``hosts`` values and ``queue`` keys of schema 4 in schema 5's form, in ``txn``
    (``scratch``: an empty table): the records are numbered 1, 2, ... in key order, so the queue, read in
    key order, comes out in key order and is appended into full pages. Returns the report and the last
    number given (the host counter, host_table.py rule 14)."""
    nums: dict[str, int] = {}

    def host_value(key: bytes, value: bytes) -> bytes:
        st = decode_host_v4(value)
        st.num = nums[host_of_row(key)] = len(nums) + 1
        return encode_host(st)

    hosts = _append_rewrite(txn, tables["hosts"], scratch, host_value)
    made: dict[str, int] = {}
    queued = 0
    with txn.cursor(db=tables["queue"]) as cur:
        for key, value in cur:
            host, r, depth, seq = parse_wire_queue_key(key)
            num = nums.get(host)
            if num is None:  # queued with no record: one is made, counting them, so they are leased
                num = nums[host] = len(nums) + 1
                made[host] = 0
            if host in made:
                made[host] += 1
            txn.put(host_slice_prefix(host) + _QUEUE_KEY_V6.pack(num, r, depth, seq >> 32 & 0xFFFF,
                                                                 seq & 0xFFFFFFFF), value, db=scratch)
            queued += 1
    _copy_back(txn, scratch, tables["queue"])
    for host, count in made.items():
        txn.put(host_row(host), encode_host(HostState(queued=count, num=nums[host])), db=tables["hosts"])
    if made:
        log.warning("frontier upgrade: %d hosts had URLs queued and no record; records were made for them",
                    len(made))
    return RenumberReport(hosts, queued, len(made)), len(nums)


@dataclass(frozen=True, slots=True)
class SeedMarkReport:
    """What :func:`mark_seeds_v5` moved: ``seedhost`` rows deleted, each marking its host's record, and the
    rows kept, of seed hosts with no record here (a seed refused, or another member's: db.py rule 18)."""

    marked: int
    kept: int

    def __str__(self) -> str:
        return (f"{self.marked} seed hosts marked in their records, their rows deleted; {self.kept} rows of "
                "seed hosts with no record kept")


def mark_seeds_v5(txn: Any, tables: dict[str, Any]) -> SeedMarkReport:
    """Move each ``seedhost`` row of ``ops`` (schema 5) whose host has a record into that record as the seed
    mark and delete it, in ``txn``; the row of a host with no record stays (db.py rule 18: a record made for
    it would count as a host this frontier knows)."""
    ops, hosts = tables["ops"], tables["hosts"]
    head = f"{SEED_HOST}:".encode()
    marked = kept = 0
    for s in range(SLICES):
        prefix = slice_prefix(s) + head
        prefix_of = partial(_starts, prefix)
        with txn.cursor(db=ops) as cur:  # the slice's rows read before they are deleted
            found = cur.set_range(prefix)
            keys = list(takewhile(prefix_of, map(bytes, cur.iternext(values=False)))) if found else []
        for key in keys:
            row = prefix[:PREFIX_LEN] + key[len(prefix):]
            raw = txn.get(row, db=hosts)
            if raw is None:
                kept += 1
                continue
            st = decode_host(raw)
            st.seed = True
            txn.put(row, encode_host(st), db=hosts)
            txn.delete(key, db=ops)
            marked += 1
    return SeedMarkReport(marked, kept)


_QUEUE_KEY_V6 = struct.Struct(">IIHHI")
"""A schema-5 and -6 ``queue`` key after its slice: host number, rank, depth, FIFO seq in 6 bytes (its high
16 bits, then its low 32)."""


@dataclass(frozen=True, slots=True)
class RekeyReport:
    """What :func:`rekey_queue_v6` rewrote: queue rows rekeyed, their keys' bytes before and after, and
    the values that took a field their new key no longer gives."""

    queued: int
    key_bytes_before: int
    key_bytes_after: int
    values_grown: int

    def __str__(self) -> str:
        return (f"{self.queued} queue rows rekeyed ({self.key_bytes_before} -> {self.key_bytes_after} key "
                f"bytes), {self.values_grown} values took their importance or depth")


def rekey_queue_v6(txn: Any, tables: dict[str, Any], scratch: Any) -> RekeyReport:
    """Rewrite the ``queue`` rows of schema 6 in schema 7's form (keys.py rule 1), in ``txn``
    (``scratch``: an empty table). The table is read in key order and schema 7's order is the same but
    where two ranks fall on one point of the coarser grid (or two depths past 255), so nearly every key
    is appended into full pages; the others are put in place."""
    enc, head = ovarint.encode, _QUEUE_KEY_V6.unpack_from
    queued = before = after = grown = 0
    last = b""
    with txn.cursor(db=tables["queue"]) as cur:
        for key, value in cur:
            num, r, depth, hi, lo = head(key, PREFIX_LEN)
            new = queue_key_at(key[:PREFIX_LEN] + enc(num), r, depth, hi << 32 | lo)
            raw = QueuedUrl.value_v7(value, r, depth)
            grown += len(raw) != len(value)
            txn.put(new, raw, db=scratch, append=new > last)
            last = max(last, new)
            queued += 1
            before += len(key)
            after += len(new)
    _copy_back(txn, scratch, tables["queue"])
    return RekeyReport(queued, before, after, grown)


def _starts(prefix: bytes, key: bytes) -> bool:
    return key.startswith(prefix)


def _append_rewrite(txn: Any, db: Any, scratch: Any, convert: Callable[[bytes, bytes], bytes]) -> int:
    n = 0
    with txn.cursor(db=db) as cur:
        for key, value in cur:
            txn.put(key, convert(key, value), db=scratch, append=True)
            n += 1
    _copy_back(txn, scratch, db)
    return n


def _copy_back(txn: Any, scratch: Any, db: Any) -> None:
    """Replace the rows of ``db`` by those of ``scratch`` (appended in key order: full pages), and empty
    ``scratch``."""
    txn.drop(db, delete=False)
    with txn.cursor(db=scratch) as cur:
        for key, value in cur:
            txn.put(key, value, db=db, append=True)
    txn.drop(scratch, delete=False)


def release_of(schema: dict[str, Any]) -> str:
    """The release that last opened a frontier for writing, from its schema record."""
    release = schema.get("release")
    return release if isinstance(release, str) else UNRECORDED_RELEASE


def _version(release: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in release.split("."))
    except ValueError:
        return ()


def mismatch(frontier_dir: Path, wrote: str, found: str, reads: str, *, upgradable: bool) -> str:
    """The error for a frontier this release cannot read as it is: the release that wrote it and what it
    found, this release and what it reads, and what to do: open it with the newer release that wrote it,
    upgrade it in place (``upgradable``: this release knows how), or open it with the release that wrote
    it (no upgrade exists)."""
    if _version(wrote) > _version(__version__):
        hint = f"open it with polecat {wrote} or later"
    elif upgradable:
        hint = f"`polecat upgrade {frontier_dir.parent}` upgrades it in place"
    else:
        hint = f"this release has no upgrade from it: open it with polecat {wrote}"
    return (f"frontier in {frontier_dir} was written by polecat {wrote} with {found}; this is polecat "
            f"{__version__}, which reads {reads}; {hint}")
