"""Frontier alone (no network): push and pop rates, and resident memory, at millions of URLs.

    python -m benchmarks.bench_frontier --urls 10000000 --hosts 100000
    python -m benchmarks.bench_frontier --admit 2000 [--links 40 --rounds 5]
    python -m benchmarks.bench_frontier --urls 1000000 --hosts 100000 --pops 0 --drop seen --drop queue

Pushes ``--urls`` canonical URLs spread over ``--hosts`` hosts (committing every 2,000 operations, as
the node does), then leases and completes ``--pops`` of them with a fake clock, and reports the rates
and the process's resident memory after each phase. The point: memory grows with hosts, not with
queued URLs (LMDB holds those, on disk).

``--admit PAGES`` measures routing before dedup instead: the outlinks of PAGES pages (``--links`` each,
new URLs over ``--hosts`` hosts) admitted three ways on three fresh frontiers, in alternating rounds:
``add_many`` (no routing), ``admit`` without a ring, and ``admit`` under a one-member Ring. It prints the
CPU time (``time.process_time``) per page of each, so load from other processes does not count.

Each phase also reports the bytes the process wrote (``wchar`` of /proc/self/io: LMDB's commits, the
seen table's runs; and ``write_bytes``, see :func:`written`) per URL pushed or lease completed, and the
end reports the bytes on disk per URL. ``--drop TABLE`` (repeatable) discards every write to the
named tables, to attribute the writes to tables: the difference with a run that keeps them is theirs.
``--commit-ops`` changes how many changes a commit gathers (the node's ``frontier.commit_ops``).
``--urls 0 --dir DIR`` leases from the frontier an earlier run left in DIR (no push); ``--profile N``
prints the N functions of most own time in the pop+complete phase.
``--log-mb`` sets the write-ahead log a commit appends to before the LMDB is committed (``frontier.log_mb``);
each phase reports its commits: the log appends, and the LMDB commits, whose length a node's leasing waits.
``--writemap``/``--no-writemap`` opens the LMDB so or not (``frontier.writemap``, off by default); its
writes back are not write calls, so ``wchar`` then counts the log and the seen runs only (``write_bytes``
counts them, by folio). ``--log-share`` and ``--log-max-mb`` size the log an LMDB commit comes at by the
LMDB's (``frontier.log_share``, ``frontier.log_max_mb``; db.py rule 14; ``--log-share 0``: ``--log-mb``
always).
``--replay`` then pushes more URLs (other paths, same hosts) in log appends until the next commit would
be an LMDB commit, applies one more batch, closes as a kill -9 leaves it (that batch uncommitted, so
no LMDB commit at the close) and times the next open: the replay of the biggest log the settings let a
crash leave. ``--save-crash PATH`` copies the frontier so left to PATH first; ``--reopen PATH`` (alone)
times the open of a copy of such a frontier, wall and CPU (``time.process_time``), after a ``sync`` so
that the copy's writeback does not count: the same replay again, to compare trees back to back.
``--reopen-log-mb MIB`` cuts the copy's log after its last whole entry within MIB (of msgpack, as db.py rule
14 counts the log) first: the crash the
same run would have left when its log held that much (entries are appended in order, and no LMDB commit
came between), so one saved crash gives the replay of every smaller cap. ``--reopen-compress`` then
rewrites the copy's log with its entries compressed (wal.py rule 12), so that a crash an older release
saved gives this release's replay.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from polecat.cluster.ring import Ring
from polecat.config import Config, FrontierConfig, PolitenessConfig, ScopeConfig
from polecat.dedup.seen import SeenSet
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.opener import log_options
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Idle, Lease, Wait
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.routing import Routing
from polecat.frontier.wal import _FRAME_HEAD as FRAME_HEAD  # for cut_log: a payload's msgpack size
from polecat.frontier.wal import _HEADER as HEADER  # the entry header (wal.py rule 1), for cut_log
from polecat.frontier.wal import LOG_NAME, Entry, WriteLog, _msgpack_size, entries_in
from polecat.writes import Write


def rss_mb(field: str = "RssAnon") -> float:
    """Resident memory in MB. ``RssAnon`` is the process's own heap; LMDB's memory-mapped pages show up
    in ``RssFile`` (page cache the kernel can drop), so the anonymous part is what grows with state."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def written() -> tuple[int, int]:
    """``(wchar, write_bytes)`` of /proc/self/io so far ((0, 0) where unknown): the bytes this process
    passed to write calls, and those the kernel counted as dirtied in the page cache for storage (by
    whole folio: on a kernel with large folios in page cache, a 4 KiB write into a large folio counts
    the folio, so write_bytes can be several times wchar)."""
    got = {}
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                got[name] = int(value)
    except OSError:
        pass
    return got.get("wchar", 0), got.get("write_bytes", 0)


def per(after: tuple[int, int], before: tuple[int, int], n: int) -> str:
    wchar, dirtied = after[0] - before[0], after[1] - before[1]
    return (f"written {wchar / 1024**2:,.0f} MB ({wchar / max(1, n):,.0f} B each; write_bytes "
            f"{dirtied / max(1, n):,.0f} B each)")


def memory() -> str:
    return f"RSS anon {rss_mb():.0f} MB, file-backed (LMDB map) {rss_mb('RssFile'):.0f} MB"


CFG = Config(
    scope=ScopeConfig(mode="any", max_queue_per_host=10**9, max_pages_per_host=10**9),
    politeness=PolitenessConfig(rate=1000.0),
    frontier=FrontierConfig(map_size=256 * 1024**3),
)


class DroppingDB(FrontierDB):
    """A FrontierDB that discards the writes to some tables (``--drop``: the per-table attribution)."""

    dropped: frozenset[str] = frozenset()

    def apply(self, writes: Sequence[Write]) -> None:
        dropped = self.dropped
        super().apply([w for w in writes if getattr(w, "table", None) not in dropped])


def open_db(workdir: Path, drop: Sequence[str]) -> FrontierDB:
    DroppingDB.dropped = frozenset(drop)
    return DroppingDB(workdir / "frontier", map_size=CFG.frontier.map_size, params={},
                      **log_options(CFG.frontier))


def open_frontier(workdir: Path, urls: int,
                  drop: Sequence[str] = ()) -> tuple[FrontierDB, RobotsPolicy, Frontier]:
    db = open_db(workdir, drop)
    held = db.count("seen")
    seen = SeenSet.restore(db.seen_keys, held, workdir / "seen.bloom", db.seq, max(urls, held, 1), 0.01)
    robots = RobotsPolicy(CFG.robots, CFG.fetch.user_agent)
    return db, robots, Frontier(db, CFG, robots, seen, 0.0)


def admit_cost(workdir: Path, args: argparse.Namespace) -> None:
    """CPU per page of admitting one page's outlinks, three ways (see the module docstring)."""
    total = args.admit * args.rounds
    names = ["add_many", "admit", "ring1"]
    ways = {name: open_frontier(workdir / name, total * args.links) for name in names}
    ways["ring1"][2].set_routing(Routing(Ring(["solo"]), "solo"))
    cpu = dict.fromkeys(ways, 0.0)
    rng = random.Random(1)
    page = 0
    for r in range(args.rounds):
        pages = [[f"http://h{rng.randrange(args.hosts)}.bench.test/p/{page + p}/{k}.html"
                  for k in range(args.links)] for p in range(args.admit)]
        page += args.admit
        for name in names[r % 3:] + names[: r % 3]:  # each way goes first in turn
            db, _, frontier = ways[name]
            add = frontier.add_many if name == "add_many" else frontier.admit
            t0 = time.process_time()
            for links in pages:
                db.apply(add(links, 1, 0.1, 0.0).writes)
                if frontier.pending_ops >= CFG.frontier.commit_ops:
                    frontier.commit()
            frontier.commit()
            cpu[name] += time.process_time() - t0
    for name, (db, _, frontier) in ways.items():
        print(f"{name:9s} {cpu[name] / total * 1e6:8.1f} us CPU/page ({args.links} links), "
              f"queued {frontier.queued:,}")
        db.close()


class Commits:
    """The frontier's commits of one phase, timed: those that committed the LMDB (the write-ahead log
    emptied, polecat/frontier/db.py rule 6) hold the frontier's calls back for their length in a node;
    and the largest RssAnon seen at a commit (the open transaction's dirty pages are anonymous memory)."""

    def __init__(self, db: FrontierDB, frontier: Frontier) -> None:
        self.db, self.frontier = db, frontier
        self.lmdb: list[float] = []
        self.log: list[float] = []
        self.peak_anon = 0.0
        self.biggest_log = 0

    def commit(self, *, last: bool = False) -> None:
        """A commit; ``last``: the phase's last, an LMDB commit, so that what a phase wrote counts the
        LMDB commit of its log."""
        before = self.db.wal.size
        t0 = time.perf_counter()
        self.db.apply(self.frontier.prepare_commit())
        self.db.commit(to_lmdb=last)
        took = time.perf_counter() - t0
        # With no log (``--log-mb 0``) every commit is an LMDB commit, and so is the last of a phase even
        # when the log was empty before it.
        lmdb_commit = last or not self.db.log_bytes or (before and not self.db.wal.size)
        (self.lmdb if lmdb_commit else self.log).append(took)
        if lmdb_commit:
            self.biggest_log = max(self.biggest_log, before)
        self.peak_anon = max(self.peak_anon, rss_mb())

    def report(self) -> str:
        lm, lg = self.lmdb or [0.0], self.log or [0.0]
        return (f"commits: {len(self.log):,} log appends (mean {sum(lg) / len(lg) * 1e3:.1f} ms, max "
                f"{max(lg) * 1e3:.0f} ms), {len(self.lmdb)} LMDB commits (mean {sum(lm) / len(lm):.2f} s, "
                f"max {max(lm):.2f} s, biggest log {self.biggest_log / 2**20:,.0f} MiB); "
                f"peak RssAnon at a commit {self.peak_anon:.0f} MB")


def table_sizes(db: FrontierDB, urls: int) -> str:
    """Pages in use per table (LMDB's own count), as bytes per URL pushed and per row of the table."""
    txn = db.txn
    runs = sum(p.stat().st_size for p in db.seen.directory.iterdir())
    out = [f"seen {db.count('seen'):,} keys in runs {runs / max(1, urls):.1f} B/URL"]
    for name, handle in db.tables.items():
        if name == "seen":
            continue
        st = txn.stat(handle)
        used = (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]) * st["psize"]
        if used:
            out.append(f"{name} {st['entries']:,} rows {used / max(1, urls):.1f} B/URL "
                       f"({used / max(1, st['entries']):.1f} B/row)")
    return "per table: " + ", ".join(out) + "; " + queue_fill(db)


NODE_BYTES = 10
"""What LMDB adds to a row in a leaf page: the node's header (8 bytes) and its slot pointer (2)."""


def queue_fill(db: FrontierDB) -> str:
    """The ``queue`` rows' own bytes (keys, values), and how full its leaf pages are with them and LMDB's
    :data:`NODE_BYTES` a row: what a row costs on disk is its bytes over that fill."""
    txn, handle = db.txn, db.tables["queue"]
    keys = values = 0
    with txn.cursor(db=handle) as cur:
        for key, value in cur:
            keys += len(key)
            values += len(value)
    st = txn.stat(handle)
    rows, leaves = max(1, st["entries"]), st["leaf_pages"] * st["psize"]
    return (f"queue rows: key {keys / rows:.1f} B + value {values / rows:.1f} B + LMDB {NODE_BYTES} B, "
            f"{st['leaf_pages']:,} leaf + {st['branch_pages']:,} branch pages, leaf fill "
            f"{(keys + values + NODE_BYTES * st['entries']) / max(1, leaves):.1%}")


def main() -> None:
    global CFG
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--pops", type=int, default=200_000)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--admit", type=int, default=0, metavar="PAGES")
    ap.add_argument("--links", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--drop", action="append", default=[], metavar="TABLE")
    ap.add_argument("--commit-ops", type=int, default=CFG.frontier.commit_ops)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print the N functions of most own time in the pop+complete phase (cProfile)")
    ap.add_argument("--log-mb", type=float, default=CFG.frontier.log_mb)
    ap.add_argument("--log-share", type=float, default=CFG.frontier.log_share)
    ap.add_argument("--log-max-mb", type=float, default=CFG.frontier.log_max_mb)
    ap.add_argument("--writemap", action=argparse.BooleanOptionalAction, default=CFG.frontier.writemap)
    ap.add_argument("--replay", action="store_true", help="time the replay of the biggest log at open")
    ap.add_argument("--save-crash", type=Path, default=None, metavar="PATH",
                    help="with --replay: copy the crashed frontier to PATH before the reopen")
    ap.add_argument("--reopen", type=Path, default=None, metavar="PATH",
                    help="time the open (the replay) of a copy of the frontier --save-crash left in PATH")
    ap.add_argument("--reopen-log-mb", type=float, default=None, metavar="MIB",
                    help="with --reopen: cut the copy's log after its last whole entry within MIB of "
                         "msgpack first")
    ap.add_argument("--reopen-compress", action="store_true",
                    help="with --reopen: rewrite the copy's log with its entries compressed first (wal.py "
                         "rule 12), as this release appends them")
    args = ap.parse_args()
    CFG = replace(CFG, frontier=replace(CFG.frontier, commit_ops=args.commit_ops, log_mb=args.log_mb,
                                        log_share=args.log_share, log_max_mb=args.log_max_mb,
                                        writemap=args.writemap))
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="polecat-bench-frontier-"))
    if args.reopen:
        reopen(args.reopen, workdir, args.reopen_log_mb, compress=args.reopen_compress)
        return
    if args.admit:
        admit_cost(workdir, args)
        return
    db, robots, frontier = open_frontier(workdir, args.urls, args.drop)
    rng = random.Random(1)
    print(f"workdir {workdir}; commit_ops {args.commit_ops}; log_mb {args.log_mb}; "
          f"log_share {args.log_share}; log_max_mb {args.log_max_mb}; writemap {args.writemap}; "
          f"dropped {args.drop}; "
          f"start: {memory()}")

    commits = Commits(db, frontier)
    t0, c0, w0 = time.perf_counter(), time.process_time(), written()
    for i in range(args.urls):
        host = rng.randrange(args.hosts)
        url = f"http://h{host}.bench.test/section/{i % 97}/page-{i}.html"
        db.applied(frontier.add(url, 1 + i % 7, 0.5, 0.0))
        if frontier.pending_ops >= CFG.frontier.commit_ops:
            commits.commit()
    commits.commit(last=True)
    push_s, push_cpu, push_w = time.perf_counter() - t0, time.process_time() - c0, written()
    print(
        f"push: {args.urls:,} URLs over {args.hosts:,} hosts in {push_s:.1f}s = "
        f"{args.urls / max(push_s, 1e-9):,.0f} URLs/s, {push_cpu / max(1, args.urls) * 1e6:.1f} us CPU/URL; "
        f"{memory()}; "
        f"queued {frontier.queued:,}; {per(push_w, w0, args.urls)}; {commits.report()}"
    )
    commits = Commits(db, frontier)

    # Robots answered for every host up front (allow-all), as after a warm-up.
    for h in range(args.hosts):
        robots.record_response(f"http://h{h}.bench.test", 404, b"", 0.0)
    now = 1.0
    done = 0
    profiler = cProfile.Profile() if args.profile else None
    t0, c0, w0 = time.perf_counter(), time.process_time(), written()
    if profiler is not None:
        profiler.enable()
    while done < args.pops:
        got = db.applied(frontier.lease(now))
        if isinstance(got, Idle) or (isinstance(got, Wait) and got.until is None):
            # nothing left to lease (fewer queued than --pops, or --drop queue): the figures are per lease
            print(f"the frontier ran dry after {done:,} of {args.pops:,} leases")
            break
        if not isinstance(got, Lease):
            now += 0.001
            continue
        db.apply(frontier.complete(got, Completion(Attempt(now, now, now, 200), "fetched", "200"), now))
        done += got.kind == "page"
        if frontier.pending_ops >= CFG.frontier.commit_ops:
            commits.commit()
    commits.commit(last=True)
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
    pop_s, pop_cpu, pop_w = time.perf_counter() - t0, time.process_time() - c0, written()
    pops = max(1, done)
    print(
        f"pop+complete: {done:,} leases in {pop_s:.1f}s = {done / max(pop_s, 1e-9):,.0f}/s, "
        f"{pop_cpu / pops * 1e6:.1f} us CPU/lease; "
        f"{memory()}; queued {frontier.queued:,}; {per(pop_w, w0, pops)}; {commits.report()}"
    )
    # Allocated blocks, not st_size: with writemap the data file is map_size long (sparse) and holds its
    # reservation ahead of the pages in use (db.py rule 11), given apart.
    size = sum(p.stat().st_blocks * 512 for p in (workdir / "frontier").rglob("*") if p.is_file())
    used = (db.env.info()["last_pgno"] + 1) * db.env.stat()["psize"]
    print(f"frontier on disk: {size / 1024**2:,.0f} MB allocated ({size / max(1, args.urls):.0f} B/URL); "
          f"LMDB pages up to the last in use {used / 1024**2:,.0f} MB")
    print(table_sizes(db, args.urls))
    if args.replay:
        crash_with_biggest_log(db, frontier, args.hosts, rng)
        if args.save_crash:
            copy_frontier(workdir / "frontier", args.save_crash)
        t0, c0 = time.perf_counter(), time.process_time()
        db = open_db(workdir, args.drop)
        print(f"reopen: {db.replayed:,} log entries replayed, FrontierDB open "
              f"{time.perf_counter() - t0:.2f} s, CPU {time.process_time() - c0:.2f} s; {memory()}")
    db.close()


def crash_with_biggest_log(db: FrontierDB, frontier: Frontier, hosts: int, rng: random.Random) -> None:
    """``--replay``: log appends of new URLs until the next commit would be an LMDB commit, then one batch
    applied and not committed, and the close a kill -9 amounts to (db.py rule 6: no LMDB commit with
    writes pending)."""
    last_entry, i = 0, 0
    while True:
        url = f"http://h{rng.randrange(hosts)}.bench.test/replay/page-{i}.html"
        db.applied(frontier.add(url, 1, 0.5, 0.0))
        i += 1
        if frontier.pending_ops < CFG.frontier.commit_ops:
            continue
        if db.wal.held + last_entry >= db.lmdb_commit_at:  # db.py rule 14: the msgpack (wal.py rule 12)
            break
        before = db.wal.held
        db.apply(frontier.prepare_commit())
        db.commit()
        last_entry = db.wal.held - before
    print(f"crash: log of {db.wal.held / 2**20:,.1f} MiB ({db.wal.size / 2**20:,.1f} MiB stored; {i:,} more "
          f"URLs; an LMDB commit at "
          f"{db.lmdb_commit_at / 2**20:,.1f} MiB), the last {frontier.pending_ops:,} changes uncommitted")
    db.close()


def copy_frontier(source: Path, target: Path) -> None:
    """The frontier directory ``source`` copied to ``target`` (its data file sparse, as with writemap)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True)


def cut_log(path: Path, most: int) -> None:
    """The log at ``path`` cut after its last whole entry within ``most`` bytes of msgpack, as db.py rule
    14 counts them (wal.py rule 1: a header of the payload's length, then the payload; rule 12: a
    compressed payload's header names its msgpack's size)."""
    end, held = 0, 0
    with path.open("rb") as fh:
        while len(header := fh.read(HEADER.size + FRAME_HEAD)) >= HEADER.size:
            length = HEADER.unpack_from(header)[0]
            held += _msgpack_size(header[HEADER.size:], length)  # as WriteLog.held counts them
            if held > most:
                break
            end += HEADER.size + length
            fh.seek(end)
    os.truncate(path, end)


def compress_log(path: Path) -> None:
    """The log at ``path`` rewritten with its entries compressed, as this release appends them (wal.py
    rule 12), for the replay of a crash an older release left."""
    new = path.with_name(path.name + ".new")
    with path.open("rb") as fh:
        wal = WriteLog(new)
        for seq, writes in entries_in(fh, path.stat().st_size, -1):
            entry = Entry()
            entry.add(list(writes))
            wal.append(seq, entry)
        wal.close()
    os.replace(new, path)


def reopen(saved: Path, workdir: Path, log_mib: float | None = None, *, compress: bool = False) -> None:
    """``--reopen``: the open of a copy of ``saved`` in ``workdir``, timed (the copy dropped after); its
    log first cut to ``log_mib`` of msgpack if given, and its entries compressed if ``compress``."""
    copy_frontier(saved, workdir / "frontier")
    if log_mib is not None:
        cut_log(workdir / "frontier" / LOG_NAME, int(log_mib * 2**20))
    if compress:
        compress_log(workdir / "frontier" / LOG_NAME)
    wal = WriteLog(workdir / "frontier" / LOG_NAME)
    log_mib, stored_mib = wal.bound() / 2**20, wal.path.stat().st_size / 2**20
    wal.close()
    os.sync()
    t0, c0 = time.perf_counter(), time.process_time()
    db = open_db(workdir, [])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"reopen: {db.replayed:,} log entries, {log_mib:,.1f} MiB replayed ({stored_mib:,.1f} MiB stored), "
          f"FrontierDB open {wall:.2f} s ({log_mib / wall:.1f} MiB/s), CPU {cpu:.2f} s; {memory()}")
    db.close()
    shutil.rmtree(workdir / "frontier")


if __name__ == "__main__":
    main()
