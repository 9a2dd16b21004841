"""Each periodic job of one node against the frontier's size (issue 39): refresh scan, freshness figures,
checkpoint round, status, stats (the ``/metrics`` frontier part), operator controls, hand-over of 64 slices,
one chunk of a hand-over as the node sends it (polecat/cluster/chunks.py: its export in steps,
polecat/frontier/handover.py rule 8, and its release in steps, rule 7: the longest step of each), the
adoption of a chunk, and admit / lease / complete, at a given number of finished URLs.

    python -m benchmarks.bench_periodic --urls 1000000 --per-host 10 --due 1000

Builds a frontier of ``--urls`` finished URLs (each with a refresh history, ``--per-host`` per host, so
hosts grow with URLs) and one queued URL per host, written straight into the tables as an earlier
release would have left them; opens it (the open builds the refresh indexes once: timed as "open"),
then times each job once (one synchronous call on the event loop: its time is the loop stall it causes)
and counts the rows it read where the job keeps such a count. ``--due`` URLs are due at the scan.
Times are CPU seconds of this process (``time.process_time``) and wall seconds; run it at two sizes to see
which costs grow with the frontier. ``--skip-before`` leaves out the two full passes that stand for the
jobs before they were made incremental (each minutes of CPU at 50M URLs).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import io
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from polecat.cluster.chunks import bundle_chunks
from polecat.cluster.ownership import Ownership
from polecat.config import Config, FrontierConfig, PolitenessConfig, ScopeConfig
from polecat.dedup.seen import SeenSet
from polecat.frontier.bundle import SliceBundle
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.handover import ADOPT_STEP, EXPORT_STEP, RELEASE_STEP, SliceRelease
from polecat.frontier.handover_ranges import CommittedSnapshot, export_step
from polecat.frontier.host_table import BAND_STEP, HOST_SEQ
from polecat.frontier.keys import host_row, queue_key, url_key
from polecat.frontier.politeness import Attempt, HostState
from polecat.frontier.records import Completion, Lease, QueuedUrl, UrlRecord, encode_host
from polecat.frontier.refresh import History, observe
from polecat.frontier.refresh_queue import SCAN_HOSTS, SCAN_ROWS, DueScan
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.slices import SLICES, slice_of
from polecat.writes import Put, Write

T = TypeVar("T")

CFG = Config(
    scope=ScopeConfig(mode="any", max_queue_per_host=10**9, max_pages_per_host=10**9),
    politeness=PolitenessConfig(rate=1000.0),
    frontier=FrontierConfig(map_size=256 * 1024**3),
)
OPEN_AT = 65_000.0
SCAN_AT = 70_000.0


def timed(label: str, call: Callable[[], T], note: str = "") -> T:
    """Run ``call`` once and print its CPU and wall time."""
    c0, t0 = time.process_time(), time.perf_counter()
    got = call()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(f"{label:34s} {cpu * 1e3:10.2f} ms CPU {wall * 1e3:10.2f} ms wall  {note}", flush=True)
    return got


def url_of(i: int, per_host: int) -> tuple[str, str]:
    host = f"h{i // per_host}.bench.test"
    return f"http://{host}/p{i % per_host}", host


def build(db: FrontierDB, urls: int, per_host: int, due: int) -> None:
    """Finished URLs with histories (``due`` of them due at :data:`SCAN_AT`), their seen entries, one
    queued URL and a record per host: written host by host in slice order, each batch sorted by key,
    committed in batches."""
    batch: list[Write] = []
    every = max(1, urls // max(1, due))

    def flush() -> None:
        db.apply(sorted(batch, key=lambda w: (w.table, w.key)))  # type: ignore[union-attr]
        db.commit()
        batch.clear()

    # Hosts in slice order, so that each batch lands in one stretch of each table's keys (they begin with
    # the slice): a build in host-number order touches every slice in every batch, and each LMDB commit
    # then copies pages all over the tree (hours of writes at 50M URLs).
    hosts = -(-urls // per_host)
    order = sorted(range(hosts), key=lambda h: slice_of(f"h{h}.bench.test"))
    for i in (h * per_host + k for h in order for k in range(per_host) if h * per_host + k < urls):
        url, host = url_of(i, per_host)
        last = 60_000.0 + i % 997
        if i % every == 0:  # changed at both visits 10 minutes apart: due again after the 1-hour floor
            hist, at = observe(observe(History(), last - 600.0, True), last, True), 62_000.0
        else:  # the same for 50,000 s: next due in about a day
            hist, at = observe(observe(History(), last - 50_000.0, False), last, False), 10_000_000.0 + i
        rec = UrlRecord(url, "fetched", "200", last, history=hist.encode().hex(), due=at,
                        importance=1.0 if i % per_host == 0 else 0.3)
        key = url_key(url, host)
        batch += [Put("urls", key, rec.encode()), Put("seen", key, b"")]
        if i % per_host == 0:
            queued = f"http://{host}/q"
            num = i // per_host + 1  # host_table.py rule 14: numbered as the table would
            st = HostState(queued=1, fetched=per_host, num=num)
            batch += [Put("hosts", host_row(host), encode_host(st)),
                      Put("queue", queue_key(host, num, 0.5, 1, i), QueuedUrl(queued, 1, 0.5).encode(host)),
                      Put("meta", HOST_SEQ, str(num).encode()),
                      Put("seen", url_key(queued, host), b"")]
        if len(batch) >= 400_000:
            flush()
    flush()


def reopen(workdir: Path, urls: int) -> tuple[FrontierDB, Frontier, RobotsPolicy]:
    """The frontier of a data dir this bench left (``--dir``, built with ``urls``), opened again and
    committed, with its robots policy (for benchmarks that go on from it)."""
    db = FrontierDB(workdir / "frontier", map_size=CFG.frontier.map_size, params={})
    seen = SeenSet.restore(db.seen_keys, db.count("seen"), workdir / "seen.bloom", db.seq, 2 * urls, 0.01)
    robots = RobotsPolicy(CFG.robots, CFG.fetch.user_agent)
    frontier = Frontier(db, CFG, robots, seen, OPEN_AT)
    frontier.commit()
    return db, frontier, robots


def status_in_child(frontier_dir: Path) -> str:
    """``polecat status``'s read of the data dir, in another process (LMDB opens an environment once per
    process), timed there."""
    code = ("import time,sys; from pathlib import Path; from polecat.frontier.status import read_status;"
            "c=time.process_time(); t=time.perf_counter();"
            "s=read_status(Path(sys.argv[1]), now=float(sys.argv[2]));"
            "print(f'{(time.process_time()-c)*1e3:.1f} ms CPU {(time.perf_counter()-t)*1e3:.1f} ms wall, "
            "hosts {s.hosts:,}, tracked {s.freshness.tracked:,}')")
    return subprocess.run([sys.executable, "-c", code, str(frontier_dir), str(SCAN_AT + 10.0)],
                          capture_output=True, text=True, check=True).stdout.strip()


def per_op(label: str, n: int, step: Callable[[int], Any]) -> None:
    """``n`` calls of ``step``: CPU µs per call and the longest call (wall)."""
    longest = 0.0
    c0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        step(i)
        longest = max(longest, time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / n
    print(f"{label:34s} {cpu * 1e6:10.1f} us CPU/op, longest call {longest * 1e3:.2f} ms wall ({n:,} calls)",
          flush=True)


class Steps:
    """Calls on the loop made one after another (a node gives the loop a turn between two): each timed,
    CPU and wall, the longest of each kept, and whether the longest by CPU had a full collection of the
    garbage collector in it (the interpreter's, whatever the step does): then the longest by CPU of the
    steps without one too."""

    def __init__(self) -> None:
        self.count = 0
        self.cpu = self.wall = self.longest_cpu = self.longest_wall = self.longest_clean = 0.0
        self.longest_collected = False

    def run(self, step: Callable[[], T]) -> T:
        full = gc.get_stats()[2]["collections"]
        c0, t0 = time.process_time(), time.perf_counter()
        got = step()
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        self.count += 1
        self.cpu += cpu
        self.wall += wall
        collected = gc.get_stats()[2]["collections"] > full
        if cpu > self.longest_cpu:
            self.longest_cpu, self.longest_collected = cpu, collected
        if not collected:
            self.longest_clean = max(self.longest_clean, cpu)
        self.longest_wall = max(self.longest_wall, wall)
        return got

    def until(self, step: Callable[[], T | None]) -> T:
        """:meth:`run` ``step`` until it answers something."""
        while (got := self.run(step)) is None:
            pass
        return got

    def report(self, label: str, note: str) -> None:
        collected = (f" (a full collection in it; {self.longest_clean * 1e3:.2f} ms without one)"
                     if self.longest_collected else "")
        print(f"{label:34s} {self.cpu * 1e3:10.2f} ms CPU {self.wall * 1e3:10.2f} ms wall  {self.count} "
              f"steps {note}, longest {self.longest_cpu * 1e3:.2f} ms CPU{collected} / "
              f"{self.longest_wall * 1e3:.2f} ms wall", flush=True)


class SteppedExporter:
    """A chunk's export as the node makes it (polecat/node/member.py ``export``; polecat/frontier/handover.py
    rule 8): an LMDB commit (off the loop in the node: not timed), a snapshot (timed as a step) and the
    steps of at most ``EXPORT_STEP`` rows (each a call on the loop), then the bundle's bytes (off the loop
    in the node: timed apart)."""

    def __init__(self, frontier: Frontier, db: FrontierDB) -> None:
        self._frontier = frontier
        self._db = db
        self.exports = 0
        self.steps = Steps()
        self.to_bytes = 0.0

    async def __call__(self, slices: frozenset[int]) -> bytes:
        self._db.apply(self._frontier.prepare_commit())
        self._db.commit(to_lmdb=True)
        snapshot = self.steps.run(self._frontier.snapshot)
        export = self._frontier.begin_export(snapshot, slices, SCAN_AT)
        bundle = self.steps.until(export.step)
        snapshot.close()
        t0 = time.perf_counter()
        body = bundle.to_bytes()
        self.to_bytes += time.perf_counter() - t0
        self.exports += 1
        return body


def begin_release(frontier: Frontier, db: FrontierDB, chunk: frozenset[int]) -> SliceRelease:
    """The frontier's :meth:`~polecat.frontier.frontier.Frontier.begin_release` of ``chunk``, applied."""
    return db.applied(frontier.begin_release(chunk))


def release_step(db: FrontierDB, release: SliceRelease) -> bool | None:
    """One step of ``release``, applied: True once done, else None."""
    return db.applied(release.step()) or None


async def chunk_handover(frontier: Frontier, db: FrontierDB) -> list[bytes]:
    """The first two chunks of a hand-over as the node sends them (polecat/cluster/chunks.py: the first
    is one slice, the second as many as its bytes say fit): each one's export, in steps (a chunk over the
    bound is exported again in halves), and its release in steps. Returns the chunks' bytes."""
    chunks = bundle_chunks(exporter := SteppedExporter(frontier, db), range(64, SLICES))
    bodies = []
    for which in ("first", "second"):
        label = f"hand-over, {which} chunk"
        exporter.steps, exporter.exports, exporter.to_bytes = Steps(), 0, 0.0
        chunk, body = await anext(chunks)
        bodies.append(body)
        urls = sum(1 for t, _, _ in SliceBundle.read(io.BytesIO(body)).records() if t == "urls")
        exporter.steps.report(f"{label}: export", f"(the snapshot, then at most {EXPORT_STEP:,} rows; "
                              f"{exporter.exports} exports; to_bytes {exporter.to_bytes * 1e3:.2f} ms wall, "
                              f"a thread in the node; {len(chunk)} slices, {urls:,} URLs, {len(body):,} B)")
        release = timed(f"{label}: release begins", functools.partial(begin_release, frontier, db, chunk))
        steps = Steps()
        steps.until(functools.partial(release_step, db, release))
        steps.report(f"{label}: release", f"of at most {RELEASE_STEP:,} rows")
        frontier.commit()
    await chunks.aclose()
    return bodies


def adopt_chunk(frontier: Frontier, db: FrontierDB, body: bytes) -> None:
    """The receiving side of a chunk (``body``, released here just before, so adopted as by a new owner
    whose seen-set's Bloom filter may still answer "maybe" for its URLs): its read and verification (off
    the loop in the node, polecat/processes/machine.py) and its adoption in steps (handover rule 9)."""
    bundle = timed("adoption of a chunk: read (thread)", lambda: SliceBundle.read(io.BytesIO(body)),
                   f"{len(body):,} B")
    adoption = frontier.begin_adopt(bundle, SCAN_AT)
    steps = Steps()
    report = steps.until(lambda: db.applied(adoption.step()))
    adoption.close()
    steps.report("adoption of a chunk: adopt", f"of at most {ADOPT_STEP:,} records")
    print(f"{'':34s} {report}", flush=True)
    frontier.commit()


def round_groups(snapshot: CommittedSnapshot, groups: list[int]) -> None:
    """The exports of a checkpoint round's written ``groups`` as the round makes them, every slice of
    each (polecat/cluster/failover.py rule 1: a group is one object): each group in one call (before)
    and in steps of at most ``EXPORT_STEP`` rows (after; its bytes in a thread, not timed here)."""
    one_call = Steps()
    for g in groups:
        one_call.run(functools.partial(snapshot.export, group_slices(g), SCAN_AT))
    one_call.report("checkpoint round: one call a group", "(before: a written group's export, each slice)")
    steps = Steps()
    for g in groups:
        export = snapshot.export_steps(group_slices(g), SCAN_AT, budget=EXPORT_STEP)
        steps.until(functools.partial(export_step, export))
    steps.report("checkpoint round: in steps", f"of at most {EXPORT_STEP:,} rows ({len(groups)} groups)")


def group_slices(group: int) -> frozenset[int]:
    return frozenset(range(group * 64, group * 64 + 64))


def restore_objects(frontier: Frontier, db: FrontierDB) -> None:
    """A restore of two checkpoint objects (a group of 64 slices each, exported and released here first,
    so adopted as by an heir whose Bloom filter may still answer "maybe" for their URLs), each read from
    its bytes (a thread in the node) and adopted with the restore's hold (polecat/cluster/failover.py
    rule 6): one in one call (before), the other in steps of at most ``ADOPT_STEP`` records (after)."""
    bodies = []
    for g in (10, 11):
        bodies.append(frontier.export_slices(group_slices(g), SCAN_AT).to_bytes())
        db.apply(frontier.release_slices(group_slices(g)))
        frontier.commit()
    hold = Ownership.restore_hold(SCAN_AT)
    one, stepped = (SliceBundle.read(io.BytesIO(body)) for body in bodies)
    urls = sum(1 for t, _, _ in one.records() if t == "urls")
    report = timed("restore of an object: one call", lambda: db.applied(frontier.adopt(one, SCAN_AT,
                                                                                       wait_from=hold)),
                   f"(before; 64 slices, {urls:,} URLs, {len(bodies[0]):,} B)")
    print(f"{'':34s} {report}", flush=True)
    frontier.commit()
    urls = sum(1 for t, _, _ in stepped.records() if t == "urls")
    adoption = frontier.begin_adopt(stepped, SCAN_AT, wait_from=hold)
    steps = Steps()
    report = steps.until(lambda: db.applied(adoption.step()))
    adoption.close()
    steps.report("restore of an object: in steps", f"of at most {ADOPT_STEP:,} records (64 slices, {urls:,} "
                 f"URLs, {len(bodies[1]):,} B)")
    print(f"{'':34s} {report}", flush=True)
    frontier.commit()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=1_000_000)
    ap.add_argument("--per-host", type=int, default=10)
    ap.add_argument("--due", type=int, default=1_000)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--skip-before", action="store_true",
                    help="skip the two passes over everything the jobs made before (minutes at 50M URLs)")
    args = ap.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="polecat-bench-periodic-"))
    db = FrontierDB(workdir / "frontier", map_size=CFG.frontier.map_size, params={})
    hosts = args.urls // args.per_host
    timed("build (bulk write, not a job)", lambda: build(db, args.urls, args.per_host, args.due),
          f"{args.urls:,} finished URLs over {hosts:,} hosts")
    seen = timed("seen-set restore", lambda: SeenSet.restore(db.seen_keys, db.count("seen"),
                                                             workdir / "seen.bloom", db.seq, 2 * args.urls,
                                                             0.01))
    robots = RobotsPolicy(CFG.robots, CFG.fetch.user_agent)
    frontier = timed("open (builds the indexes once)", lambda: Frontier(db, CFG, robots, seen, OPEN_AT))
    timed("commit", frontier.commit)
    index = frontier._refresh.index

    # In steps, as the node's lease loop makes it (polecat/frontier/refresh_queue.py rule 1).
    index.reads = 0
    due, scan_steps = DueScan(SCAN_AT, 60.0), Steps()
    fresh = scan_steps.until(lambda: db.applied(frontier.scan_step(due, SCAN_AT)))
    scan_steps.report("refresh scan (in steps)", f"of at most {SCAN_ROWS:,} rows and {SCAN_HOSTS} hosts")
    print(f"{'':34s} queued {due.queued:,}, rows read {index.reads:,}; tracked {fresh.tracked:,}")
    index.reads = 0
    timed("freshness", lambda: frontier.freshness(SCAN_AT + 1.0), "")
    print(f"{'':34s} rows read {index.reads:,}")
    if not args.skip_before:
        index.reads = 0
        timed("  (before: a pass over every URL)", lambda: index.recount(SCAN_AT + 1.0))
        print(f"{'':34s} rows read {index.reads:,} (the refresh scan before made the same pass and more)")
    frontier.commit()
    frontier.take_written()  # a round ships what the open and the scan wrote (tables.py rule 6)

    # The next checkpoint round, after URLs added to hosts of 4 groups of slices.
    touched: dict[int, str] = {}
    for h in range(hosts):
        touched.setdefault(slice_of(f"h{h}.bench.test") // 64, f"h{h}.bench.test")
        if len(touched) == 4:
            break
    for host in touched.values():
        db.applied(frontier.add(f"http://{host}/new", 1, 0.5, SCAN_AT))
    frontier.commit()
    written = frontier.take_written()
    snapshot = frontier.snapshot()
    groups = sorted({s // 64 for s in written})
    timed("checkpoint round: written groups",
          lambda: [snapshot.export(frozenset(s for s in written if s // 64 == g), SCAN_AT) for g in groups],
          f"{len(groups)} groups of {len(written)} written slices exported")
    if not args.skip_before:
        timed("  (before: every group exported)",
              lambda: [snapshot.export(frozenset(range(g * 64, g * 64 + 64)), SCAN_AT) for g in range(64)],
              "64 groups")
    round_groups(snapshot, groups)
    snapshot.close()

    timed("stats (/metrics frontier part)", lambda: (frontier.stats(SCAN_AT), frontier.quarantined_hosts(),
                                                     frontier.busiest(10)))
    bands = Steps()  # the data dir is written by the bulk path, so its count is made in steps (rule 24)
    bands.until(frontier.queue_bands)
    bands.report("queue bands (first count)", f"of at most {BAND_STEP:,} keys (one a scrape)")
    timed("queue bands (kept)", frontier.queue_bands)
    timed("block one host (controls)", lambda: db.applied(frontier.block("h1.bench.test")))
    timed("throttle one pattern (controls)", lambda: db.apply(frontier.throttle_now("h2.bench.test", 0.5,
                                                                                      SCAN_AT)))
    moving = frozenset(range(64))
    bundle = timed("hand-over of 64 slices: export", lambda: frontier.export_slices(moving, SCAN_AT))
    print(f"{'':34s} {sum(1 for t, _, _ in bundle.records() if t == 'urls'):,} URL records in them")
    timed("hand-over of 64 slices: release", lambda: db.apply(frontier.release_slices(moving)))
    frontier.commit()
    adopt_chunk(frontier, db, asyncio.run(chunk_handover(frontier, db))[-1])
    restore_objects(frontier, db)

    new_hosts = [f"h{h}.bench.test" for h in range(hosts - 2_000, hosts)]
    for host in new_hosts:
        robots.record_response(f"http://{host}", 404, b"", 0.0)
    per_op("admit (10 links a page)", 2_000,
           lambda i: db.applied(frontier.add_many([f"http://{new_hosts[i]}/a/{k}" for k in range(10)], 1, 0.5,
                                                  SCAN_AT)))
    frontier.commit()
    now = [SCAN_AT + 1.0]
    leases: list[Lease] = []

    def lease(_: int) -> None:
        got = db.applied(frontier.lease(now[0]))
        if isinstance(got, Lease):
            leases.append(got)
        else:
            now[0] += 0.01

    per_op("lease", 5_000, lease)

    def complete(i: int) -> None:
        if i < len(leases):
            at = now[0]
            db.apply(frontier.complete(leases[i], Completion(Attempt(at, at, at, 200), "fetched", "200"), at))

    per_op("complete", len(leases), complete)
    frontier.commit()
    print(f"{'':34s} {len(leases):,} leases")
    print("status (another process)".ljust(34), status_in_child(workdir / "frontier"), flush=True)
    size = sum(p.stat().st_size for p in (workdir / "frontier").iterdir())
    print(json.dumps({"urls": args.urls, "hosts": hosts, "lmdb_mb": round(size / 1024**2)}))
    db.close()


if __name__ == "__main__":
    main()
