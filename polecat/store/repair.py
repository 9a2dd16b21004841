"""``polecat store repair``: make a damaged page store usable again, keeping every intact record.

Rules (this module owns them):

1. A record is intact when its frame lies within its segment file, decompresses, parses as the WARC
   record the index says (type and URL), and, for a body, hashes to its key. Records in object storage
   are trusted (not downloaded).
2. A record that is not intact is dropped from the index (log, URL history, and the body it stored),
   never rewritten. Intact records are never touched.
3. A segment file shorter than the index says (a torn copy, a bad disk) is cut back to the end of its
   last intact frame, and that becomes its committed length; a missing one is recreated empty. Damaged
   frames below that length stay as bytes and are recorded as holes (``store verify`` notes them).
4. A URL is fetched again when it has no intact record left, or when its newest remaining record refers
   to a body that was dropped (for a near-duplicate: its base, or its own delta; a delta whose base is
   dropped, or whose frame a cut removed, is dropped too: polecat/store/delta.py rule 5). The store
   knows no frontier: the caller's ``requeue`` is handed those URLs (``polecat store repair`` asks the
   frontier through polecat/frontier/refetch.py).
5. Repair holds the store's writer lock throughout, ``requeue`` included: it never runs beside a crawl.
   The index is committed before files are cut, so a crash in between leaves tails the next open cuts
   anyway.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from polecat.config import StoreConfig
from polecat.errors import StoreError
from polecat.store.fsck import read_checked
from polecat.store.index import REMOTE, Counters, Index, Locator, LogEntry, SegmentInfo
from polecat.store.segments import lock_writer, segment_name
from polecat.store.segstore import SegmentStore


@dataclass(slots=True)
class RepairReport:
    """What a repair found and did."""

    records: int = 0
    """Log records checked."""
    dropped: list[tuple[LogEntry, str]] = field(default_factory=list)
    """Records dropped, with why."""
    bodies_dropped: int = 0
    cut: list[tuple[int, int, int]] = field(default_factory=list)
    """(segment, committed length before, after) of segments cut back."""
    holes: list[Locator] = field(default_factory=list)
    refetch: list[str] = field(default_factory=list)
    """URLs to fetch again (rule 4), handed to ``requeue``."""
    requested: int = 0
    """What ``requeue`` answered: the refetch requests it wrote (0 when the data dir has no frontier)."""

    @property
    def clean(self) -> bool:
        return not self.dropped and not self.cut


def repair(data_dir: Path, cfg: StoreConfig, requeue: Callable[[list[str]], int], *,
           dry_run: bool = False) -> RepairReport:
    """Check every record of ``data_dir``'s store and repair what is damaged (rules 1-5), then hand the
    URLs to fetch again to ``requeue`` under the writer lock; with ``dry_run`` only report."""
    root = data_dir / "store"
    if not (root / "index").is_dir():
        raise StoreError(f"no page store at {root}")
    lock = lock_writer(root)
    try:
        report, lengths, bodies, counters = _plan(root, cfg)
        if report.clean or dry_run:
            return report
        index = Index(root / "index", read_only=False)
        try:
            index.drop([e for e, _ in report.dropped], bodies, lengths, report.holes, counters)
        finally:
            index.close()
        seg_dir = root / "segments"
        store_id = _store_id(root, cfg)
        for seg, info in lengths.items():
            path = seg_dir / segment_name(store_id, seg)
            with path.open("ab") as fh:
                fh.truncate(info.length)
                os.fsync(fh.fileno())
        report.requested = requeue(report.refetch)
        return report
    finally:
        os.close(lock)


def _store_id(root: Path, cfg: StoreConfig) -> str:
    with SegmentStore.open(root, cfg, read_only=True) as store:
        return store.store_id


def _plan(root: Path, cfg: StoreConfig) -> tuple[RepairReport, dict[int, SegmentInfo], list[bytes], Counters]:
    """What to drop and cut: (report, new segment lengths, body hashes to drop, new counters)."""
    report = RepairReport()
    with SegmentStore.open(root, cfg, read_only=True) as store:
        segments = store.index.segments()
        sizes = {seg: _size(root / "segments" / segment_name(store.store_id, seg))
                 for seg, info in segments.items() if info.state != REMOTE}
        kept_end: dict[int, int] = {}
        remaining: dict[str, LogEntry] = {}
        lost_locs: set[Locator] = set()
        base_of: dict[bytes, bytes] = {}
        """A near-duplicate's own body -> the base its delta was made against (delta.py rule 5)."""
        record_locs: set[Locator] = set()
        for entry in store.index.iter_log():
            report.records += 1
            record_locs.add(entry.loc)
            why = _damage(store, entry, sizes)
            if why:
                report.dropped.append((entry, why))
                lost_locs.add(entry.loc)
            else:
                remaining[entry.record.url] = entry
                if entry.record.own_hash != entry.record.content_hash:
                    base_of[entry.record.own_hash] = entry.record.content_hash
                end = entry.loc.offset + entry.loc.length
                kept_end[entry.loc.segment] = max(kept_end.get(entry.loc.segment, 0), end)
        lengths: dict[int, SegmentInfo] = {}
        for seg, size in sizes.items():
            info = segments[seg]
            if size < info.length:
                new = kept_end.get(seg, 0)
                lengths[seg] = SegmentInfo(info.state, new)
                report.cut.append((seg, info.length, new))
        lost_seqs = {e.seq for e, _ in report.dropped}
        entries = list(store.index.iter_bodies())
        ends = {seg: lengths.get(seg, info).length for seg, info in segments.items()}
        bodies = [digest for digest, b in entries if b.seq in lost_seqs or b.loc in lost_locs
                  or b.loc.offset + b.loc.length > ends[b.loc.segment]]  # a delta frame past a cut
        lost = set(bodies)
        while more := [d for d, _ in entries if d not in lost and base_of.get(d) in lost]:
            lost.update(more)  # a near-duplicate's delta is lost with what it refers to
            bodies += more
        counters = store.index.counters()
    dropped_locs = [e.loc for e, _ in report.dropped]
    dropped_locs += [b.loc for d, b in entries if d in lost and b.loc not in record_locs]  # delta frames
    for loc in dropped_locs:
        if loc.offset + loc.length <= lengths.get(loc.segment, segments[loc.segment]).length:
            report.holes.append(loc)
    dropped_hashes = set(bodies)
    lost_urls = {e.record.url for e, _ in report.dropped}
    report.refetch = sorted({u for u in lost_urls if u not in remaining}
                            | {u for u, e in remaining.items()
                               if {e.record.content_hash, e.record.own_hash} & dropped_hashes})
    report.bodies_dropped = len(bodies)
    revisits = sum(1 for e, _ in report.dropped if e.record.kind == "revisit")
    counters.bodies -= len(bodies)
    counters.revisits -= revisits
    counters.stored_bytes -= sum(e.loc.length for e, _ in report.dropped)
    counters.raw_bytes -= sum(e.record.size for e, _ in report.dropped if e.record.kind == "response")
    return report, lengths, bodies, counters


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _damage(store: SegmentStore, entry: LogEntry, sizes: dict[int, int]) -> str:
    """Why ``entry``'s record is not intact ("" when it is), rule 1."""
    loc = entry.loc
    if loc.segment in sizes and loc.offset + loc.length > sizes[loc.segment]:
        return "past the end of its segment"
    if loc.segment not in sizes:
        return ""  # in object storage: trusted
    try:
        read_checked(store, entry)
    except StoreError as exc:
        return str(exc)
    return ""
