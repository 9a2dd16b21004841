"""``polecat store verify``: check that every index entry reads back whole and hashes right.

Faults (any one makes the check fail): an index entry whose frame cannot be read, decompressed or
parsed; a body whose hash differs from its key; a log record whose WARC record disagrees with it (URL,
type); a committed segment shorter than the index says; bytes inside a segment's committed range that
no index entry covers (orphans); a body without the log record that stored it; a near-duplicate's delta
whose base cannot be read (polecat/store/delta.py).

Reported, not faults: bytes past a segment's committed length (a writer is appending, or a crash left a
tail that the next writer open cuts), segment files the index does not know, and the holes that
``store repair`` left where it dropped damaged records.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from polecat.errors import CorruptRecord, StoreError
from polecat.store import warc
from polecat.store.base import content_hash
from polecat.store.index import REMOTE, Locator, LogEntry
from polecat.store.segments import list_segment_files, segment_name
from polecat.store.segstore import SegmentStore
from polecat.store.warc import DecodedRecord


@dataclass(slots=True)
class Report:
    faults: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bodies: int = 0
    records: int = 0

    @property
    def ok(self) -> bool:
        return not self.faults


def _read(store: SegmentStore, loc: Locator, report: Report, what: str) -> DecodedRecord | None:
    """The record at ``loc``, or None after noting the fault."""
    try:
        return store.read_record(loc)
    except StoreError as exc:
        report.faults.append(f"{what}: segment {loc.segment} offset {loc.offset}: {exc}")
        return None


def read_checked(store: SegmentStore, entry: LogEntry) -> tuple[bytes, bytes]:
    """The zstd frame and the WARC record of ``entry``, checked: it decompresses, parses as the record
    the index says (type and URL) and, for a body, hashes to its key. Else CorruptRecord (or StoreError
    when it cannot be read at all) saying why."""
    frame = store.read_frame(entry.loc)
    raw = store.decompress(frame)
    rec = warc.decode(raw)
    target = rec.fields.get("warc-target-uri")
    if rec.kind != entry.record.kind or target != warc.clean_text(entry.record.url):
        raise CorruptRecord(f"the frame holds a {rec.kind} of {target}")
    digest = entry.record.content_hash
    payload = rec.payload
    if rec.kind == "response" and (payload is None or content_hash(payload, store.hash_name) != digest):
        raise CorruptRecord("the body does not hash to its key")
    return frame, raw


def verify(store: SegmentStore) -> Report:
    """Check the whole store (its flushed state). Reads every record once per index entry."""
    report = Report()
    covered: dict[int, list[Locator]] = defaultdict(list)
    seqs: set[int] = set()
    for entry in store.log_entries():
        report.records += 1
        seqs.add(entry.seq)
        covered[entry.loc.segment].append(entry.loc)
        what = f"record {entry.seq} ({entry.record.url})"
        rec = _read(store, entry.loc, report, what)
        if rec is not None:
            target = rec.fields.get("warc-target-uri")
            if rec.kind != entry.record.kind or target != warc.clean_text(entry.record.url):
                report.faults.append(f"{what}: WARC record is a {rec.kind} of {target}")
    for digest, body in store.index.iter_bodies():
        report.bodies += 1
        what = f"body {digest.hex()}"
        if body.seq not in seqs:
            report.faults.append(f"{what}: the log record {body.seq} that stored it is missing")
        covered[body.loc.segment].append(body.loc)  # a near-duplicate's delta frame is a body's alone
        try:
            store.get(digest)  # reads, decompresses (over its base, for a delta) and checks the hash
        except StoreError as exc:
            report.faults.append(f"{what}: segment {body.loc.segment} offset {body.loc.offset}: {exc}")
    for hole in store.index.holes():
        covered[hole.segment].append(hole)
        report.notes.append(f"segment {hole.segment}: {hole.length} damaged bytes at offset {hole.offset} "
                            "(dropped by store repair)")
    segments = store.segment_states()
    for seg, info in sorted(segments.items()):
        pos = 0
        for loc in sorted(set(covered[seg]), key=lambda loc: loc.offset):
            if loc.offset > pos:
                report.faults.append(f"segment {seg}: {loc.offset - pos} orphan bytes at offset {pos}")
            if loc.offset < pos:
                report.faults.append(f"segment {seg}: records overlap at offset {loc.offset}")
            pos = max(pos, loc.offset + loc.length)
        if pos < info.length:
            report.faults.append(f"segment {seg}: {info.length - pos} orphan bytes at offset {pos}")
        if info.state != REMOTE:
            path = store.root / "segments" / segment_name(store.store_id, seg)
            size = path.stat().st_size if path.exists() else -1
            if size < info.length:
                report.faults.append(f"segment {seg}: {max(size, 0)} bytes on disk, {info.length} committed")
            elif size > info.length:
                report.notes.append(f"segment {seg}: {size - info.length} bytes past the committed length "
                                    "(being written, or cut at the next writer open)")
    for seg, path in list_segment_files(store.root / "segments", store.store_id):
        if seg not in segments:
            report.notes.append(f"{path.name}: not in the index ({path.stat().st_size} orphan bytes)")
    return report
