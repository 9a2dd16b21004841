"""Exports for other tools: one WARC file, and a CDXJ index of the segments for replay (pywb).

CDXJ lines are ``<SURT> <14-digit timestamp> <JSON>``, sorted, with ``url``, ``mime``, ``status``,
``digest`` (the WARC-Payload-Digest), ``length`` and ``offset`` of the zstd frame, and ``filename``: the
segment (``*.warc.zst``) holding it. Each frame is a whole WARC record, so a replay tool that reads
zstd WARCs can seek straight to it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import BinaryIO
from urllib.parse import urlsplit

from polecat.store import warc
from polecat.store.segments import segment_name
from polecat.store.segstore import SegmentStore


def export_warc(store: SegmentStore, out: BinaryIO, *, compressed: bool) -> int:
    """Write every record in append order; ``compressed`` keeps the zstd frames (a ``.warc.zst``)."""
    count = 0
    for entry in store.log_entries():
        frame = store.read_frame(entry.loc)
        out.write(frame if compressed else store.decompress(frame))
        count += 1
    return count


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
