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
6. A revisit whose original this store does not hold names it as its record says: its ``duplicate_of``
   (``WARC-Refers-To-Target-URI``) and, when its claim's answer gave it
   (:data:`~polecat.store.base.REFERS_DATE_HEADER`), the original's fetch time (``WARC-Refers-To-Date``).
   In a SHA-256 store it carries the original's ``WARC-Payload-Digest`` too (WARC 1.1 requires it of an
   identical-payload revisit): the revisit's content hash is the original's body's SHA-256, which that
   digest encodes (a near copy's names its base's, as a revisit of a base held here does). A store of
   another hash cannot derive it (the claim's answer names the original's hash, not its SHA-256): its
   ``store export`` adds it (polecat/store/export.py rule 6).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zstandard

from polecat.config import StoreConfig
from polecat.errors import CorruptRecord, NotFound, StoreError
from polecat.store import delta, warc
from polecat.store.archive import ArchiveInfo
from polecat.store.base import REFERS_DATE_HEADER, SHA256, FetchRecord, PageStore, StoreStats, hasher
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
    lock_writer,
    segment_name,
)

if TYPE_CHECKING:
    from polecat.store import object as objstore  # loaded where a store has a remote (obstore: ~6 ms)

ZSTD_LEVEL = 2
"""Measured on real documentation pages and the benchmark web (benchmarks/README.md, "Per-page CPU against
the floor"): level 2 compresses 12-20 % faster than level 3 (-33 to -36 us a page), its output 0-4 % larger;
level 1 is no faster than 2 and 4-7 % larger still."""
MAX_RECORD_BYTES = 1 << 31


@dataclass(slots=True)
class _Batch:
    """What puts appended since the last flush: index entries and the segments they touched."""

    bodies: dict[bytes, BodyEntry] = field(default_factory=dict)
    log: list[LogEntry] = field(default_factory=list)
    segs: dict[int, SegmentInfo] = field(default_factory=dict)
    sealed: list[SegmentWriter] = field(default_factory=list)
    """Writers of segments sealed in this batch: synced, then closed and shipped, by its flush."""
    new_file: bool = False

    def merge(self, later: _Batch) -> _Batch:
        """This batch followed by ``later`` (a failed flush puts its batch back)."""
        return _Batch({**self.bodies, **later.bodies}, [*self.log, *later.log], {**self.segs, **later.segs},
                      [*self.sealed, *later.sealed], self.new_file or later.new_file)


class SegmentStore:
    """The PageStore implementation (see polecat.store.base for the contract)."""

    @classmethod
    def open(cls, root: Path, cfg: StoreConfig, *, read_only: bool = False,
             archive: ArchiveInfo | None = None) -> SegmentStore:
        return cls(root, cfg, read_only=read_only, archive=archive)

    def __init__(self, root: Path, cfg: StoreConfig, *, read_only: bool,
                 archive: ArchiveInfo | None = None) -> None:
        self.root = root
        self._archive = archive
        """warcinfo and request records to write (polecat/store/archive.py); None writes neither."""
        self.read_only = read_only
        self._cfg = cfg
        self._seg_dir = root / "segments"
        self._lock_fd = -1
        if not read_only:
            self._seg_dir.mkdir(parents=True, exist_ok=True)
            self._lock()
        self.index = Index(root / "index", read_only=read_only)
        self.store_id = self.index.store_id
        self.hash_name = self.index.hash_name
        self._hash = hasher(self.hash_name)
        # A reader given no URL (the CLI) follows the writer's: credentials come from the environment.
        url = cfg.url or (self.index.remote_url() if read_only else "")
        self._remote: Any = None
        if url:
            from polecat.store.object import make_object_store

            self._remote = make_object_store(url, cfg.options)
        if cfg.url and not read_only and self.index.remote_url() != cfg.url:
            self.index.set_remote_url(cfg.url)
        self._readers = SegmentReaders(self._seg_dir, self.store_id)
        self._states = {seg: info.state for seg, info in self.index.segments().items()}
        self._counters = self.index.counters()
        self._pending = _Batch()
        self._inflight: _Batch | None = None
        """The batch a flush is syncing and committing (readers still find its records)."""
        self._mu = threading.Lock()
        """Guards the batches, the writer and the segment states: put and flush may run in two threads."""
        self._flush_mu = threading.Lock()
        self._writer: SegmentWriter | None = None
        self._cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
        self._dctx = zstandard.ZstdDecompressor()
        self._shipper: objstore.Shipper | None = None
        self._closed = False
        self.cut_bytes = 0
        """Bytes of torn or unindexed segment tails cut when this writer opened."""
        if not read_only:
            try:
                self._recover()
            except BaseException:  # a store that fails to open holds no lock (store repair needs it)
                self.index.close()
                os.close(self._lock_fd)
                raise

    # --- opening -------------------------------------------------------------------------------------

    def _lock(self) -> None:
        self._lock_fd = lock_writer(self.root)

    def _recover(self) -> None:
        segs = self.index.segments()
        files = dict(list_segment_files(self._seg_dir, self.store_id))
        for seg, info in segs.items():
            if info.state != REMOTE and seg not in files:
                name = segment_name(self.store_id, seg)
                raise CorruptRecord(f"segment {name} is missing from {self._seg_dir}: run "
                                    "`polecat store repair DIR`")
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
            from polecat.store.object import Shipper

            self._shipper = Shipper(self._remote, self._shipped)
            for seg, info in sorted(segs.items()):
                if info.state == SEALED:
                    self._ship(seg)

    # --- writing -------------------------------------------------------------------------------------

    def put(self, record: FetchRecord, body: bytes | None) -> bool:
        if self._closed or self.read_only:
            raise StoreError("page store is closed" if self._closed else "page store is read-only")
        with self._mu:
            return self._put(record, body)

    def _put(self, record: FetchRecord, body: bytes | None) -> bool:
        seq = self._counters.next_seq
        existing = self._body(record.content_hash)
        record_id = warc.new_record_id()
        when = record.header(REFERS_DATE_HEADER.lower())
        if when is not None:  # rule 6: a WARC field, not a header of the page
            record = dataclasses.replace(record, headers=tuple(
                h for h in record.headers if h[0] != REFERS_DATE_HEADER))
        if body is not None and existing is None:
            # A SHA-256 store's address is the payload digest: the page is hashed once (base.py).
            sha = record.content_hash if self.hash_name == SHA256 else hashlib.sha256(body).digest()
            loc = self._append(record, record_id,
                               *warc.encode_response_parts(record, body, sha, record_id, self.hash_name))
            self._pending.bodies[record.content_hash] = BodyEntry(loc, seq, sha)
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
                if record.duplicate_of is None and original.url != record.url and body:
                    record = dataclasses.replace(record, duplicate_of=original.url)
            elif record.duplicate_of is not None:  # an original in another member's store
                refers = _refers_elsewhere(record.duplicate_of, when)
                if self.hash_name == SHA256:  # rule 6: the original's digest is its content hash's
                    digest = warc.payload_digest_from(record.content_hash)
            record = dataclasses.replace(record, kind="revisit")
            loc = self._append(record, record_id, warc.encode_revisit(record, refers, digest, record_id,
                                                                          self.hash_name))
            self._counters.revisits += 1
            written = False
            own = record.own_hash
            if body is not None and existing is not None and own != record.content_hash \
                    and self._body(own) is None:
                self._put_delta(record.content_hash, own, body, seq)
                written = True
        self._pending.log.append(LogEntry(seq, record, loc))
        self._counters.next_seq = seq + 1
        return written

    def _put_delta(self, base_hash: bytes, own: bytes, body: bytes, seq: int) -> None:
        """A near-duplicate's own body, stored against its base right after its revisit record
        (polecat/store/delta.py)."""
        if self._hash(body) != own:
            raise StoreError(f"near-duplicate body does not hash to {own.hex()}")
        entry = self._body(base_hash)
        assert entry is not None  # the revisit record refers to it
        first = self.read_frame(entry.loc)
        if delta.is_delta(first):  # a near-duplicate of a near-duplicate: against the whole one (rule 4)
            base_hash = delta.base_of(first)
            base = self.get(base_hash)
        else:  # the frame just read holds the base: no second read
            base = self._verified(base_hash, entry.loc, first)
        frame = delta.encode(base_hash, base, body)
        w = self._writer
        assert w is not None  # the revisit record was just appended to it
        loc = w.append(frame)
        self._pending.segs[w.seg] = SegmentInfo(OPEN, w.length)
        sha = own if self.hash_name == SHA256 else hashlib.sha256(body).digest()
        self._pending.bodies[own] = BodyEntry(loc, seq, sha)
        self._counters.bodies += 1
        self._counters.raw_bytes += len(body)
        self._counters.stored_bytes += loc.length

    def _append(self, record: FetchRecord, record_id: str, head: bytes, *rest: bytes) -> Locator:
        """Compress the record made of ``head`` and ``rest`` into one frame (streamed: the body in
        ``rest`` is not copied) and append it to the open segment, after the segment's warcinfo and the
        request record (polecat/store/archive.py)."""
        w = self._writer
        if w is None or w.length >= self._cfg.segment_bytes:
            w = self._roll()
        if self._archive is not None:
            if self._archive.requests:
                head = warc.encode_request(record, self._archive.request_headers, record_id) + head
            if w.length == 0:
                name = segment_name(self.store_id, w.seg)
                head = warc.encode_warcinfo(self._archive.warcinfo, name, record.fetched_at) + head
        size = len(head) + sum(map(len, rest))
        if size >= MAX_RECORD_BYTES:
            raise StoreError(f"record of {size} bytes is too large for a segment")
        stream = self._cctx.compressobj(size=size)
        loc = w.append(b"".join([stream.compress(head), *map(stream.compress, rest), stream.flush()]))
        self._pending.segs[w.seg] = SegmentInfo(OPEN, w.length)
        self._counters.stored_bytes += loc.length
        return loc

    def _roll(self) -> SegmentWriter:
        old = self._writer
        inflight = self._inflight.segs if self._inflight else {}
        seg = max([*self._states, *inflight, *self._pending.segs], default=-1) + 1
        if old is not None:
            self._pending.segs[old.seg] = SegmentInfo(SEALED, old.length)
            self._pending.sealed.append(old)
        self._writer = SegmentWriter(self._seg_dir / segment_name(self.store_id, seg), seg, 0)
        self._pending.segs[seg] = SegmentInfo(OPEN, 0)
        self._pending.new_file = True
        return self._writer

    def flush(self) -> None:
        """Make every put so far durable and indexed.

        May run in a worker thread (``await asyncio.to_thread(store.flush)``) while the event loop keeps
        calling ``put``: the pending batch is swapped out under a lock, then synced and committed
        without it; puts made meanwhile belong to the next flush.
        """
        with self._flush_mu:
            with self._mu:
                batch = self._pending
                if not batch.segs:
                    return
                # inflight before pending: a lock-free reader (get) then always finds the batch somewhere
                self._inflight = batch
                self._pending = _Batch()
                writer = self._writer
                counters = dataclasses.replace(self._counters)
            try:
                for w in batch.sealed:
                    w.sync()
                if writer is not None:
                    writer.sync()  # also syncs bytes appended since the swap: harmless
                if batch.new_file:
                    fsync_dir(self._seg_dir)
                self.index.commit(batch.bodies, batch.log, batch.segs, counters)
            except BaseException:
                with self._mu:  # nothing was committed: the batch goes back in front of newer puts
                    self._pending = batch.merge(self._pending)
                    self._inflight = None
                raise
            with self._mu:
                for seg, info in batch.segs.items():
                    self._states[seg] = info.state
                self._inflight = None
            for w in batch.sealed:
                w.close()
                if self._shipper is not None:
                    self._ship(w.seg)

    def seal(self) -> None:
        if self._shipper is None or self._closed or self.read_only:
            return
        self._shipper.retry_failed()  # else one failed upload would hold every later seal's wait
        with self._mu:
            if self._writer is not None and self._writer.length > 0:
                self._roll()

    def unshipped(self) -> int | None:
        if self._shipper is None:
            return None
        with self._mu:
            pending = len(self._pending.sealed) + (len(self._inflight.sealed) if self._inflight else 0)
            return pending + sum(1 for state in self._states.values() if state == SEALED)

    def _ship(self, seg: int) -> None:
        assert self._shipper is not None
        name = segment_name(self.store_id, seg)
        self._shipper.ship(seg, self._seg_dir / name, name)

    def _shipped(self, seg: int) -> None:
        """Shipper thread: the upload is confirmed; commit that, then free the local copy."""
        path = self._seg_dir / segment_name(self.store_id, seg)
        self.index.set_segment(seg, SegmentInfo(REMOTE, path.stat().st_size))
        with self._mu:
            self._states[seg] = REMOTE
        path.unlink()

    # --- reading -------------------------------------------------------------------------------------

    def _body(self, digest: bytes) -> BodyEntry | None:
        for batch in (self._pending, self._inflight):
            if batch is not None and (entry := batch.bodies.get(digest)) is not None:
                return entry
        return self.index.body(digest)

    def _log_entry(self, seq: int) -> LogEntry:
        for batch in (self._pending, self._inflight):
            if batch is not None and batch.log and seq >= batch.log[0].seq:
                return batch.log[seq - batch.log[0].seq]
        entry = self.index.log_entry(seq)
        if entry is None:
            raise CorruptRecord(f"index names log record {seq}, which is missing")
        return entry

    def _unflushed(self) -> list[LogEntry]:
        with self._mu:
            return [*(self._inflight.log if self._inflight else ()), *self._pending.log]

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
        from polecat.store.object import read_range

        return read_range(self._remote, segment_name(self.store_id, loc.segment), loc)

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
        return self._verified(digest, entry.loc, self.read_frame(entry.loc))

    def _verified(self, digest: bytes, loc: Locator, frame: bytes) -> bytes:
        """The body ``digest`` from its stored ``frame`` at ``loc`` (rebuilt over its base for a delta),
        checked against its hash."""
        if delta.is_delta(frame):
            base_hash = delta.base_of(frame)
            if base_hash == digest:
                raise CorruptRecord(f"delta of {digest.hex()} names itself as its base")
            try:
                base = self.get(base_hash)  # a base is stored whole (delta.py rule 4)
            except NotFound as exc:
                raise CorruptRecord(f"body {digest.hex()} is a delta of {base_hash.hex()}, which is "
                                    "missing") from exc
            payload: bytes | None = delta.apply(frame, base, MAX_RECORD_BYTES)
        else:
            payload = warc.decode(self.decompress(frame)).payload
        if payload is None or self._hash(payload) != digest:
            raise CorruptRecord(f"body at segment {loc.segment} offset {loc.offset} "
                                f"does not hash to {digest.hex()}")
        return payload

    def history(self, url: str) -> list[FetchRecord]:
        unflushed = self._unflushed()  # first: a flush committing meanwhile moves entries to the index
        committed = self.index.history(url)
        seqs = {e.seq for e in committed}
        committed.extend(e for e in unflushed if e.record.url == url and e.seq not in seqs)
        return [e.record for e in committed]

    def records(self) -> Iterator[FetchRecord]:
        return (e.record for e in self.log_entries())

    def records_since(self, seq: int) -> Iterator[FetchRecord]:
        return (e.record for e in self.log_entries(seq))

    def record_count(self) -> int:
        return self._counters.next_seq

    def log_entries(self, start: int = 0) -> Iterator[LogEntry]:
        """Every log entry (record and the locator of its frame) from sequence number ``start`` on, in
        append order."""
        unflushed = self._unflushed()
        last = start - 1
        for entry in self.index.iter_log(start):
            last = entry.seq
            yield entry
        yield from (e for e in unflushed if e.seq > last)

    def segment_states(self) -> dict[int, SegmentInfo]:
        """Every indexed segment with its state and committed length, pending changes included."""
        with self._mu:
            unflushed = {**(self._inflight.segs if self._inflight else {}), **self._pending.segs}
        return {**self.index.segments(), **unflushed}

    def stats(self) -> StoreStats:
        c: Counters = self._counters
        states = [info.state for info in self.segment_states().values()]
        return StoreStats(
            records=c.next_seq, bodies=c.bodies, revisits=c.revisits, raw_bytes=c.raw_bytes,
            stored_bytes=c.stored_bytes, segments=len(states), sealed_segments=states.count(SEALED),
            remote_segments=states.count(REMOTE), pending_records=len(self._unflushed()),
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self.read_only:
                self.flush()
        finally:
            # Even when the final flush fails (disk full), release everything: what was flushed before
            # stays valid, and the next writer truncates the unflushed tail on open.
            if self._shipper is not None:
                self._shipper.close()
            if self._writer is not None:
                self._writer.close()
            self._readers.close()
            self.index.close()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)

    def __enter__(self) -> SegmentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refers_elsewhere(url: str, when: str | None) -> tuple[str, float] | None:
    """Rule 6: the original of a revisit held by another store, if its fetch time was given."""
    try:
        return None if when is None else (url, float(when))
    except ValueError:
        return None


def open_store(root: Path, cfg: StoreConfig, *, read_only: bool = False,
               archive: ArchiveInfo | None = None) -> PageStore:
    """Open (creating when absent, unless ``read_only``) the segment store at ``root``.

    A writer takes an exclusive lock on the directory, truncates torn segment tails left by a crash and
    resumes shipping sealed segments. A read-only store may be opened while a writer runs; it sees what
    the writer has flushed. ``archive``: the warcinfo and request records a writer adds
    (polecat/store/archive.py).
    """
    return SegmentStore.open(root, cfg, read_only=read_only, archive=archive)
