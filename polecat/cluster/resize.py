"""Changing N between runs of a ``--workers`` crawl: slices move to their new owners before any fetch.

Rules:
1. Runs offline, in the parent, before any worker starts: nothing is leased while slices move, so no
   host can be served by two owners.
2. Ownership before and after is the Ring over ``w0..w(N-1)`` and ``w0..w(M-1)`` (before: of the
   layout's recorded Ring version, after: the current one; layout rule 6); only the slices whose
   owner changes move (``Ring.moves``), each as one bundle per (old owner, new owner) pair: exported
   from the old owner's frontier, adopted by the new owner's (politeness state travels with the hosts,
   and each adopted host waits one full interval from the adoption), then released by the old owner.
3. URLs still in an old worker's hand-off outbox are queued with their owner under the new ring, then
   dropped from the outbox.
4. Crash safety: ``DATA/resize.json`` names the change while it runs; the order is adopt and commit at
   the new owners, then release and commit at the old ones, then the outbox replay, then the layout
   file. A crash anywhere leaves the journal, and the next run does the whole change again: an export
   from an owner that already released finds nothing, an adopter's seen-set absorbs what it already
   has (nothing queued twice), an outbox URL already queued is seen.
5. A one-process crawl becomes worker 0 of a one-worker layout first (its ``frontier``, ``seen.bloom``
   and ``store`` move to ``DATA/workers/0``), then resizes like any other.
6. Worker dirs past the new count keep their page stores (readers still read them); their frontiers
   end empty.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.batch import decode_urls
from polecat.cluster.layout import record_layout, recorded_ring, recorded_workers, worker_config, worker_dir
from polecat.cluster.outbox import Outbox
from polecat.cluster.ring import Ring
from polecat.config import Config
from polecat.frontier.opener import OpenedFrontier, open_frontier
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key

JOURNAL = "resize.json"
_SINGLE_PARTS = ("frontier", "seen.bloom", "store")


@dataclass(frozen=True, slots=True)
class ResizeReport:
    old: int
    new: int
    slices_moved: int
    hosts: int
    queued: int
    """URLs queued at new owners from the moved slices."""
    outbox_urls: int
    """URLs replayed from the old outboxes."""
    seconds: float


def member_ids(n: int) -> list[str]:
    return [f"w{k}" for k in range(n)]


def adopt_single(data: Path) -> None:
    """Rule 5: make a one-process crawl in ``data`` worker 0 of a one-worker layout."""
    target = worker_dir(data, 0)
    target.mkdir(parents=True, exist_ok=True)
    for part in _SINGLE_PARTS:
        if (data / part).exists() and not (target / part).exists():
            os.replace(data / part, target / part)
    record_layout(data, 1)


def resize(cfg: Config, new: int, now: float | None = None, *, clock: Clock = SYSTEM_CLOCK) -> ResizeReport:
    """Move the crawl in ``cfg.data_dir`` from its recorded worker count to ``new`` (rules above), at
    ``now`` (default ``clock.wall()``); the report's ``seconds`` are on ``clock.monotonic()``."""
    data = cfg.data_dir
    started = clock.monotonic()
    journal = data / JOURNAL
    if journal.exists():
        change = json.loads(journal.read_text())
        old, old_ring = int(change["from"]), int(change.get("ring", 1))
    else:
        if recorded_workers(data) is None:
            adopt_single(data)
        old, old_ring = recorded_workers(data) or 1, recorded_ring(data)
        _write_durably(journal, json.dumps({"from": old, "to": new, "ring": old_ring}))
    now = clock.wall() if now is None else now
    moves = Ring(member_ids(old), version=old_ring).moves(Ring(member_ids(new)))
    pairs: dict[tuple[int, int], set[int]] = defaultdict(set)
    for s, (was, becomes) in moves.items():
        pairs[(int(was[1:]), int(becomes[1:]))].add(s)
    frontiers: dict[int, OpenedFrontier] = {}

    def frontier(k: int) -> OpenedFrontier:
        if k not in frontiers:
            frontiers[k] = open_frontier(worker_config(cfg, k, new if k < new else old), now)
        return frontiers[k]

    hosts = queued = replayed = 0
    try:
        for (src, dst), slices in sorted(pairs.items()):
            bundle, dst_local = frontier(src).frontier.export_slices(slices, now), frontier(dst)
            report = dst_local.db.applied(dst_local.frontier.adopt(bundle, now))
            hosts += report.hosts
            queued += report.queued
        for k in sorted({dst for _, dst in pairs}):
            frontier(k).commit()
        moved_out: dict[int, set[int]] = defaultdict(set)
        for (src, _), slices in pairs.items():
            moved_out[src] |= slices
        for src, slices in sorted(moved_out.items()):
            frontier(src).db.apply(frontier(src).frontier.release_slices(slices))
            frontier(src).commit()
        replayed = _replay_outboxes(cfg, old, Ring(member_ids(new)), frontier, now)
    finally:
        for lf in frontiers.values():
            lf.close()
    record_layout(data, new)
    journal.unlink()
    return ResizeReport(old, new, len(moves), hosts, queued, replayed, clock.monotonic() - started)


def _replay_outboxes(cfg: Config, old: int, ring: Ring, get: Callable[[int], OpenedFrontier],
                     now: float) -> int:
    """Rule 3: queue every URL waiting in an old worker's outbox with its new owner."""
    replayed = 0
    for k in range(old):
        path = worker_dir(cfg.data_dir, k) / "handoff"
        if not path.exists():
            continue
        box = Outbox(path)
        try:
            pending = box.pending()
            if not pending:
                continue
            touched: set[int] = set()
            for peer, seqs in pending.items():
                for seq in seqs:
                    for u in decode_urls(box.read(peer, seq)):
                        owner = int(ring.owner(slice_of(host_key(u.url)))[1:])
                        local = get(owner)
                        local.db.applied(local.frontier.add(u.url, u.depth, u.importance, now, hops=u.hops))
                        touched.add(owner)
                        replayed += 1
            for owner in sorted(touched):
                get(owner).commit()
            for peer, seqs in pending.items():
                for seq in seqs:
                    box.ack(peer, seq)
            box.commit()
        finally:
            box.close()
    return replayed


def _write_durably(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
