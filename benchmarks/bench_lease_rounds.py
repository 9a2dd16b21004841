"""Lease and complete on the data dir that ``bench_periodic --dir DIR`` left, in rounds, right after the
open: each round's CPU per operation with the page faults it took, so that the cost of a frontier's size
(deeper B-trees) is told apart from the first touch of a big LMDB's pages by a process that just opened it.

    python -m benchmarks.bench_periodic --urls 50000000 --per-host 50 --due 1000 --skip-before --dir DIR
    python -m benchmarks.bench_lease_rounds DIR --urls 50000000

2,000 hosts of the dir (robots.txt answered) are given 10 new URLs each, then each round leases 4,000
URLs and completes them (one commit a round, as bench_periodic's ``lease``/``complete`` figures do).

``--evict`` drops the dir's files from the page cache first (``posix_fadvise(DONTNEED)`` on each: a
cold open without ``drop_caches``, whose pages are the machine's, other processes' too). ``--faults``
counts the major page faults of each :class:`~polecat.frontier.db.FrontierDB` read (``get``, a row of
``items``) and write batch (``apply``) by table, over the whole run (the open included): where a cold
open's first operations wait for the disk.

The queue heads of the hosts due next are read ahead on a thread of their own, as the node does
(polecat/node/leases.py rule 8: a step of :class:`~polecat.frontier.read_ahead.HeadsAhead` before each lease
call); ``--no-heads`` leases without (and runs on a tree from before the read-ahead: the before figures).
Each round prints wall and CPU per call of the loop's thread (``time.thread_time``: the reader's CPU is
its own), the loop thread's major faults and the heads the reader read, with its faults.

``--refills`` adds, each round, the loop thread's CPU in the refills of memory from the ``ready`` index
(polecat/frontier/host_table.py rule 7) and the hosts they took in: what a lease of a host out of memory
pays besides the lease itself (a dir with more hosts than ``frontier.working_hosts``; none where every
host is in memory)."""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_periodic import SCAN_AT, reopen
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.host_table import HostTable
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease
from polecat.writes import Write

ROUND = 4_000
"""Leases a round."""


def evict(directory: Path) -> int:
    """Drop every file under ``directory`` from the page cache; returns the files. Each is synced first:
    ``DONTNEED`` drops clean pages only, and the last run's commits (the benches open without writemap, so
    LMDB writes its pages with ``pwrite``) may still be dirty in the cache, the kernel's writeback waiting
    30 s: back-to-back runs of d1 found its queue in memory."""
    files = [p for p in directory.rglob("*") if p.is_file()]
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return len(files)


def _majflt() -> int:
    """The calling thread's major faults: the loop's, not the head reader's."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_majflt


def heads_ahead(db: FrontierDB, frontier: Frontier) -> Any:
    """The read-ahead as the node runs it (polecat/node/crawler.py), started."""
    # Imported here: with --no-heads the bench runs on a tree from before the read-ahead.
    from polecat.frontier.head_reader import ThreadHeadReader
    from polecat.frontier.read_ahead import HeadsAhead

    heads = HeadsAhead(frontier.read_ahead, ThreadHeadReader(db.env, db.queue, db.hosts))
    heads.start()
    return heads


def count_faults() -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """Wrap FrontierDB's reads and writes to count major faults (and calls) by (call, table)."""
    faults: Counter[tuple[str, str]] = Counter()
    calls: Counter[tuple[str, str]] = Counter()
    get, items, apply = FrontierDB.get, FrontierDB.items, FrontierDB.apply

    def counted_get(self: FrontierDB, table: str, key: bytes) -> bytes | None:
        before = _majflt()
        out = get(self, table, key)  # type: ignore[arg-type]
        faults["get", table] += _majflt() - before
        calls["get", table] += 1
        return out

    def counted_items(self: FrontierDB, table: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        rows = items(self, table, prefix)  # type: ignore[arg-type]
        while True:
            before = _majflt()
            row = next(rows, None)
            faults["items", table] += _majflt() - before
            if row is None:
                return
            calls["items", table] += 1
            yield row

    def counted_apply(self: FrontierDB, writes: Sequence[Write]) -> None:
        before = _majflt()
        apply(self, writes)
        tables = "+".join(sorted({getattr(w, "table", type(w).__name__) for w in writes})) or "-"
        faults["apply", tables] += _majflt() - before
        calls["apply", tables] += 1

    FrontierDB.get = counted_get  # type: ignore[method-assign]
    FrontierDB.items = counted_items  # type: ignore[method-assign]
    FrontierDB.apply = counted_apply  # type: ignore[method-assign]
    return faults, calls


@dataclass
class Refills:
    """What the refills (host_table.py rule 7) cost the loop thread since the last :meth:`take`."""

    cpu: float = 0.0
    calls: int = 0
    hosts: int = 0

    def take(self) -> tuple[float, int, int]:
        """CPU seconds, calls and hosts taken in so far, then counted afresh."""
        got = self.cpu, self.calls, self.hosts
        self.cpu, self.calls, self.hosts = 0.0, 0, 0
        return got


def count_refills() -> Refills:
    """Wrap HostTable.refill to add up its thread CPU and the hosts it takes into memory."""
    spent = Refills()
    refill = HostTable.refill

    def counted_refill(self: HostTable, now: float, out: list[Write]) -> None:
        before, cpu = len(self.hosts), time.thread_time()
        refill(self, now, out)
        spent.cpu += time.thread_time() - cpu
        spent.calls += 1
        spent.hosts += len(self.hosts) - before

    HostTable.refill = counted_refill  # type: ignore[method-assign]
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path, help="a data dir bench_periodic --dir left")
    ap.add_argument("--urls", type=int, required=True, help="the --urls it was built with")
    ap.add_argument("--per-host", type=int, default=50, help="the --per-host it was built with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--evict", action="store_true", help="drop the dir's files from the page cache first")
    ap.add_argument("--faults", action="store_true", help="major faults by FrontierDB call and table")
    ap.add_argument("--no-heads", action="store_true", help="no queue heads read ahead (leases.py rule 8)")
    ap.add_argument("--refills", action="store_true", help="loop CPU in refills from `ready`, hosts taken in")
    args = ap.parse_args()
    if args.evict:
        print(f"evicted {evict(args.dir):,} files from the page cache", flush=True)
    counted = count_faults() if args.faults else None
    refills = count_refills() if args.refills else None
    hosts = args.urls // args.per_host
    db, frontier, robots = reopen(args.dir, args.urls)
    # Hosts bench_periodic's own admits and leases did not touch (it takes the last 2,000).
    given = [f"h{h}.bench.test" for h in range(hosts - 6_000, hosts - 4_000)]
    for host in given:
        robots.record_response(f"http://{host}", 404, b"", 0.0)
    stamp = time.time_ns()  # new paths on every run of the same dir
    for host in given:
        db.applied(frontier.add_many([f"http://{host}/r{stamp}/{k}" for k in range(10)], 1, 0.5, SCAN_AT))
    frontier.commit()
    now = SCAN_AT + 1.0
    heads = None if args.no_heads else heads_ahead(db, frontier)
    read: tuple[int, int] = (0, 0)
    round_from: Counter[tuple[str, str]] = counted[0].copy() if counted is not None else Counter()
    for r in range(1, args.rounds + 1):
        leases: list[Lease] = []
        before = resource.getrusage(resource.RUSAGE_THREAD)
        c0, t0 = time.thread_time(), time.perf_counter()
        calls = 0
        longest = 0.0
        while len(leases) < ROUND and calls < 5 * ROUND:
            calls += 1
            if heads is not None:
                heads.step(now)  # as the node's lease loop: leases.py rule 8
            call_from = time.thread_time()
            got = db.applied(frontier.lease(now))
            longest = max(longest, time.thread_time() - call_from)
            if isinstance(got, Lease):
                leases.append(got)
            else:
                now += 0.01
        c1, t1 = time.thread_time(), time.perf_counter()
        for lease in leases:
            db.apply(frontier.complete(lease, Completion(Attempt(now, now, now, 200), "fetched", "200"), now))
        c2, t2 = time.thread_time(), time.perf_counter()
        after = resource.getrusage(resource.RUSAGE_THREAD)
        frontier.commit()
        done = len(leases) or 1
        reader = ""
        if heads is not None:
            now_read = heads.reader.counts()
            reader = (f"; heads read ahead {now_read[0] - read[0]:,} ({now_read[1] - read[1]:,} major faults)"
                      f"{'' if heads.running else ', stopped'}")
            read = now_read
        print(f"round {r}: {len(leases):,} leases in {calls:,} calls, lease {(t1 - t0) / calls * 1e6:.1f} us "
              f"wall {(c1 - c0) / calls * 1e6:.1f} us CPU a call (longest {longest * 1e3:.1f} ms CPU), "
              f"complete {(t2 - t1) / done * 1e6:.1f} us "
              f"wall {(c2 - c1) / done * 1e6:.1f} us CPU; loop thread's page faults "
              f"{after.ru_majflt - before.ru_majflt:,} major, {after.ru_minflt - before.ru_minflt:,} minor"
              f"{reader}", flush=True)
        if counted is not None:
            now_faults = counted[0].copy()
            top = (now_faults - round_from).most_common(4)
            where = ", ".join(f"{call} {table} {n:,}" for (call, table), n in top)
            print(f"  loop thread's major faults in the round by call: {where or 'none'}", flush=True)
            round_from = now_faults
        if refills is not None:
            cpu, refilled, taken = refills.take()
            print(f"  refills: {refilled:,} calls took {taken:,} hosts into memory, {cpu * 1e3:.1f} ms loop "
                  f"CPU ({cpu / (taken or 1) * 1e6:.1f} us a host) of the round's {(c1 - c0) * 1e3:.1f} ms "
                  f"of lease calls", flush=True)
    if heads is not None:
        heads.stop()
        print(f"leaves handed to the kernel's readahead (head_reader.py rule 5): "
              f"{getattr(heads.reader, 'prefetched', None)}", flush=True)
    if counted is not None:
        faults, made = counted
        for (call, table), n in faults.most_common():
            if n:
                print(f"major faults in {call} {table}: {n:,} in {made[call, table]:,} calls")


if __name__ == "__main__":
    main()
