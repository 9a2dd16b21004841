"""The frontier's write-ahead log: each node commit's writes, appended and fsynced, so that LMDB commits
(which copy every page a transaction dirtied, ~4 KB per row changed) can be rare.

Why (issue 39, benchmarks/README.md "Issue 39: the write-ahead log"): a commit of 2,000 changes touched
~2,000 random queue and host pages, each written whole at every LMDB commit (~8.8 KB per URL at 1M URLs).
Here a commit writes its records once (~100-250 B per URL), and the LMDB transaction is committed (a
LMDB commit, polecat/frontier/db.py rule 6) once the log holds ``frontier.log_mb``.

Rules:

1. An entry is ``length (4 bytes) | sequence (8) | CRC-32 of sequence and payload (4) | payload``, the
   payload the msgpack of the commit's writes (:mod:`polecat.writes`, in the order applied). Sequences
   are the frontier's commit counter: they increase along the file.
2. :meth:`WriteLog.append` writes one entry and fsyncs the file before it returns; it runs on the
   frontier's writer thread (polecat/frontier/writer.py rule 5), in order with the LMDB commits there.
3. :meth:`WriteLog.read` answers the entries whole, in order, and stops at the first that is not (a
   short header or payload, a wrong checksum): that tail, an append a crash cut, is counted
   (:attr:`WriteLog.dropped`), logged as a WARNING and cut off the file, so the next append follows the
   last whole entry. An absent file is an empty log (a 0.3.0 data dir has none).
4. :meth:`WriteLog.reset` empties the file once an LMDB commit holding every entry is durable; a crash
   before it leaves entries the LMDB commit covers, which the replay skips by their sequence (db.py rule 7).
5. A :class:`LogOverlay` reads the entries on top of the last LMDB commit, as a snapshot of the last
   commit (db.py rule 9): a key the entries wrote answers what they wrote last; a slice they released
   (``DeleteSlices``) hides what the LMDB holds of it in the slice-keyed tables and ``seen``. The
   dupsort ``near`` table is not overlaid (no snapshot reader reads it). It reads the entries' rows as
   the log holds them (:meth:`WriteLog.rows`), no write object a row, and a reader that names the tables
   it reads gets their rows kept only (a read of another raises :class:`NotOverlaid`): ``polecat status``
   after a kill -9 of a 1M-host crawl, ~950,000 writes in the log, kept every table's rows as write
   objects in ~1 s of CPU (benchmarks/README.md, "Issue 39: polecat status after a kill -9").
6. A reader of a data dir that a node may be writing (``polecat status``) reads the log file
   (:func:`read_log`) *before* it begins its LMDB read transaction, then overlays the entries past that
   transaction's sequence: an LMDB commit between the two holds every entry read (skipped by their
   sequence), so the reader sees the state of one commit, never a gap. It never changes the file; an
   entry whose append is under way is not whole yet and is left out, as the tail of rule 3. It first
   tries rule 9's read, which does not hold the file, and reads so only when that one cannot tell.
7. A commit's entry is encoded as its writes are applied (:class:`Entry`, db.py rule 6), and
   :meth:`WriteLog.append` writes it from the encoder's buffer: a commit holds its writes as their bytes
   (~36 B a write), never as the writes' objects (~160 B) nor as a second copy. A ``PutRows``
   (polecat/writes.py rule 5) is its rows' ``Put`` s here: the entry is byte for byte the same as with one
   ``Put`` a row, and the readers never meet one. Its rows are packed by a ``map`` over them, no Python
   loop a row (benchmarks/README.md, "Issue 39: seed ingest, third pass"). Issue 39: a crawl queueing
   a 50,000-URL sitemap (150,000 writes in one commit) held 24 MB of writes until the append and ~25 MB
   more to encode them at once, 35 MB of peak RSS over the crawl without a log (benchmarks/README.md,
   "Issue 39: the write-ahead log").
8. The readers (the replay, :class:`LogOverlay`, rules 6 and 9's) read the file :data:`_CHUNK` bytes at
   a time and decode an entry's writes one at a time as they are applied (the replay: as they are
   gathered, at most a batch's, rule 11), never its writes as a list nor (but rule 6's read) the file
   whole: an entry's checksum is verified over its bytes, read in chunks,
   before any of its writes is decoded, so a torn or in-progress entry (rules 3 and 6) is left out whole;
   then its bytes are read again as its writes are decoded. An entry whose checksum holds but whose writes
   do not decode is no crash's tail: its reader raises ``ValueError`` when it reaches it (the replay
   refuses the open, db.py rule 7). A 150,000-write entry (a 50,000-URL sitemap) cost the replay 56 MB of
   Python objects at its peak, 12 MB now (benchmarks/README.md, "Issue 39: the write-ahead log",
   "Reading the log a write at a time").
9. Rule 6's reader may read the file *after* it begins its read transaction, at sequence ``S``, as it
   is then: its overlay is the state of one commit if, once read, the entries it applied follow ``S``
   one by one (:class:`Following`) and a read transaction begun after the read still finds ``S`` (no LMDB
   commit since, so no :meth:`WriteLog.reset`: rule 4 empties the file only after one). The log's
   sequences follow one another past the LMDB's: a commit is an entry or an LMDB commit, and an LMDB
   commit's own sequence is never an entry. A reset the reader did not see (of the LMDB commit ``S``
   itself, between its read transaction and its reads) leaves its reads past the entries the new ones are
   appended at, which then are no entries (a wrong checksum: a tail) or one after a gap (``S + 1`` is at
   the file's start).
   Else the reader reads the file as rule 6 says.
10. An append the kernel takes only part of (``writev`` returns short: the disk filled mid-entry) is
   written on from where it stopped, so a full disk fails it with ENOSPC itself, which the node names
   as such (polecat/node/commits.py rule 6), not as a "short write"; an append that fails cuts the file
   back to its last whole entry before raising, so no torn entry is left behind a live node.
11. The replay (db.py rule 7) takes the rows of the entries past the LMDB's as msgpack decodes them, no
   write object a row, and gathers up to :data:`REPLAY_ROWS` of them (across entries) into a
   :class:`Batch`: per table, each key's last write, which the replay applies a table at a time, its
   puts in one ``putmulti`` (in key order, db.py rule 17). Only the last write of a key counts once the
   batch's rows are all applied, and tables are apart, so the batch ends as the rows applied one by one
   in order end; where that does not hold, order is kept: the dupsort ``near`` table's rows
   (:data:`IN_ORDER`: a key holds several values) are applied every one, in order, and a
   ``DeleteSlices`` (it deletes across the tables) or a
   seen key's ``Delete`` (refused for a key in a run unless a put of it came first, seenlog.py) goes
   alone, after the batch before it and before the rows after it. A put of no value (msgpack nil)
   is no write: the replay refuses it (rule 8) rather than take it for a delete. Issue 39: 320 MiB of
   log at 11.5M URLs replayed in 13.1-14.9 s a write at a time, 7.1-8.1 s so; 139 MiB at 1.5M in
   5.3-5.5 s, 3.0 s so (benchmarks/README.md, "Issue 39: a faster log replay").
12. :meth:`WriteLog.append` writes an entry's payload compressed: one zstd frame (level :data:`LEVEL`,
   no dictionary) of rule 1's msgpack, its content size in its header; rule 1's length and checksum are
   of the bytes stored, so a torn or in-progress entry is told as before (rules 3, 6 and 8). It is
   compressed from the encoder's buffer (rule 7), into a copy of ~a fifth of its bytes. A reader
   tells the forms apart by the payload's first bytes (zstd's magic number, which no msgpack array
   begins with) and decompresses as it decodes, a chunk at a time (rule 8): a log written by 0.3.x or
   before this rule (msgpack payloads) replays as it is, which is its migration; a release before this
   rule that meets a compressed entry finds its checksum whole and its writes undecodable, and refuses
   the open (db.py rule 7) rather than drop it as a torn tail. :attr:`WriteLog.held` counts the entries'
   msgpack bytes, which are what the replay decodes and what db.py rule 14's threshold counts, so the
   replay after a kill -9 stays as long as before while the file holds ~a fifth of its bytes. Issue 39:
   entries of a seeds-only node run 5.6x smaller at level 1 (1.2 ms of CPU a MB to compress, 0.4 ms to
   decompress), a 1.5M-URL push's 4.5x; level 3 and a trained dictionary no better
   (benchmarks/README.md, "Issue 39: the log's entries compressed").
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import io
import logging
import os
import struct
import zlib
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice, repeat
from pathlib import Path
from typing import Any, BinaryIO, get_args

import msgpack
import zstandard

from polecat.frontier.handover_ranges import SLICED_TABLES
from polecat.frontier.slices import PREFIX_LEN, slice_prefix
from polecat.frontier.tables import Snapshot
from polecat.writes import Delete, DeleteSlices, Put, PutRows, Table, Write

LOG_NAME = "wal.log"
"""The log's file in the frontier's directory."""

_HEADER = struct.Struct("<IQI")
_CHUNK = 1 << 20
"""Bytes a reader reads at a time (rule 8)."""
_TABLES: tuple[Table, ...] = get_args(Table)
_TABLE_ID = {name: i for i, name in enumerate(_TABLES)}
REPLAY_ROWS = 1 << 18
"""Rows the replay gathers before it applies them (rule 11): ~40 MB of keys and values at most (a
host's rows put again within a batch are put once)."""
IN_ORDER: Table = "near"
"""The table whose rows the replay applies every one, in order (rule 11: dupsort, a key holds values)."""
LEVEL = 1
"""The zstd level of the entries (rule 12): levels 2-3 made them no smaller and cost more CPU."""
_FRAME_HEAD = 18
"""The most bytes of a zstd frame's header (``ZSTD_FRAMEHEADERSIZE_MAX``), which holds its content size."""
_SEEN = frozenset({_TABLE_ID["seen"], _TABLE_ID["seen"] - len(_TABLES)})
"""The seen table's ids (a negative one indexes it too)."""
_PUT, _DELETE, _SLICES = 0, 1, 2

log = logging.getLogger("polecat")


def encode(writes: Sequence[Write]) -> bytes:
    """The payload of an entry of ``writes`` (rule 1), as :class:`Entry` builds it."""
    entry = Entry()
    entry.add(writes)
    with entry.body() as body:
        return entry.head() + body


class Entry:
    """The payload of the next entry (rule 1), encoded as its commit's writes are applied (rule 7)."""

    def __init__(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)
        self.rows = 0
        """Writes added."""

    def add(self, writes: Sequence[Write]) -> None:
        """Encode ``writes`` after those added before, in order."""
        pack, ids = self._packer.pack, _TABLE_ID
        rows = len(writes)
        for w in writes:
            if isinstance(w, Put):
                pack((_PUT, ids[w.table], w.key, w.value))
            elif isinstance(w, Delete):
                pack((_DELETE, ids[w.table], w.key))
            elif isinstance(w, PutRows):
                self._put_rows(w)
                rows += len(w.keys) - 1
            else:
                pack((_SLICES, sorted(w.slices)))
        self.rows += rows

    def _put_rows(self, w: PutRows) -> None:
        """Encode ``w`` as its rows' ``Put`` s (rule 7), each row's tuple made and packed in C: no Python
        loop a row."""
        if len(w.values) != len(w.keys):
            raise ValueError(f"PutRows of {w.table}: {len(w.keys)} keys, {len(w.values)} values")
        rows = zip(repeat(_PUT), repeat(_TABLE_ID[w.table]), w.keys, w.values)
        deque(map(self._packer.pack, rows), maxlen=0)

    def head(self) -> bytes:
        """The msgpack array header of the rows: the payload is it and :meth:`body`."""
        n = self.rows
        if n < 16:
            return bytes([0x90 | n])
        return b"\xdc" + n.to_bytes(2, "big") if n < 1 << 16 else b"\xdd" + n.to_bytes(4, "big")

    @property
    def size(self) -> int:
        """Bytes of the entry's payload so far (its rows' encoding)."""
        with self._packer.getbuffer() as body:
            return len(body) + 5

    def body(self) -> memoryview:
        """The rows' encoding: the encoder's own buffer, no copy (nothing may be added while it is held)."""
        body: memoryview = self._packer.getbuffer()
        return body


def decode(payload: bytes) -> list[Write]:
    """The writes of an entry's payload (ValueError if it is not one)."""
    return list(_rows(io.BytesIO(payload), 0, len(payload)))


class _Slice:
    """The bytes ``[start, start + length)`` of ``fh`` as a file to read, read where they are whatever
    else moved ``fh``'s position (rule 8)."""

    def __init__(self, fh: BinaryIO, start: int, length: int) -> None:
        self._fh, self._at, self._end = fh, start, start + length

    def read(self, n: int) -> bytes:
        self._fh.seek(self._at)
        data = self._fh.read(min(n, self._end - self._at))
        self._at += len(data)
        return data


Row = tuple[Any, ...]
"""A write as an entry holds it (rule 1): ``(kind, table id, key[, value])`` or ``(kind, slices)``."""


def _short() -> Iterator[Row]:
    """What follows an entry's last row where its head promised more: an error, not an end."""
    raise ValueError("fewer rows than its head says")
    yield  # a generator: raises when first asked, after the rows before it


def _msgpack_size(first: bytes, length: int) -> int:
    """The msgpack bytes of a payload of ``length`` bytes stored that begins with ``first`` (a zstd
    frame's header whole, if it is one: rule 12); ValueError if it is a frame that does not say."""
    if not first.startswith(zstandard.FRAME_HEADER):
        return length
    try:
        size: int = zstandard.frame_content_size(first[:_FRAME_HEAD])
    except zstandard.ZstdError as exc:
        raise ValueError(f"not a zstd frame: {exc}") from exc
    if size < 0:
        raise ValueError("a zstd frame of no content size")
    return size


def _raw_rows(fh: BinaryIO, start: int, length: int) -> Iterator[Row]:
    """The rows of the payload at ``[start, start + length)`` of ``fh`` as msgpack decodes them, one at
    a time as they are read (rule 8), decompressed as they are if it is a zstd frame (rule 12); ValueError
    once the payload is not rows (their kinds and tables are their reader's to check)."""
    try:
        fh.seek(start)
        first = fh.read(min(length, _FRAME_HEAD))
        size = _msgpack_size(first, length)
        source: Any = _Slice(fh, start, length)
        if first.startswith(zstandard.FRAME_HEADER):
            source = zstandard.ZstdDecompressor().stream_reader(source, read_size=_CHUNK)
        unpacker = msgpack.Unpacker(source, read_size=_CHUNK, raw=False, use_list=False)
        yield from islice(chain(unpacker, _short()), unpacker.read_array_header())
        if unpacker.tell() != size:
            raise ValueError(f"{size - unpacker.tell()} bytes after the last row")
    except (msgpack.UnpackException, zstandard.ZstdError, ValueError, TypeError) as exc:
        raise ValueError(f"not a log entry: {exc}") from exc


def _rows(fh: BinaryIO, start: int, length: int) -> Iterator[Write]:
    """The writes of the payload at ``[start, start + length)`` of ``fh``, decoded one at a time as they
    are read (rule 8); ValueError once a row is not one."""
    for row in _raw_rows(fh, start, length):
        try:
            if row[0] == _PUT:
                yield Put(_TABLES[row[1]], row[2], row[3])
            elif row[0] == _DELETE:
                yield Delete(_TABLES[row[1]], row[2])
            elif row[0] == _SLICES:
                yield DeleteSlices(frozenset(row[1]))
            else:
                raise ValueError(f"unknown record kind {row[0]!r}")
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise ValueError(f"not a log entry: {exc}") from exc


class _Scan:
    """The whole entries of the log file ``fh`` up to ``end`` (rules 3 and 8): ``(sequence, writes)``,
    the writes read as they are iterated (each entry's before the next is asked for); after iterating,
    :attr:`pos` is where they end, :attr:`held` their msgpack bytes (rule 12), and :attr:`why` says why
    the rest, if any, is not one."""

    def __init__(self, fh: BinaryIO, end: int) -> None:
        self.fh, self.end = fh, end
        self.pos = 0
        self.held = 0
        self.why = ""

    def __iter__(self) -> Iterator[tuple[int, Iterator[Write]]]:
        return ((seq, _rows(self.fh, start, length)) for seq, start, length in self.spans())

    def rows(self) -> Iterator[tuple[int, Iterator[Row]]]:
        """``(sequence, rows)``: each entry's rows as the log holds them (:data:`Row`), no write object a
        row."""
        return ((seq, _raw_rows(self.fh, start, length)) for seq, start, length in self.spans())

    def spans(self) -> Iterator[tuple[int, int, int]]:
        """``(sequence, start, length)`` of each whole entry's payload."""
        fh, end = self.fh, self.end
        while self.pos < end:
            pos = self.pos
            fh.seek(pos)
            head = fh.read(min(_HEADER.size, end - pos))
            if len(head) < _HEADER.size:
                self.why = "a short header"
                return
            length, seq, crc = _HEADER.unpack(head)
            if pos + _HEADER.size + length > end:
                self.why = "a short entry"
                return
            # The checksum over the whole entry before any of its writes is decoded (rule 8).
            check, left, first = zlib.crc32(struct.pack("<Q", seq)), length, b""
            while left:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    self.why = "a short entry"
                    return
                check, left, first = zlib.crc32(chunk, check), left - len(chunk), first or chunk[:_FRAME_HEAD]
            if check != crc:
                self.why = "a wrong checksum"
                return
            self.pos = pos + _HEADER.size + length
            with contextlib.suppress(ValueError):  # its reader raises it when it reaches it (rule 8)
                self.held += _msgpack_size(first, length)
            yield seq, pos + _HEADER.size, length


def read_log(path: Path) -> bytes:
    """The log at ``path`` as it is now, for a reader that must not change it (rule 6); no file is an
    empty log."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def entries_in(fh: BinaryIO, end: int, after: int) -> Iterator[tuple[int, Iterator[Write]]]:
    """``(sequence, writes)`` of the whole entries of the log file ``fh``'s first ``end`` bytes past
    sequence ``after``, in order (a tail that is not whole is left out, rules 3 and 6), each entry's writes
    decoded as they are iterated (rule 8)."""
    return ((seq, writes) for seq, writes in _Scan(fh, end) if seq > after)


def rows_past(data: bytes, after: int) -> Iterator[tuple[int, Iterator[Row]]]:
    """:func:`rows_in` of the log bytes ``data``."""
    return rows_in(io.BytesIO(data), len(data), after)


def rows_in(fh: BinaryIO, end: int, after: int) -> Iterator[tuple[int, Iterator[Row]]]:
    """:func:`entries_in`, each entry's rows as the log holds them (:data:`Row`: for a
    :class:`LogOverlay`)."""
    return ((seq, rows) for seq, rows in _Scan(fh, end).rows() if seq > after)


class Following:
    """The entries of ``entries`` (past sequence ``after``) as long as each follows the one before it,
    the first ``after``'s next (rule 9): :attr:`gap` tells whether one did not (it and the rest are left
    out)."""

    def __init__(self, entries: Iterable[tuple[int, Iterator[Row]]], after: int) -> None:
        self._entries, self._after = entries, after
        self.gap = False

    def __iter__(self) -> Iterator[tuple[int, Iterator[Row]]]:
        last = self._after
        for seq, writes in self._entries:
            if seq != last + 1:
                self.gap = True
                return
            last = seq
            yield seq, writes


@dataclass
class Batch:
    """Rows of consecutive entries for the replay to apply at once (rule 11)."""

    last: dict[Table, dict[bytes, bytes | None]] = field(default_factory=dict)
    """Each key's last write, by table (None: a delete); ``seen`` 's are puts."""
    in_order: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    """The rows of :data:`IN_ORDER`, every one in order (None: a delete)."""


class _InOrder:
    """:data:`IN_ORDER` 's rows, gathered as a key's last write is (``rows[key] = value``)."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[tuple[bytes, bytes | None]]) -> None:
        self.rows = rows

    def __setitem__(self, key: bytes, value: bytes | None) -> None:
        self.rows.append((key, value))


def _gathering() -> tuple[Batch, list[Any]]:
    """An empty batch and where each table id's rows go in it."""
    batch = Batch()
    sinks = [_InOrder(batch.in_order) if table == IN_ORDER else batch.last.setdefault(table, {})
             for table in _TABLES]
    return batch, sinks


class Replay:
    """The entries past ``after`` of :meth:`WriteLog.read`, in order, as the replay applies them (rule
    11): :class:`Batch` es of at most ``rows`` rows (:data:`REPLAY_ROWS`), and between them each
    ``DeleteSlices`` and each ``Delete`` of a seen key, where it was written. Iterating raises ValueError
    where an entry's rows are not writes (rule 8)."""

    def __init__(self, entries: Iterable[tuple[int, Iterator[Row]]], after: int,
                 rows: int | None = None) -> None:
        self._entries, self._after = entries, after
        self._rows = REPLAY_ROWS if rows is None else rows
        self.seq = after
        """The sequence of the last entry begun: of the last one replayed once iterated."""
        self.entries = 0
        """Entries past ``after`` begun."""

    def __iter__(self) -> Iterator[Batch | Delete | DeleteSlices]:
        batch, sinks = _gathering()
        left = self._rows
        for seq, rows in self._entries:
            if seq <= self._after:
                continue
            self.seq = seq
            self.entries += 1
            try:
                for row in rows:
                    kind = row[0]
                    if kind == _PUT:
                        value = row[3]
                        if value is None:  # None is a delete here: a put of nil is no write
                            raise ValueError("not a log entry: a put of no value")
                        sinks[row[1]][row[2]] = value
                    elif kind == _DELETE and row[1] not in _SEEN:
                        sinks[row[1]][row[2]] = None
                    elif kind in (_DELETE, _SLICES):
                        # Apart from the rows before and after it: a seen key's delete is refused where
                        # the key is in a run unless a put of it came first (seenlog.py), and a slice's
                        # rows are deleted between.
                        alone = Delete("seen", row[2]) if kind == _DELETE else DeleteSlices(frozenset(row[1]))
                        if left < self._rows:
                            yield batch
                        yield alone
                        batch, sinks = _gathering()
                        left = self._rows
                        continue
                    else:
                        raise ValueError(f"not a log entry: unknown record kind {kind!r}")
                    left -= 1
                    if not left:
                        yield batch
                        batch, sinks = _gathering()
                        left = self._rows
            except (TypeError, IndexError, KeyError) as exc:
                raise ValueError(f"not a log entry: {exc}") from exc
        if left < self._rows:
            yield batch


class WriteLog:
    """The append-only log file of one frontier (rules above). :meth:`append` and :meth:`reset` run on
    the writer thread; :meth:`read` at open, before any append."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        """Bytes of whole entries in the file."""
        self.held = 0
        """Bytes of the whole entries' msgpack: what the replay decodes (rule 12)."""
        self.dropped = 0
        """Bytes of a torn tail cut off at open (rule 3)."""
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._zstd = zstandard.ZstdCompressor(level=LEVEL)

    def read(self) -> Iterator[tuple[int, Iterator[Row]]]:
        """``(sequence, rows)`` of every whole entry, in order, each entry's rows read as they are
        iterated (rules 8 and 11); cuts a torn tail off (rule 3)."""
        with open(self.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            scan = _Scan(fh, size)
            yield from ((seq, _raw_rows(fh, start, length)) for seq, start, length in scan.spans())
        self.size, self.held = scan.pos, scan.held
        if scan.pos < size:
            self.dropped = size - scan.pos
            log.warning("frontier log %s: %d bytes after the last whole entry dropped (%s): a commit a crash "
                        "cut short, never acknowledged", self.path, self.dropped, scan.why)
            os.ftruncate(self._fd, scan.pos)
            os.fsync(self._fd)

    def rows(self, after: int) -> Iterator[tuple[int, Iterator[Row]]]:
        """``(sequence, rows)`` of the whole entries past sequence ``after``, in order, read from the
        file as it is (no appends running: the caller waited for them) as they are iterated (rule 8),
        each entry's rows as the log holds them (:data:`Row`: for a :class:`LogOverlay`)."""
        with open(self.path, "rb") as fh:
            yield from rows_in(fh, self.size, after)

    def bound(self) -> int:
        """The msgpack bytes the file's entries hold, by their headers (no checksum read; a torn tail's
        counted too), before :meth:`read`: what the replay may put (db.py rule 11)."""
        held, pos = 0, 0
        with open(self.path, "rb") as fh:
            while len(head := fh.read(_HEADER.size + _FRAME_HEAD)) >= _HEADER.size:
                length = _HEADER.unpack_from(head)[0]
                with contextlib.suppress(ValueError):  # no entry: the replay's to tell
                    held += _msgpack_size(head[_HEADER.size:], length)
                pos += _HEADER.size + length
                fh.seek(pos)
        return held

    def append(self, seq: int, entry: Entry) -> None:
        """Write ``entry`` compressed (rule 12) and make it durable (rule 2), from its own buffer (rule 7)."""
        head = entry.head()
        with entry.body() as body:
            held = len(head) + len(body)
            zstd = self._zstd.compressobj(size=held)
            payload = [zstd.compress(head), zstd.compress(body), zstd.flush()]
        stored = sum(map(len, payload))
        crc = zlib.crc32(struct.pack("<Q", seq))
        for part in payload:
            crc = zlib.crc32(part, crc)
        length = _HEADER.size + stored
        parts = [_HEADER.pack(stored, seq, crc), *payload]
        try:
            written = os.writev(self._fd, parts)
            if written != length:  # rule 10
                self._write_rest(parts, written)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)
            raise
        os.fsync(self._fd)
        self.size += length
        self.held += held

    def _write_rest(self, parts: Sequence[bytes], written: int) -> None:
        """Write what a short ``writev`` left of ``parts`` (rule 10): OSError (ENOSPC) if the disk is full."""
        rest = memoryview(b"".join(parts))[written:]
        while rest:
            n = os.write(self._fd, rest)
            if n == 0:
                raise OSError(errno.ENOSPC, f"no room to append to {self.path}")
            rest = rest[n:]

    def reset(self) -> None:
        """Empty the log: a durable LMDB commit holds every entry (rule 4)."""
        if not self.size:  # no log kept (frontier.log_mb 0): no fsync per commit for nothing
            return
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.size = self.held = 0

    def close(self) -> None:
        os.close(self._fd)


class NotOverlaid(LookupError):
    """A read of a table whose rows a :class:`LogOverlay` was not asked to keep (rule 5)."""


class LogOverlay:
    """The log's entries read on top of ``base``, the LMDB's last commit (rule 5), as a
    :class:`~polecat.frontier.tables.Snapshot` (closing it closes ``base``): ``entries`` are
    ``(sequence, rows)``, the rows as the log holds them (:meth:`WriteLog.rows`, :func:`rows_in`). With
    ``tables``, only their rows are kept (and a slice release's): a read of another table is refused."""

    def __init__(self, base: Snapshot, entries: Iterable[tuple[int, Iterable[Row]]],
                 tables: Collection[Table] | None = None) -> None:
        self._base = base
        self.seq: int | None = None
        """The sequence of the last entry read (None: there was none)."""
        self._rows: dict[Table, dict[bytes, bytes | None]] = {}
        self._released: set[bytes] = set()
        self._sliced = frozenset(SLICED_TABLES)
        self._tables = None if tables is None else frozenset(tables)
        # By table id (a negative one indexes it too, as in _rows): its rows, None where not kept.
        kept = [None if name == IN_ORDER or (self._tables is not None and name not in self._tables)
                else self._rows.setdefault(name, {}) for name in _TABLES]
        for self.seq, rows in entries:
            try:
                for row in rows:
                    kind = row[0]
                    if kind in (_PUT, _DELETE):
                        mine = kept[row[1]]
                        if mine is not None:
                            mine[row[2]] = row[3] if kind == _PUT else None
                    elif kind == _SLICES:
                        self._release(frozenset(row[1]))
                    else:
                        raise ValueError(f"unknown record kind {kind!r}")
            except (TypeError, IndexError) as exc:
                raise ValueError(f"not a log entry: {exc}") from exc

    def _release(self, slices: frozenset[int]) -> None:
        prefixes = {slice_prefix(s) for s in slices}
        self._released |= prefixes
        for table, rows in self._rows.items():
            if table in self._sliced:
                for key in [k for k in rows if k[:PREFIX_LEN] in prefixes]:
                    del rows[key]

    def _kept(self, table: Table) -> None:
        if self._tables is not None and table not in self._tables:
            raise NotOverlaid(f"the log's rows of {table} were not kept (an overlay of "
                              f"{sorted(self._tables)})")

    def _hidden(self, table: Table, key: bytes) -> bool:
        return table in self._sliced and key[:PREFIX_LEN] in self._released

    def get(self, table: Table, key: bytes) -> bytes | None:
        self._kept(table)
        rows = self._rows.get(table)
        if rows is not None and key in rows:
            return rows[key]
        return None if self._hidden(table, key) else self._base.get(table, key)

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        self._kept(table)
        rows = self._rows.get(table, {})
        base = ((k, v) for k, v in self._base.items(table, prefix)
                if k not in rows and not self._hidden(table, k))
        mine = sorted((k, v) for k, v in rows.items() if v is not None and k.startswith(prefix))
        return heapq.merge(base, mine)

    def added(self, table: Table) -> int:
        """Keys the entries put in ``table`` and did not delete since (for a set-only table such as
        ``seen``: how many it grew by)."""
        self._kept(table)
        return sum(value is not None for value in self._rows.get(table, {}).values())

    def close(self) -> None:
        self._base.close()
