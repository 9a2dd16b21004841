"""Exports for other tools: one WARC file, and a CDXJ index of the segments for replay (pywb).

CDXJ lines are ``<SURT> <14-digit timestamp> <JSON>``, sorted, with ``url``, ``mime``, ``status``,
``digest`` (the WARC-Payload-Digest), ``length`` and ``offset`` of the zstd frame, and ``filename``: the
segment (``*.warc.zst``) holding it. Each frame is a whole WARC record, so a replay tool that reads
zstd WARCs can seek straight to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import BinaryIO
from urllib.parse import urlsplit

from polecat.errors import StoreError
from polecat.store import fsck, warc
from polecat.store.index import LogEntry
from polecat.store.segments import segment_name
from polecat.store.segstore import SegmentStore


@dataclass(slots=True)
class ExportResult:
    written: int = 0
    skipped: list[tuple[LogEntry, str]] = field(default_factory=list)
    """Records left out because they are damaged, with why (the export goes on past them)."""


def export_warc(store: SegmentStore, out: BinaryIO, *, compressed: bool) -> ExportResult:
    """Write every intact record in append order; ``compressed`` keeps the zstd frames (a ``.warc.zst``).
    A record that cannot be read, decompressed or parsed, or whose body does not hash to its key, is
    skipped and reported; the export finishes."""
    result = ExportResult()
    for entry in store.log_entries():
        try:
            frame, record = fsck.read_checked(store, entry)
        except StoreError as exc:
            result.skipped.append((entry, str(exc)))
            continue
        out.write(frame if compressed else record)
        result.written += 1
    return result


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


def cdxj_lines(store: SegmentStore) -> list[str]:
    """The CDXJ index of every record, sorted."""
    lines = []
    for entry in store.log_entries():
        r = entry.record
        body = store.index.body(r.content_hash)
        fields = {
            "url": r.url,
            "mime": "warc/revisit" if r.kind == "revisit" else _mime(r.headers),
            "status": str(r.status),
            "digest": warc.payload_digest_from(body.sha256) if body else "-",
            "length": str(entry.loc.length),
            "offset": str(entry.loc.offset),
            "filename": segment_name(store.store_id, entry.loc.segment),
        }
        stamp = datetime.fromtimestamp(r.fetched_at, UTC).strftime("%Y%m%d%H%M%S")
        lines.append(f"{surt(r.url)} {stamp} {json.dumps(fields, separators=(', ', ': '))}")
    lines.sort()
    return lines
