"""Exports for other tools: one WARC file with its CDXJ index, and a CDXJ index of the live segments.

Rules:

1. :class:`WarcExport` writes every intact record in append order, after one ``warcinfo`` record naming
   the export file (polecat/store/archive.py). The segments' own warcinfo records are left out (except
   with zstd, which copies each stored frame whole); request records stay beside their responses.
   Damaged records are skipped and reported; the export finishes.
2. Compression (:data:`COMPRESSIONS`): ``gzip`` writes each WARC record as its own gzip member (what
   ``.warc.gz`` means to warcio, pywb and Heritrix); ``zstd`` keeps the stored frames as they are (a
   ``.warc.zst``, one frame per fetch); ``none`` writes plain records. :func:`compression_for` picks it
   from the file name unless told.
3. The export's CDXJ (``ExportResult.index``) points into the exported file: ``filename`` is its name,
   ``offset``/``length`` those of the gzip member (or zstd frame, or plain record) of each response and
   revisit. :func:`cdxj_lines` is the separate index of the live segments (``filename`` a segment).
4. A CDXJ line is ``<SURT> <14-digit timestamp> <JSON>`` with ``url``, ``mime``, ``status``, ``digest``
   (the WARC-Payload-Digest), ``length``, ``offset`` and ``filename``; lines are sorted. ``pywb``'s
   ``cdxj-indexer`` gives the same lines for the same file (tests/test_warc_export.py).
5. A near-duplicate whose own page the store keeps (polecat/store/delta.py) is exported as the ``response``
   record of that page, with its full payload, not as the store's revisit: replay tools return every
   page's own bytes. A near-duplicate crawled with ``dedup.near_duplicates = "drop"`` stays a revisit.
6. One collection over several stores (the workers of a crawl, the nodes of a cluster): a revisit
   whose original was in another store (a copy found first by another worker or node; its
   ``WARC-Refers-To-Date`` is there when its claim's answer gave it, and its ``WARC-Payload-Digest`` in a
   SHA-256 store, polecat/store/segstore.py rule 6), or written without a digest, is written with the
   original's (from whichever store of the export holds the body) ``WARC-Refers-To-Target-URI``,
   ``WARC-Refers-To-Date`` and ``WARC-Payload-Digest`` (its record id kept), and its CDXJ line carries
   that digest, so replay tools resolve it to the right bytes whichever store held them
   (:class:`Originals`).
7. A store known only by its sealed segments in object storage (a dead node's, polecat/store/remote.py)
   is exported from them, record by record as stored (:meth:`WarcExport.add_sealed`), each record once by
   its ``WARC-Record-ID``, a request record before the response it was stored with. Its revisits keep
   what they were written with (rule 6 resolves those of indexed stores), and a near-duplicate whose own
   body is a delta stays a revisit (rule 5 needs the index).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal
from urllib.parse import urlsplit

import zstandard

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.errors import CorruptRecord, StoreError
from polecat.store import fsck, warc
from polecat.store.archive import ArchiveInfo
from polecat.store.base import OWN_HASH_HEADER, FetchRecord
from polecat.store.index import LogEntry
from polecat.store.segments import segment_name
from polecat.store.segstore import SegmentStore

if TYPE_CHECKING:  # obstore, which it imports, is for a store with a remote only
    from polecat.store.remote import SealedFetch

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

Compression = Literal["gzip", "zstd", "none"]
COMPRESSIONS: tuple[Compression, ...] = ("gzip", "zstd", "none")


def compression_for(path: Path) -> Compression:
    """Rule 2: ``.gz`` -> gzip, ``.zst`` -> zstd, anything else plain."""
    name = path.name.lower()
    return "gzip" if name.endswith(".gz") else "zstd" if name.endswith(".zst") else "none"


@dataclass(slots=True)
class ExportResult:
    written: int = 0
    skipped: list[tuple[LogEntry, str]] = field(default_factory=list)
    """Records left out because they are damaged, with why (the export goes on past them)."""
    index: list[str] = field(default_factory=list)
    """CDXJ lines pointing into the exported file (rule 3), unsorted."""


@dataclass(frozen=True, slots=True)
class Original:
    """The record that stored a body: what a revisit of it refers to (rule 6)."""

    url: str
    fetched_at: float
    sha256: bytes


class Originals:
    """Finds the record that stored a body in any store of a collection (rule 6)."""

    def __init__(self, stores: Sequence[SegmentStore]) -> None:
        self._stores = tuple(stores)

    def find(self, digest: bytes) -> Original | None:
        """The original of the body ``digest``, or None when no store of the collection holds it."""
        for store in self._stores:
            body = store.index.body(digest)
            entry = store.index.log_entry(body.seq) if body is not None else None
            if body is not None and entry is not None:
                return Original(entry.record.url, entry.record.fetched_at, body.sha256)
        return None


class WarcExport:
    """One export file being written: :meth:`start` once, then :meth:`add` each store (rules 1-3).
    ``clock.wall()`` dates the file's warcinfo record; ``originals`` resolves revisits whose body another
    store of the export holds (rule 6)."""

    def __init__(self, out: BinaryIO, filename: str, compression: Compression, *,
                 clock: Clock = SYSTEM_CLOCK, originals: Originals | None = None) -> None:
        self._out = out
        self._clock = clock
        self._filename = filename
        self._compression = compression
        self._originals = originals
        self.result = ExportResult()

    def _write(self, data: bytes) -> tuple[int, int]:
        """Write one unit (a record, or a whole frame for zstd); returns its offset and length."""
        offset = self._out.tell()
        if self._compression == "gzip":
            data = gzip.compress(data, mtime=0)
        elif self._compression == "zstd" and not data.startswith(_ZSTD_MAGIC):  # a stored frame goes as is
            data = zstandard.ZstdCompressor(write_checksum=True).compress(data)
        self._out.write(data)
        return offset, len(data)

    def start(self, info: ArchiveInfo) -> None:
        self._write(warc.encode_warcinfo(info.warcinfo, self._filename, self._clock.wall()))

    def add(self, store: SegmentStore) -> None:
        for entry in store.log_entries():
            record = entry.record
            try:
                frame, raw = fsck.read_checked(store, entry)
                if record.kind == "revisit" and record.own_hash != record.content_hash \
                        and store.has(record.own_hash):
                    record, raw = whole_response(store, record, raw)  # rule 5
                    frame = b""
            except StoreError as exc:
                self.result.skipped.append((entry, str(exc)))
                continue
            records = [r for r in warc.split_records(raw) if not _is_warcinfo(r)]
            original = self._unresolved(store, record, records[-1])
            if original is not None:  # rule 6
                record_id = warc.decode(records[-1]).fields.get("warc-record-id")
                records[-1] = warc.encode_revisit(record, (original.url, original.fetched_at),
                                                  warc.payload_digest_from(original.sha256), record_id,
                                                  store.hash_name)
                frame = b""
            if self._compression == "zstd":
                offset, length = self._write(frame or b"".join(records))
            else:
                for rec in records[:-1]:  # the request record, if kept
                    self._write(rec)
                offset, length = self._write(records[-1])
            self.result.index.append(cdxj_line(store, record, offset, length, self._filename,
                                               original.sha256 if original is not None else None))
            self.result.written += 1

    def add_sealed(self, fetches: Iterable[SealedFetch]) -> None:
        """Rule 7: the fetches of a store known only in object storage (:func:`remote.fetches`: each
        record once), as they were stored, each after its request record."""
        for f in fetches:
            group = [f.raw] if f.request is None else [f.request, f.raw]
            if self._compression == "zstd":
                offset, length = self._write(b"".join(group))
            else:
                for part in group[:-1]:
                    self._write(part)
                offset, length = self._write(f.raw)
            r = f.record
            self.result.index.append(_cdxj(r.url, _stamp(r.fetched_at),
                                           "warc/revisit" if r.kind == "revisit" else _mime(r.headers),
                                           r.status, f.digest, offset, length, self._filename))
            self.result.written += 1

    def _unresolved(self, store: SegmentStore, record: FetchRecord, raw: bytes) -> Original | None:
        """The original of a revisit written without one (its body was in no store of its own then; it may
        be there now, stored later by another copy), from any store of the collection (rule 6). One
        written with its digest but not its original's body (segstore.py rule 6) is resolved too: the
        original the collection holds, whose date its claim's answer may not have given; and one with its
        digest but no date whose body its own store got later (a copy stored in full after it)."""
        if self._originals is None or record.kind != "revisit" or (
                warc.has_field(raw, b"WARC-Payload-Digest") and warc.has_field(raw, b"WARC-Refers-To-Date")
                and store.has(record.content_hash)):
            return None
        return self._originals.find(record.content_hash)


def whole_response(store: SegmentStore, revisit: FetchRecord, raw: bytes) -> tuple[FetchRecord, bytes]:
    """A near-duplicate's revisit as the ``response`` record of its own page (rule 5): its request
    record kept, its record id kept (the request's ``WARC-Concurrent-To`` still names it)."""
    records = warc.split_records(raw)
    own = revisit.own_hash
    body = store.get(own)
    entry = store.index.body(own)
    if entry is None:
        raise CorruptRecord(f"near-duplicate body {own.hex()} is not indexed")
    response = dataclasses.replace(revisit, kind="response", content_hash=own,
                                   headers=tuple(h for h in revisit.headers if h[0] != OWN_HASH_HEADER))
    record_id = warc.decode(records[-1]).fields.get("warc-record-id")
    head, payload, end = warc.encode_response_parts(response, body, entry.sha256, record_id, store.hash_name)
    return response, b"".join([*records[:-1], head, payload, end])


def _is_warcinfo(record: bytes) -> bool:
    return warc.has_field(record, b"WARC-Type: warcinfo")


def surt(url: str) -> str:
    """Sort-friendly URI Reordering Transform, as CDX indexes key URLs: ``com,example)/path?q``."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host.startswith("www."):
        host = host[4:]
    key = ",".join(reversed(host.split(".")))
    if parts.port and parts.port not in (80, 443):
        key += f":{parts.port}"
    path = parts.path.lower() or "/"
    query = "&".join(sorted(parts.query.lower().split("&"))) if parts.query else ""
    return f"{key}){path}" + (f"?{query}" if query else "")


def _mime(headers: tuple[tuple[str, str], ...]) -> str:
    for name, value in headers:
        if name.lower() == "content-type":
            return value.split(";", 1)[0].strip().lower()
    return "unk"


def cdxj_line(store: SegmentStore, r: FetchRecord, offset: int, length: int, filename: str,
              sha256: bytes | None = None) -> str:
    """The CDXJ line of record ``r`` stored at ``offset``/``length`` of ``filename`` (rule 4); ``sha256``:
    the payload's, when another store holds the body (rule 6)."""
    if sha256 is None:
        body = store.index.body(r.content_hash)
        sha256 = body.sha256 if body else None
    return _cdxj(r.url, _stamp(r.fetched_at), "warc/revisit" if r.kind == "revisit" else _mime(r.headers),
                 r.status,
                 warc.payload_digest_from(sha256) if sha256 else "-", offset, length, filename)


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%d%H%M%S")


def _cdxj(url: str, stamp: str, mime: str, status: int, digest: str, offset: int, length: int,
          filename: str) -> str:
    fields = {"url": url, "mime": mime, "status": str(status), "digest": digest, "length": str(length),
              "offset": str(offset), "filename": filename}
    return f"{surt(url)} {stamp} {json.dumps(fields, separators=(', ', ': '))}"



def cdxj_lines(store: SegmentStore) -> list[str]:
    """The CDXJ index of every record in the live segments (rule 3's separate index), sorted."""
    lines = [cdxj_line(store, e.record, e.loc.offset, e.loc.length,
                       segment_name(store.store_id, e.loc.segment)) for e in store.log_entries()]
    lines.sort()
    return lines
