"""A read-only view of a frontier on disk, for ``polecat status`` (safe while a crawler runs)."""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb

from polecat.clock import SYSTEM_CLOCK
from polecat.config import RefreshConfig
from polecat.errors import FrontierError
from polecat.frontier.db import SCHEMA_VERSION, TABLES, UPGRADABLE, CommittedTables
from polecat.frontier.host_table import HOST_COUNTS
from polecat.frontier.keys import host_of_row, ops_prefixes, parse_op_key, queue_prefix_of_row
from polecat.frontier.migrate import mismatch, release_of
from polecat.frontier.records import QueuedUrl, UrlRecord, decode_host
from polecat.frontier.refresh import Freshness, History, RefreshPolicy
from polecat.frontier.refresh_index import stored_freshness
from polecat.frontier.seenlog import MANIFEST, SeenView, manifest_count
from polecat.frontier.tables import TableReader
from polecat.frontier.wal import LOG_NAME, Following, LogOverlay, NotOverlaid, read_log, rows_in, rows_past
from polecat.hosts import host_key
from polecat.writes import Table


@dataclass(frozen=True, slots=True)
class FrontierStatus:
    hosts: int
    hosts_with_queue: int
    queued: int
    fetched: int
    seen_urls: int
    done: tuple[tuple[str, int], ...]
    """Finished URLs by outcome, over all runs."""
    busiest: tuple[tuple[str, int], ...]
    """Hosts with the longest queues (empty unless :func:`read_status` was asked for them)."""
    blocked: tuple[str, ...]
    throttled: tuple[tuple[str, float], ...]
    commits: int
    paused: bool = False
    """An operator paused the node (``polecat pause``); it leases nothing until resumed."""
    freshness: Freshness = field(default_factory=Freshness)
    """The freshness SLO over the finished URLs (polecat/frontier/refresh.py rule 9)."""
    traps: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    """Hosts where spider-trap rules acted most (frontier/traps.py), with counts by rule."""
    releases: tuple[str, ...] = ()
    """The releases of polecat that last opened the frontier (or frontiers, of ``--workers``) to write."""
    revisited: int = 0
    """Finished URLs fetched again after their first fetch (an observed interval, refresh rule 1): 0 for a
    crawl that never refreshed, whose freshness figures mean nothing yet."""


_NO_SEEN = SeenView((), {})
"""The freshness counters read no seen key: the runs need not be mapped for them."""


@contextmanager
def _read_txn(frontier_dir: Path, tables: tuple[str, ...]
              ) -> Iterator[tuple[lmdb.Environment, lmdb.Transaction, dict[str, Any]]]:
    """One read snapshot of the frontier in ``frontier_dir`` and the named tables, schema checked."""
    if not (frontier_dir / "data.mdb").exists():
        raise FrontierError(f"no frontier in {frontier_dir}")
    env = lmdb.open(str(frontier_dir), readonly=True, max_dbs=len(TABLES) + 2, subdir=True)
    try:
        dbs = {name: env.open_db(name.encode(), create=False) for name in ("meta", *tables)}
        with env.begin() as txn:
            schema = json.loads(bytes(txn.get(b"schema", b"{}", db=dbs["meta"])))
            if schema.get("version") != SCHEMA_VERSION:
                raise FrontierError(mismatch(  # a reader: opening it to write (upgrade, crawl) upgrades
                    frontier_dir, release_of(schema), f"schema {schema.get('version')}",
                    f"schema {SCHEMA_VERSION}", upgradable=schema.get("version") in UPGRADABLE))
            yield env, txn, dbs
    finally:
        env.close()


@contextmanager
def _snapshot(frontier_dir: Path, tables: tuple[Table, ...], logged_of: tuple[Table, ...] | None = None
              ) -> Iterator[tuple[dict[str, Any], TableReader, tuple[int, int]]]:
    """The tables of :func:`_read_txn` (those of ``tables`` it has: ``fresh`` is absent from data last
    written by 0.3.0), with the write-ahead log's entries past its commit on top (wal.py rules 6 and 9),
    and ``(commits, seen keys the log added)``. The log's rows are kept of ``meta``, ``seen`` and
    ``logged_of`` (``tables`` when None) only: a read of another table of ``tables`` then raises
    :class:`~polecat.frontier.wal.NotOverlaid` if the log held entries (wal.py rule 5)."""
    kept = ("meta", "seen", *(tables if logged_of is None else logged_of))
    for streamed in (True, False):
        # wal.py rule 6: the file as it was before the read transaction, when rule 9's read cannot tell
        logged = b"" if streamed else read_log(frontier_dir / LOG_NAME)
        with _read_txn(frontier_dir, ()) as (env, txn, dbs):
            for name in tables:
                with contextlib.suppress(lmdb.NotFoundError):
                    dbs[name] = env.open_db(name.encode(), txn=txn, create=False)
            commits = int(txn.get(b"seq", b"0", db=dbs["meta"]))
            committed = CommittedTables(txn, dbs, _NO_SEEN)
            if streamed:
                overlay = _streamed(frontier_dir / LOG_NAME, committed, commits, env, dbs["meta"], kept)
                if overlay is None:
                    continue
            else:
                overlay = LogOverlay(committed, rows_past(logged, commits), kept)
            if overlay.seq is None:
                yield dbs, committed, (commits, 0)
            else:
                yield dbs, overlay, (overlay.seq, overlay.added("seen"))
            return


def _streamed(path: Path, committed: CommittedTables, commits: int, env: lmdb.Environment,
              meta: Any, tables: tuple[Table, ...] | None = None) -> LogOverlay | None:
    """The log's entries past ``commits`` on ``committed`` (their rows of ``tables``; every table's when
    None), read from the file as it is now, a chunk at a time; None when they may not be of one commit
    (wal.py rule 9)."""
    try:
        with open(path, "rb") as fh:
            entries = Following(rows_in(fh, os.fstat(fh.fileno()).st_size, commits), commits)
            overlay = LogOverlay(committed, entries, tables)
    except FileNotFoundError:  # no log: a data dir 0.3.0 last wrote
        return LogOverlay(committed, (), tables)
    with env.begin() as now:
        reset = int(now.get(b"seq", b"0", db=meta)) != commits
    return None if entries.gap or reset else overlay


def read_outcomes(frontier_dir: Path) -> Iterator[UrlRecord]:
    """Every finished URL's record (outcome, reason, time), from one read snapshot (with the write-ahead
    log's entries on top, wal.py rule 6)."""
    with _snapshot(frontier_dir, ("urls",)) as (_, tables, _):
        for _, raw in tables.items("urls"):
            yield UrlRecord.decode(raw)


def read_queued(frontier_dir: Path) -> Iterator[str]:
    """Every queued URL, host by host, from one read snapshot (with the write-ahead log's entries on top,
    wal.py rule 6): what a stop left for the next start to fetch."""
    with _snapshot(frontier_dir, ("hosts", "queue")) as (_, tables, _):
        for row, raw in tables.items("hosts"):
            host = host_of_row(row)
            for key, value in tables.items("queue", queue_prefix_of_row(row, decode_host(raw).num)):
                yield QueuedUrl.decode(value, key, host).url


def read_status(frontier_dir: Path, top: int = 10, refresh: RefreshConfig | None = None,
                now: float | None = None, *, busiest: bool = False) -> FrontierStatus:
    """Summarize the frontier in ``frontier_dir`` from one consistent read snapshot (the freshness SLO
    under ``refresh``, the default refresh settings when None, at ``now``: wall seconds, the machine's
    clock when None, as ``polecat status`` asks). The host figures are the host table's counters
    (host_table.py rule 12): no host record is read, unless ``busiest`` asks for the ``top`` hosts with
    the longest queues (a pass over every record) or the data was last written before the counters.
    The write-ahead log's entries since the last LMDB commit are read on top (wal.py rule 6): a running
    node's last commits are there."""
    now = SYSTEM_CLOCK.wall() if now is None else now
    try:
        return _read_status(frontier_dir, _STATUS_LOGGED + (("hosts",) if busiest else ()), top, refresh, now,
                            busiest=busiest)
    except NotOverlaid:  # no counters or no freshness index for these settings: the records answer
        return _read_status(frontier_dir, _STATUS_TABLES, top, refresh, now, busiest=busiest)


_STATUS_TABLES: tuple[Table, ...] = ("hosts", "ops", "urls", "fresh")
"""The tables :func:`read_status` may read (with ``meta``)."""
_STATUS_LOGGED: tuple[Table, ...] = ("ops", "fresh")
"""Those whose rows in the log :func:`read_status` keeps first (wal.py rule 5): the host records and URL
records only where the counters and the freshness index cannot answer (data written before them, other
refresh settings), in a second read. Issue 39: at 1M hosts, after a kill -9 with ~950,000 writes in the
log, keeping every table's rows cost ~1 s of CPU (benchmarks/README.md, "Issue 39: polecat status after a
kill -9")."""


def _read_status(frontier_dir: Path, logged_of: tuple[Table, ...], top: int, refresh: RefreshConfig | None,
                 now: float, *, busiest: bool) -> FrontierStatus:
    with _snapshot(frontier_dir, _STATUS_TABLES, logged_of) as (dbs, snap, (commits, seen_logged)):
        stored = snap.get("meta", HOST_COUNTS)
        counts = json.loads(stored) if stored is not None else None
        queues: Counter[str] = Counter()
        if busiest or counts is None:
            hosts = fetched = 0
            for key, raw in snap.items("hosts"):
                st = decode_host(raw)
                hosts += 1
                fetched += st.fetched
                if st.queued:
                    queues[host_of_row(key)] = st.queued
            counts = counts or {"hosts": hosts, "with_queue": len(queues), "queued": sum(queues.values()),
                                "fetched": fetched}
        blocked, throttled = [], []
        paused = False
        traps: list[tuple[str, tuple[tuple[str, int], ...]]] = []
        ops = (row for prefix in ops_prefixes(("traps",)) for row in snap.items("ops", prefix))
        for key, raw in ops:  # not the seed hosts' rows, one per seed host (keys.py rule 4)
            kind, arg = parse_op_key(key)
            if kind == "block":
                blocked.append(arg)
            elif kind == "throttle":
                throttled.append((arg, float(raw)))
            elif kind == "paused":
                paused = True
            elif kind == "traps":
                traps.append((arg, tuple(sorted(json.loads(raw).items()))))
        done = json.loads(snap.get("meta", b"done") or b"{}")
        fresh, revisited = _freshness(snap, "fresh" in dbs, refresh or RefreshConfig(), now)
        return FrontierStatus(
            hosts=counts["hosts"], hosts_with_queue=counts["with_queue"], queued=counts["queued"],
            fetched=counts["fetched"],
            seen_urls=manifest_count(snap.get("meta", MANIFEST)) + seen_logged,
            done=tuple(sorted(done.items())),
            busiest=tuple(queues.most_common(top)), blocked=tuple(blocked), throttled=tuple(throttled),
            commits=commits, paused=paused, freshness=fresh,
            traps=_top_traps(traps, top),
            releases=(release_of(json.loads(snap.get("meta", b"schema") or b"{}")),),
            revisited=revisited,
        )


def _freshness(tables: TableReader, indexed: bool, refresh: RefreshConfig,
               now: float) -> tuple[Freshness, int]:
    """The freshness SLO and the URLs revisited: from the refresh index's counters where it was made
    under ``refresh`` (refresh_index.py rule 3; ``indexed``: the data has its tables), else from every URL
    record."""
    stored = stored_freshness(tables, refresh, now) if indexed else None
    if stored is not None:
        return stored
    fresh, policy, revisited = Freshness(), RefreshPolicy(refresh), 0
    for _, raw in tables.items("urls"):
        rec = UrlRecord.decode(raw)
        history = History.from_hex(rec.history)
        revisited += history.n > 0
        policy.tally(fresh, host_key(rec.url), rec.url, history, rec.importance, now)
    return fresh, revisited


def _top_traps(traps: list[tuple[str, tuple[tuple[str, int], ...]]],
               top: int) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    return tuple(sorted(traps, key=lambda t: (-sum(n for _, n in t[1]), t[0]))[:top])


def merge_status(parts: list[FrontierStatus], top: int = 10) -> FrontierStatus:
    """One status for a crawl whose frontier is split over several node dirs (``--workers``): each host
    lives in exactly one of them, so counts add up."""
    done: Counter[str] = Counter()
    busiest: list[tuple[str, int]] = []
    for p in parts:
        done.update(dict(p.done))
        busiest += p.busiest
    return FrontierStatus(
        hosts=sum(p.hosts for p in parts), hosts_with_queue=sum(p.hosts_with_queue for p in parts),
        queued=sum(p.queued for p in parts), fetched=sum(p.fetched for p in parts),
        seen_urls=sum(p.seen_urls for p in parts), done=tuple(sorted(done.items())),
        busiest=tuple(sorted(busiest, key=lambda b: (-b[1], b[0]))[:top]),
        blocked=tuple(sorted({b for p in parts for b in p.blocked})),
        throttled=tuple(sorted({t for p in parts for t in p.throttled})),
        commits=sum(p.commits for p in parts), paused=any(p.paused for p in parts),
        freshness=Freshness(*(sum(getattr(p.freshness, f) for p in parts)
                              for f in ("tracked", "due", "important", "within"))),
        traps=_top_traps([t for p in parts for t in p.traps], top),
        releases=tuple(sorted({r for p in parts for r in p.releases})),
        revisited=sum(p.revisited for p in parts),
    )
