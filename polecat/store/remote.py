"""Stores known only by their sealed segments in object storage (a dead node's, its disk gone), read
without their index.

Rules:

1. A store's segments in object storage are the objects named ``<store id>-<8 digits>.warc.zst`` under
   the store URL (polecat/store/segments.py); :func:`stores_in` lists them by store id, in segment order.
2. A segment is plain WARC in zstd frames (a near-duplicate's delta is a skippable frame,
   polecat/store/delta.py rule 2): :func:`records` reads it as one zstd stream, one WARC record at a
   time, from ranged reads of :data:`READ_BUFFER` bytes (a segment is never held whole in memory,
   compressed or not: an export's memory does not grow with the segment size). :func:`fetches` makes
   of them the fetch records the store had indexed (each ``response`` and ``revisit`` record, from its
   WARC and HTTP heads: ``WARC-Polecat-Content-Hash`` is the content hash), each with the ``request``
   record stored before it, each record once by its ``WARC-Record-ID``; a record that does not parse is
   left out and said why.
3. Such a store holds what its sealed segments hold: its open segment died with its disk
   (polecat/cluster/failover.py rule 7 is why a checkpoint records nothing done that is only there).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO, cast

import obstore
import zstandard

from polecat.errors import CorruptRecord, StoreError
from polecat.store import warc
from polecat.store.base import FetchRecord
from polecat.store.segments import parse_segment_name

READ_BUFFER = 1 << 20
"""Bytes of a segment fetched per ranged read (rule 2)."""
MAX_HEAD = 1 << 20
"""Longest WARC header block a reader accepts (a corrupt segment must not make it read gigabytes)."""


def stores_in(remote: Any) -> dict[str, list[str]]:
    """Rule 1: store id -> the names of its segments in ``remote``, in segment order."""
    found: dict[str, list[tuple[int, str]]] = {}
    try:
        for batch in obstore.list(remote):
            for meta in batch:
                path = str(meta["path"])
                parsed = parse_segment_name(path.rsplit("/", 1)[-1])
                if parsed is not None:
                    found.setdefault(parsed[0], []).append((parsed[1], path))
    except (OSError, obstore.exceptions.BaseError) as exc:
        raise StoreError(f"listing the object store failed: {exc}") from exc
    return {sid: [name for _, name in sorted(segs)] for sid, segs in sorted(found.items())}


def records(remote: Any, name: str) -> Iterator[bytes]:
    """Rule 2: the WARC records of segment ``name``, in order; CorruptRecord where it stops making sense
    (what was read before stands)."""
    try:
        source = obstore.open_reader(remote, name, buffer_size=READ_BUFFER)
        stream = zstandard.ZstdDecompressor().stream_reader(cast(BinaryIO, source), read_across_frames=True)
        reader = io.BufferedReader(stream)
        while (record := _next_record(reader)) is not None:
            yield record
    except zstandard.ZstdError as exc:
        raise CorruptRecord(f"segment {name}: {exc}") from exc
    except (OSError, obstore.exceptions.BaseError) as exc:
        raise StoreError(f"read of {name} failed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class SealedFetch:
    """One fetch read back from a sealed segment (rule 2)."""

    record: FetchRecord
    raw: bytes
    """Its ``response`` or ``revisit`` record, as stored."""
    request: bytes | None
    """The ``request`` record stored before it (``store.request_records``), if any."""
    digest: str
    """Its ``WARC-Payload-Digest`` ("-" for a revisit written without one)."""
    payload: bytes | None
    """The body of a ``response`` (None for a revisit)."""


def fetches(records: Iterable[bytes], seen: set[str], skipped: list[str]) -> Iterator[SealedFetch]:
    """Rule 2: the fetches among a segment's ``records`` whose record ids are not in ``seen`` (which gains
    them); why a record was left out goes to ``skipped``."""
    request: bytes | None = None
    for raw in records:
        if warc.has_field(raw, b"WARC-Type: request"):
            request = raw
            continue
        if warc.has_field(raw, b"WARC-Type: warcinfo"):
            continue
        held, request = request, None
        try:
            rec = warc.decode(raw)
            record = _record(rec, raw)
        except (CorruptRecord, ValueError, KeyError) as exc:
            skipped.append(f"a record left out: {exc}")
            continue
        record_id = rec.fields.get("warc-record-id", "")
        if record_id in seen:
            continue
        seen.add(record_id)
        yield SealedFetch(record, raw, held, rec.fields.get("warc-payload-digest", "-"), rec.payload)


def _record(rec: warc.DecodedRecord, raw: bytes) -> FetchRecord:
    f = rec.fields
    hashed = f.get("warc-polecat-content-hash", "").partition(":")[2]
    return FetchRecord(url=f["warc-target-uri"],
                       fetched_at=datetime.fromisoformat(f["warc-date"].replace("Z", "+00:00")).timestamp(),
                       status=rec.status, headers=warc.http_headers(raw), content_hash=bytes.fromhex(hashed),
                       size=len(rec.payload or b""), truncated="warc-truncated" in f,
                       duplicate_of=f.get("warc-refers-to-target-uri"),
                       kind="revisit" if rec.kind == "revisit" else "response")


def _next_record(reader: BinaryIO) -> bytes | None:
    head = bytearray()
    while not head.endswith(b"\r\n\r\n"):
        line = reader.readline(MAX_HEAD)
        if not line:
            if head:
                raise CorruptRecord("segment ends inside a WARC header")
            return None
        head += line
        if len(head) > MAX_HEAD:
            raise CorruptRecord("WARC header past its bound")
    length = next((line[15:].strip() for line in bytes(head).split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), b"")
    if not length.isdigit():
        raise CorruptRecord("WARC record without a valid Content-Length")
    rest = reader.read(int(length) + 4)
    if len(rest) != int(length) + 4:
        raise CorruptRecord("segment ends inside a WARC record")
    return bytes(head) + rest
