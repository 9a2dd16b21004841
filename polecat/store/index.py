"""The store's LMDB index: where each body and each fetch record lives.

Tables (one LMDB environment under ``<store>/index``):

- ``meta``: schema version, hash function, store id, counters (with the next log sequence number).
- ``bodies``: content hash (32 bytes) -> segment, offset, length of its WARC response frame, the log
  sequence number of the fetch that stored it, and its SHA-256 (for the revisits that point at it).
- ``log``: sequence number (8 bytes, big-endian, so append order is key order) -> one fetch record and
  the locator of its frame.
- ``urls``: BLAKE2b-128 of the URL + sequence number -> empty. A URL's history is one prefix scan; the
  log entry carries the URL itself, so a hash collision is detected, not believed.
- ``segments``: segment number -> state and committed length.
- ``meta`` also keeps ``holes``: damaged byte ranges that ``polecat store repair`` left inside kept
  segments (no record lives there any more).

The index is only ever written by :meth:`Index.commit` (the flush) and :meth:`Index.set_segment` (the
shipper), each one LMDB transaction; segment bytes are fsynced before either runs.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import lmdb

from polecat.errors import CorruptRecord, StoreError
from polecat.faults import storage_fault
from polecat.store.base import HASH_NAME, HASHES, FetchRecord

SCHEMA_VERSION = b"2"
"""2: bodies may be near-duplicate deltas (polecat/store/delta.py). A schema-1 store (no deltas) is read
as it is and marked 2 when opened for writing, so a release that cannot read deltas refuses it by name."""
READABLE_SCHEMAS = (b"1", SCHEMA_VERSION)
MAP_SIZE = 1 << 36

OPEN, SEALED, REMOTE = 0, 1, 2
STATE_NAMES = {OPEN: "open", SEALED: "sealed", REMOTE: "remote"}


@dataclass(frozen=True, slots=True)
class Locator:
    """Where one zstd frame lives: segment number, byte offset, byte length."""

    segment: int
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class BodyEntry:
    loc: Locator
    seq: int
    """Log sequence number of the fetch that stored the body."""
    sha256: bytes


@dataclass(frozen=True, slots=True)
class LogEntry:
    seq: int
    record: FetchRecord
    loc: Locator


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    state: int
    length: int
    """Committed length: bytes beyond it were never indexed and are cut at open."""


@dataclass(slots=True)
class Counters:
    next_seq: int = 0
    bodies: int = 0
    revisits: int = 0
    raw_bytes: int = 0
    stored_bytes: int = 0

    _FMT = struct.Struct("<5Q")

    def pack(self) -> bytes:
        return self._FMT.pack(self.next_seq, self.bodies, self.revisits, self.raw_bytes, self.stored_bytes)

    @classmethod
    def unpack(cls, raw: bytes) -> Counters:
        return cls(*cls._FMT.unpack(raw))


_BODY = struct.Struct("<IQIQ32s")
_SEG = struct.Struct("<BQ")
_LOG = struct.Struct("<dHBIQIQ32s")
_LEN = struct.Struct("<I")
_HOLE = struct.Struct("<IQI")
_TRUNCATED, _REVISIT, _HAS_DUP = 1, 2, 4


def _text(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return _LEN.pack(len(raw)) + raw


def encode_log(record: FetchRecord, loc: Locator) -> bytes:
    flags = (
        (_TRUNCATED if record.truncated else 0)
        | (_REVISIT if record.kind == "revisit" else 0)
        | (_HAS_DUP if record.duplicate_of is not None else 0)
    )
    parts = [
        _LOG.pack(record.fetched_at, record.status, flags, loc.segment, loc.offset, loc.length,
                  record.size, record.content_hash),
        _text(record.url),
        _text(record.duplicate_of or ""),
        _LEN.pack(len(record.headers)),
    ]
    for name, value in record.headers:
        parts.append(_text(name))
        parts.append(_text(value))
    return b"".join(parts)


def decode_log(raw: bytes) -> tuple[FetchRecord, Locator]:
    try:
        at, status, flags, seg, off, length, size, digest = _LOG.unpack_from(raw)
        pos = _LOG.size
        texts: list[str] = []

        def take() -> str:
            nonlocal pos
            (n,) = _LEN.unpack_from(raw, pos)
            pos += 4 + n
            if pos > len(raw):
                raise ValueError("short log entry")
            return raw[pos - n : pos].decode("utf-8", "surrogatepass")

        url, dup = take(), take()
        (count,) = _LEN.unpack_from(raw, pos)
        pos += 4
        for _ in range(2 * count):
            texts.append(take())
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise CorruptRecord(f"undecodable index log entry: {exc}") from exc
    record = FetchRecord(
        url=url, fetched_at=at, status=status,
        headers=tuple(zip(texts[0::2], texts[1::2], strict=True)),
        content_hash=digest, size=size, truncated=bool(flags & _TRUNCATED),
        duplicate_of=dup if flags & _HAS_DUP else None,
        kind="revisit" if flags & _REVISIT else "response",
    )
    return record, Locator(seg, off, length)


def url_key(url: str) -> bytes:
    return hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _seq(n: int) -> bytes:
    return n.to_bytes(8, "big")


def _must(raw: bytes | None, what: str) -> bytes:
    if raw is None:
        raise CorruptRecord(f"page store index lacks {what}")
    return raw


class Index:
    """The LMDB environment and its tables. Reads take their own short transactions."""

    def __init__(self, path: Path, *, read_only: bool) -> None:
        self.path = path
        if read_only and not (path / "data.mdb").exists():
            raise StoreError(f"no page store at {path.parent}")
        try:
            if not read_only:
                os.makedirs(path, exist_ok=True)
            self.env = lmdb.open(str(path), map_size=MAP_SIZE, max_dbs=6, readonly=read_only,
                                 subdir=True, readahead=False)
            create = not read_only
            self._meta = self.env.open_db(b"meta", create=create)
            self._bodies = self.env.open_db(b"bodies", create=create)
            self._log = self.env.open_db(b"log", create=create)
            self._urls = self.env.open_db(b"urls", create=create)
            self._segments = self.env.open_db(b"segments", create=create)
        except lmdb.Error as exc:
            raise StoreError(f"cannot open page store index {path}: {exc}") from exc
        self.store_id, self.hash_name = self._check_meta(read_only)

    def _check_meta(self, read_only: bool) -> tuple[str, str]:
        """The store id and content-hash name, writing them (with the schema) into a new index."""
        with self.env.begin(write=not read_only) as txn:
            schema = txn.get(b"schema", db=self._meta)
            if schema is None and not read_only:
                txn.put(b"schema", SCHEMA_VERSION, db=self._meta)
                txn.put(b"hash", HASH_NAME.encode(), db=self._meta)
                txn.put(b"store_id", os.urandom(4).hex().encode(), db=self._meta)
                txn.put(b"counters", Counters().pack(), db=self._meta)
                schema = SCHEMA_VERSION
            if schema not in READABLE_SCHEMAS:
                raise StoreError(f"page store schema {schema!r}, this polecat reads "
                                 f"{', '.join(map(repr, READABLE_SCHEMAS))}")
            if schema != SCHEMA_VERSION and not read_only:
                txn.put(b"schema", SCHEMA_VERSION, db=self._meta)
            hash_name = bytes(_must(txn.get(b"hash", db=self._meta), "its hash name")).decode("latin-1")
            if hash_name not in HASHES:
                raise StoreError(f"page store hashes with {hash_name!r}, which this polecat does not know "
                                 f"(it knows {', '.join(HASHES)})")
            return _must(txn.get(b"store_id", db=self._meta), "its store id").decode(), hash_name

    def remote_url(self) -> str:
        """The object-store URL sealed segments were shipped to ("" when none), for readers."""
        with self.env.begin() as txn:
            return bytes(txn.get(b"remote_url", b"", db=self._meta) or b"").decode()

    def set_remote_url(self, url: str) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(b"remote_url", url.encode(), db=self._meta)

    def counters(self) -> Counters:
        with self.env.begin() as txn:
            return Counters.unpack(_must(txn.get(b"counters", db=self._meta), "its counters"))

    def body(self, digest: bytes) -> BodyEntry | None:
        with self.env.begin() as txn:
            raw = txn.get(digest, db=self._bodies)
        if raw is None:
            return None
        seg, off, length, seq, sha = _BODY.unpack(raw)
        return BodyEntry(Locator(seg, off, length), seq, sha)

    def log_entry(self, seq: int) -> LogEntry | None:
        with self.env.begin() as txn:
            raw = txn.get(_seq(seq), db=self._log)
        if raw is None:
            return None
        record, loc = decode_log(raw)
        return LogEntry(seq, record, loc)

    def history(self, url: str) -> list[LogEntry]:
        prefix = url_key(url)
        out: list[LogEntry] = []
        with self.env.begin() as txn:
            cur = txn.cursor(db=self._urls)
            if not cur.set_range(prefix):
                return out
            for key in cur.iternext(values=False):
                if key[:16] != prefix:
                    break
                seq = int.from_bytes(key[16:], "big")
                record, loc = decode_log(_must(txn.get(key[16:], db=self._log), f"log record {seq}"))
                if record.url == url:
                    out.append(LogEntry(seq, record, loc))
        return out

    def iter_log(self, start: int = 0) -> Iterator[LogEntry]:
        """The committed log entries from sequence number ``start`` on, in order."""
        with self.env.begin() as txn:
            cursor = txn.cursor(db=self._log)
            if not cursor.set_range(_seq(start)):
                return
            for key, raw in cursor:
                record, loc = decode_log(raw)
                yield LogEntry(int.from_bytes(key, "big"), record, loc)

    def digests_with_prefix(self, hex_prefix: str, limit: int = 2) -> list[bytes]:
        """Up to ``limit`` body hashes whose hex form starts with ``hex_prefix`` (lower-case hex)."""
        start = bytes.fromhex(hex_prefix[: len(hex_prefix) // 2 * 2])
        found: list[bytes] = []
        with self.env.begin() as txn:
            cur = txn.cursor(db=self._bodies)
            if not cur.set_range(start):
                return found
            for key in cur.iternext(values=False):
                if not bytes(key).hex().startswith(hex_prefix) or len(found) >= limit:
                    break
                found.append(bytes(key))
        return found

    def iter_bodies(self) -> Iterator[tuple[bytes, BodyEntry]]:
        with self.env.begin() as txn:
            for key, raw in txn.cursor(db=self._bodies):
                seg, off, length, seq, sha = _BODY.unpack(raw)
                yield bytes(key), BodyEntry(Locator(seg, off, length), seq, sha)

    def segments(self) -> dict[int, SegmentInfo]:
        with self.env.begin() as txn:
            return {int.from_bytes(k, "big"): SegmentInfo(*_SEG.unpack(v)) for k, v in
                    txn.cursor(db=self._segments)}

    def commit(self, bodies: Mapping[bytes, BodyEntry], log: Sequence[LogEntry],
               segments: Mapping[int, SegmentInfo], counters: Counters) -> None:
        """Index one flush's worth of records in one transaction (their bytes are already durable)."""
        try:
            with self.env.begin(write=True) as txn:
                for digest, b in bodies.items():
                    txn.put(digest, _BODY.pack(b.loc.segment, b.loc.offset, b.loc.length, b.seq, b.sha256),
                            db=self._bodies)
                for e in log:
                    key = _seq(e.seq)
                    txn.put(key, encode_log(e.record, e.loc), db=self._log, append=True)
                    txn.put(url_key(e.record.url) + key, b"", db=self._urls)
                for seg, info in segments.items():
                    txn.put(seg.to_bytes(4, "big"), _SEG.pack(info.state, info.length), db=self._segments)
                txn.put(b"counters", counters.pack(), db=self._meta)
        except lmdb.Error as exc:
            raise storage_fault(exc, "page store index", self.path) from exc

    def set_segment(self, seg: int, info: SegmentInfo) -> None:
        try:
            with self.env.begin(write=True) as txn:
                txn.put(seg.to_bytes(4, "big"), _SEG.pack(info.state, info.length), db=self._segments)
        except lmdb.Error as exc:
            raise storage_fault(exc, "page store index", self.path) from exc

    def holes(self) -> list[Locator]:
        """Byte ranges inside kept segments that ``store repair`` found damaged (no record lives there)."""
        with self.env.begin() as txn:
            raw = bytes(txn.get(b"holes", b"", db=self._meta) or b"")
        return [Locator(*_HOLE.unpack_from(raw, i)) for i in range(0, len(raw), _HOLE.size)]

    def drop(self, log: Sequence[LogEntry], bodies: Sequence[bytes], segments: Mapping[int, SegmentInfo],
             holes: Sequence[Locator], counters: Counters) -> None:
        """Repair, in one transaction: forget damaged records and bodies, set segment lengths, add holes."""
        try:
            with self.env.begin(write=True) as txn:
                for e in log:
                    txn.delete(_seq(e.seq), db=self._log)
                    txn.delete(url_key(e.record.url) + _seq(e.seq), db=self._urls)
                for digest in bodies:
                    txn.delete(digest, db=self._bodies)
                for seg, info in segments.items():
                    txn.put(seg.to_bytes(4, "big"), _SEG.pack(info.state, info.length), db=self._segments)
                known = bytes(txn.get(b"holes", b"", db=self._meta) or b"")
                txn.put(b"holes", known + b"".join(_HOLE.pack(h.segment, h.offset, h.length) for h in holes),
                        db=self._meta)
                txn.put(b"counters", counters.pack(), db=self._meta)
        except lmdb.Error as exc:
            raise storage_fault(exc, "page store index", self.path) from exc

    def close(self) -> None:
        self.env.close()
