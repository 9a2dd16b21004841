"""The page store: WARC records in zstd frames appended to segments, indexed in LMDB.

Rules (this module owns them):

1. ``put`` compresses one WARC record into one zstd frame and appends it to the open segment; the index
   entries it implies wait in memory until ``flush``.
2. ``flush`` fdatasyncs every segment written since the last flush (and the directory when a segment was
   created), then commits the pending index entries in one LMDB transaction. So the index never points at
   bytes that are not durable, and after ``flush`` returns everything put is durable and indexed.
3. On open, a writer cuts every segment back to the length the index committed (a torn or unindexed
   tail: those records were never acknowledged) and deletes segment files the index never saw.
4. A segment is sealed once it reaches ``segment_bytes``; sealed segments are shipped to object storage
   when a store URL is configured, and read back by ranged GET.
5. Every read decompresses, parses and re-hashes the body; a mismatch is CorruptRecord.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zstandard

from polecat.config import StoreConfig
from polecat.errors import CorruptRecord, NotFound, StoreError
from polecat.store import object as objstore
from polecat.store import warc
from polecat.store.base import FetchRecord, StoreStats, content_hash
from polecat.store.index import (
    OPEN,
    REMOTE,
    SEALED,
    BodyEntry,
    Counters,
    Index,
    Locator,
    LogEntry,
    SegmentInfo,
)
from polecat.store.segments import (
    SegmentReaders,
    SegmentWriter,
    cut_tail,
    fsync_dir,
    list_segment_files,
    segment_name,
)

ZSTD_LEVEL = 3
"""Measured in benchmarks/bench_store.py: level 3 costs about what level 1 does on HTML, and is smaller."""
MAX_RECORD_BYTES = 1 << 31


class SegmentStore:
    """The PageStore implementation (see polecat.store.base for the contract)."""

    @classmethod
    def open(cls, root: Path, cfg: StoreConfig, *, read_only: bool = False) -> SegmentStore:
        return cls(root, cfg, read_only=read_only)

    def __init__(self, root: Path, cfg: StoreConfig, *, read_only: bool) -> None:
        self.root = root
        self.read_only = read_only
        self._cfg = cfg
        self._seg_dir = root / "segments"
        self._lock_fd = -1
        if not read_only:
            self._seg_dir.mkdir(parents=True, exist_ok=True)
            self._lock()
        self.index = Index(root / "index", read_only=read_only)
        self.store_id = self.index.store_id
        # A reader given no URL (the CLI) follows the writer's: credentials come from the environment.
        url = cfg.url or (self.index.remote_url() if read_only else "")
        self._remote: Any = objstore.make_object_store(url, cfg.options) if url else None
        if cfg.url and not read_only and self.index.remote_url() != cfg.url:
            self.index.set_remote_url(cfg.url)
        self._readers = SegmentReaders(self._seg_dir, self.store_id)
        self._states = {seg: info.state for seg, info in self.index.segments().items()}
        self._counters = self.index.counters()
        self._pending_bodies: dict[bytes, BodyEntry] = {}
        self._pending_log: list[LogEntry] = []
        self._pending_segs: dict[int, SegmentInfo] = {}
        self._unsynced: list[SegmentWriter] = []
        self._sealed_unshipped: list[int] = []
        self._new_file = False
        self._writer: SegmentWriter | None = None
        self._cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
        self._dctx = zstandard.ZstdDecompressor()
        self._shipper: objstore.Shipper | None = None
        self._closed = False
        self.cut_bytes = 0
        """Bytes of torn or unindexed segment tails cut when this writer opened."""
        if not read_only:
            self._recover()

    # --- opening -------------------------------------------------------------------------------------

    def _lock(self) -> None:
        self._lock_fd = os.open(self.root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._lock_fd)
            raise StoreError(f"page store {self.root} is open for writing by another process") from exc

    def _recover(self) -> None:
        segs = self.index.segments()
        files = dict(list_segment_files(self._seg_dir, self.store_id))
        for seg, info in segs.items():
            if info.state != REMOTE and seg not in files:
                name = segment_name(self.store_id, seg)
                raise CorruptRecord(f"segment {name} is missing from {self._seg_dir}")
        for seg, path in files.items():
            known = segs.get(seg)
            if known is None or known.state == REMOTE:
                path.unlink()  # never indexed (crash before its first flush), or already shipped
            else:
                self.cut_bytes += cut_tail(path, known.length)
        for seg, info in segs.items():
            if info.state == OPEN:
                path = self._seg_dir / segment_name(self.store_id, seg)
                self._writer = SegmentWriter(path, seg, info.length)
        if self._remote is not None:
            self._shipper = objstore.Shipper(self._remote, self._shipped)
            for seg, info in sorted(segs.items()):
                if info.state == SEALED:
                    self._ship(seg)

    # --- writing -------------------------------------------------------------------------------------

    def put(self, record: FetchRecord, body: bytes | None) -> bool:
        if self._closed or self.read_only:
            raise StoreError("page store is closed" if self._closed else "page store is read-only")
        seq = self._counters.next_seq
        existing = self._body(record.content_hash)
        if body is not None and existing is None:
            sha = hashlib.sha256(body).digest()
            loc = self._append(warc.encode_response(record, body, sha))
            self._pending_bodies[record.content_hash] = BodyEntry(loc, seq, sha)
            self._counters.bodies += 1
            self._counters.raw_bytes += len(body)
            written = True
        else:
            refers: tuple[str, float] | None = None
            digest: str | None = None
            if existing is not None:
                original = self._log_entry(existing.seq).record
                refers = (original.url, original.fetched_at)
                digest = warc.payload_digest_from(existing.sha256)
                if record.duplicate_of is None and original.url != record.url:
                    record = dataclasses.replace(record, duplicate_of=original.url)
            record = dataclasses.replace(record, kind="revisit")
            loc = self._append(warc.encode_revisit(record, refers, digest))
            self._counters.revisits += 1
            written = False
        self._pending_log.append(LogEntry(seq, record, loc))
        self._counters.next_seq = seq + 1
        return written

    def _append(self, data: bytes) -> Locator:
        if len(data) >= MAX_RECORD_BYTES:
            raise StoreError(f"record of {len(data)} bytes is too large for a segment")
        w = self._writer
        if w is None or w.length >= self._cfg.segment_bytes:
            w = self._roll()
        loc = w.append(self._cctx.compress(data))
        self._pending_segs[w.seg] = SegmentInfo(OPEN, w.length)
        self._counters.stored_bytes += loc.length
        return loc

    def _roll(self) -> SegmentWriter:
        old = self._writer
        seg = max([*self._states, *self._pending_segs], default=-1) + 1
        if old is not None:
            self._pending_segs[old.seg] = SegmentInfo(SEALED, old.length)
            self._unsynced.append(old)
            self._sealed_unshipped.append(old.seg)
        self._writer = SegmentWriter(self._seg_dir / segment_name(self.store_id, seg), seg, 0)
        self._pending_segs[seg] = SegmentInfo(OPEN, 0)
        self._new_file = True
        return self._writer

    def flush(self) -> None:
        if not self._pending_segs:
            return
        for w in self._unsynced:
            w.sync()
        if self._writer is not None:
            self._writer.sync()
        if self._new_file:
            fsync_dir(self._seg_dir)
        self.index.commit(self._pending_bodies, self._pending_log, self._pending_segs, self._counters)
        for seg, info in self._pending_segs.items():
            self._states[seg] = info.state
        for w in self._unsynced:
            w.close()
        sealed = self._sealed_unshipped
        self._unsynced, self._sealed_unshipped, self._new_file = [], [], False
        self._pending_bodies, self._pending_log, self._pending_segs = {}, [], {}
        if self._shipper is not None:
            for seg in sealed:
                self._ship(seg)

    def _ship(self, seg: int) -> None:
        assert self._shipper is not None
        name = segment_name(self.store_id, seg)
        self._shipper.ship(seg, self._seg_dir / name, name)

    def _shipped(self, seg: int) -> None:
        """Shipper thread: the upload is confirmed; commit that, then free the local copy."""
        info = SegmentInfo(REMOTE, (self._seg_dir / segment_name(self.store_id, seg)).stat().st_size)
        self.index.set_segment(seg, info)
        self._states[seg] = REMOTE
        (self._seg_dir / segment_name(self.store_id, seg)).unlink()

    # --- reading -------------------------------------------------------------------------------------

    def _body(self, digest: bytes) -> BodyEntry | None:
        pending = self._pending_bodies.get(digest)
        return pending if pending is not None else self.index.body(digest)

    def _log_entry(self, seq: int) -> LogEntry:
        if self._pending_log and seq >= self._pending_log[0].seq:
            return self._pending_log[seq - self._pending_log[0].seq]
        entry = self.index.log_entry(seq)
        if entry is None:
            raise CorruptRecord(f"index names log record {seq}, which is missing")
        return entry

    def has(self, digest: bytes) -> bool:
        return self._body(digest) is not None

    def read_frame(self, loc: Locator) -> bytes:
        """The raw zstd frame at ``loc``, from local disk or object storage."""
        if self._states.get(loc.segment) != REMOTE:
            try:
                return self._readers.read(loc)
            except FileNotFoundError:
                # Shipped meanwhile (possibly by another process): learn the new state.
                self._states = {seg: info.state for seg, info in self.index.segments().items()}
                if self._states.get(loc.segment) != REMOTE:
                    raise NotFound(f"segment {loc.segment} is missing from {self._seg_dir}") from None
        self._readers.forget(loc.segment)
        if self._remote is None:
            raise StoreError(f"segment {loc.segment} is in object storage but no store.url is configured")
        return objstore.read_range(self._remote, segment_name(self.store_id, loc.segment), loc)

    def decompress(self, frame: bytes) -> bytes:
        """The WARC record in one zstd frame; CorruptRecord when the frame is damaged."""
        try:
            return self._dctx.decompress(frame, max_output_size=MAX_RECORD_BYTES)
        except zstandard.ZstdError as exc:
            raise CorruptRecord(f"bad zstd frame: {exc}") from exc

    def read_record(self, loc: Locator) -> warc.DecodedRecord:
        """Decompress and parse the WARC record at ``loc``."""
        return warc.decode(self.decompress(self.read_frame(loc)))

    def get(self, digest: bytes) -> bytes:
        entry = self._body(digest)
        if entry is None:
            raise NotFound(f"no body with hash {digest.hex()}")
        payload = self.read_record(entry.loc).payload
        if payload is None or content_hash(payload) != digest:
            raise CorruptRecord(f"body at segment {entry.loc.segment} offset {entry.loc.offset} "
                                f"does not hash to {digest.hex()}")
        return payload

    def history(self, url: str) -> list[FetchRecord]:
        out = [e.record for e in self.index.history(url)]
        out.extend(e.record for e in self._pending_log if e.record.url == url)
        return out

    def records(self) -> Iterator[FetchRecord]:
        return (e.record for e in self.log_entries())

    def log_entries(self) -> Iterator[LogEntry]:
        """Every log entry (record and the locator of its frame), in append order."""
        pending = list(self._pending_log)
        yield from self.index.iter_log()
        yield from pending

    def segment_states(self) -> dict[int, SegmentInfo]:
        """Every indexed segment with its state and committed length, pending changes included."""
        return {**self.index.segments(), **self._pending_segs}

    def stats(self) -> StoreStats:
        c: Counters = self._counters
        states = list({**self._states, **{s: i.state for s, i in self._pending_segs.items()}}.values())
        return StoreStats(
            records=c.next_seq, bodies=c.bodies, revisits=c.revisits, raw_bytes=c.raw_bytes,
            stored_bytes=c.stored_bytes, segments=len(states), sealed_segments=states.count(SEALED),
            remote_segments=states.count(REMOTE), pending_records=len(self._pending_log),
        )

    def close(self) -> None:
        if self._closed:
            return
        if not self.read_only:
            self.flush()
        if self._shipper is not None:
            self._shipper.close()
        if self._writer is not None:
            self._writer.close()
        self._readers.close()
        self.index.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
        self._closed = True

    def __enter__(self) -> SegmentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
