"""Stores known only by their sealed segments in object storage (a dead node's, its disk gone), read
without their index.

Rules:

1. A store's segments in object storage are the objects named ``<store id>-<8 digits>.warc.zst`` under
   the store URL (polecat/store/segments.py); :func:`stores_in` lists them by store id, in segment order.
2. A segment is plain WARC in zstd frames (a near-duplicate's delta is a skippable frame,
   polecat/store/delta.py rule 2): :func:`records` reads it as one zstd stream, one WARC record at a
   time (a segment is never decompressed whole into memory), its ``warcinfo`` included (an export
   leaves it out: polecat/store/export.py rule 1).
3. Such a store holds what its sealed segments hold: its open segment died with its disk
   (polecat/cluster/failover.py rule 7 is why a checkpoint records nothing done that is only there).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, BinaryIO

import obstore
import zstandard

from polecat.errors import CorruptRecord, StoreError
from polecat.store.object import read_all
from polecat.store.segments import parse_segment_name

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
    stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(read_all(remote, name)),
                                                         read_across_frames=True)
    reader = io.BufferedReader(stream)
    try:
        while (record := _next_record(reader)) is not None:
            yield record
    except zstandard.ZstdError as exc:
        raise CorruptRecord(f"segment {name}: {exc}") from exc


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
