"""A breadth crawl of many hosts on one node (issue 39): robots.txt and a few pages of each of N hosts.

    python -m benchmarks.bench_scale --hosts 100000 --max-pages 20000
    python -m benchmarks.bench_scale --seeds-only 1000000   # time to first request with a 1M-line file

The web is :class:`polecat.testing.breadth.BreadthWeb`: host ``h<i>.breadth.test`` resolves through a
local DNS server to one of 16 loopback addresses, where one raw-asyncio server (a thread of this process)
answers every host: robots.txt allowing all, ``/`` linking five leaves. A seeds file of the N roots is
crawled by ``python -m polecat crawl`` (a child process) with ``--max-pages``. Figures:

- time to first request: from the child's start to the first request the server saw;
- requests/s over time: the server's count, sampled every ``--every`` seconds;
- CPU ms per request: the child's user+system time (wait4) over the requests the server saw;
- peak anonymous memory (RssAnon, sampled) and the child's peak RSS (ru_maxrss);
- open file descriptors over time (``/proc/PID/fd``, sampled);
- DNS queries per host seen, by type (the DNS server's counts);
- how late the node's event loop ran (p99 and max over the run: ``polecat crawl`` samples a 50 ms timer
  and puts them in its summary);
- politeness violations at the server: requests to a host sooner than ``1 / rate - 10 ms`` after the
  previous one (10 ms of arrival jitter allowed; the crawler's own bound is the full interval);
- with ``--tls``, the TLS connections open at the server at each sample; with ``--mixed`` (``--tls``
  with every other host plain HTTP, BreadthWeb's ``mixed``), the requests to the plain-HTTP hosts at each
  sample too, and their hosts complete at the end; ``--tls-open N`` lowers the crawl's cap of TLS
  connections (polecat/fetch/pool.py rule 12) so that a crawl this machine can drive reaches it;
- with ``--stall-profile PATH``: the crawl runs on asyncio's own loop with every step timed by the loop
  thread's CPU (benchmarks/stall_profile.py): the steps of 20 ms or more by task or callback, where
  their stacks were, the longest loop iterations and garbage collections;
- with ``--commit-probe``: the frontier's LMDB commits (benchmarks/commit_probe: how long the loop's
  frontier calls waited for each, the leases made meanwhile) and, from the server's count sampled every
  :data:`FINE` seconds, the requests it saw during each commit against the :data:`BEFORE` seconds before
  it, and the longest stretch in which it saw none;
- with ``--resume``, after the run: how long ``polecat status DIR`` takes on its data dir, and how soon
  the same crawl started again on it sends its first request (then it is stopped with SIGTERM); with
  ``--kill-9`` too, the run ends by SIGKILL, not at ``--max-pages``: when its write-ahead log (sampled
  every 0.2 s) holds at least :data:`KILL_FILL` of the most it held before an LMDB commit emptied it, so
  that the resume replays about the longest log the crawl leaves (polecat/frontier/db.py rule 7).

``--frontier-seeds N`` admits N host roots into a frontier in this process, without a crawl or a node:
the CPU seeds/s of the admission itself and the anonymous memory with N hosts queued; then the time of
``polecat status DIR`` on it (from the host counters, and with ``--busiest``: every host record).

``--seeds-only N`` writes N seed lines (the first of the one host that answers, the rest of hosts that do
not resolve) and reports how soon the first request reaches the server, and the seeds admitted per second
(hosts in ``polecat status`` after a SIGTERM ``--seconds`` after the start, over that time); the peak
anonymous memory with them queued, the frontier's LMDB size per queued URL, and the bytes the child wrote
to disk (``ru_oublock``) per URL admitted. ``--data DIR`` puts the crawl's data dir at DIR (a filesystem of
its own) and ``--device NAME`` reports the sectors written to that device (/sys/block/NAME/stat, from the
child's start to a ``sync`` after its exit) per URL admitted: the bytes that reached the disk, the
journal's included, and nobody else's. ``--frontier KEY=VALUE`` sets the crawl's ``[frontier]`` KEY; with
benchmarks/io_probe first on PYTHONPATH the crawl splits its writes by cause.

``--silent-dns K``: every K-th host's name is never answered (BreadthWeb's ``silent``): what lookups that
time out cost a breadth crawl (polecat/fetch/dns.py rule 11).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.stall_profile import report
from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.seen import SeenSet
from polecat.fetch.descriptors import raise_nofile_limit
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.wal import LOG_NAME
from polecat.node.seed_feed import BATCH
from polecat.testing.breadth import BreadthWeb, polecat_command

ROOT = Path(__file__).resolve().parent.parent
JITTER = 0.010
FINE = 0.05
"""Seconds between two looks at the server's request count for ``--commit-probe``."""
BEFORE = 5.0
"""Seconds before each LMDB commit whose request rate ``--commit-probe`` compares with the commit's."""


def _env() -> dict[str, str]:
    """The environment of the crawl's processes: this tree first on their path, then the caller's path
    (benchmarks/cpu_sampler samples them when it is there)."""
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _sectors_written(device: str | None) -> int:
    """Sectors written to ``device`` (field 7 of /sys/block/DEVICE/stat) so far; 0 without one. A device
    of the data dir's own (a loop device, ``--data`` on its filesystem) counts what reaches the disk from
    the crawl alone: the journal and metadata included, no other process's writes, and each page once
    however often it was dirtied (``ru_oublock`` counts a large folio per page dirtied with ``writemap``)."""
    if not device:
        return 0
    return int(Path(f"/sys/block/{device}/stat").read_text().split()[6])


def _crawl_cmd(seeds: Path, data: Path, dns: str, args: argparse.Namespace, max_pages: int, *,
               stall_profile: str | None = None) -> list[str]:
    flags = ["crawl", "--seeds-file", str(seeds), "--data", str(data), "--allow-private", "--dns-server", dns,
             "--rate", str(args.rate), "--max-pages", str(max_pages),
             "--user-agent", "polecat-bench (+http://127.0.0.1/)"]
    if args.concurrency:
        flags += ["--concurrency", str(args.concurrency)]
    sections = []
    frontier = []
    if args.working_hosts != FrontierConfig().working_hosts:
        frontier.append(f"working_hosts = {args.working_hosts}\n")
    frontier += [f"{setting}\n" for setting in args.frontier]
    if frontier:
        sections.append("[frontier]\n" + "".join(frontier))
    if args.tls:
        sections.append(f"[fetch]\nca_bundle = \"{data.parent / 'ca.pem'}\"\n")
    if sections:
        config = data.parent / "polecat.toml"
        config.write_text("".join(sections))
        flags += ["--config", str(config)]
    if stall_profile:  # on asyncio's own loop, its steps timed (benchmarks/stall_profile.py)
        return [sys.executable, "-m", "benchmarks.stall_profile", stall_profile, str(args.nofile), *flags]
    return polecat_command(*flags, nofile=args.nofile, tls_open=args.tls_open)


def _server_tls(work: Path) -> ssl.SSLContext:
    """``--tls``: a local CA (its certificate in ``work/ca.pem``, given to the crawl as ``fetch.ca_bundle``)
    and the server's context with a certificate for ``*.breadth.test`` it issued."""
    import trustme  # a test dependency: only this option needs it

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("*.breadth.test").configure_cert(context)
    return context


def breadth(args: argparse.Namespace, work: Path) -> None:
    built = time.monotonic()
    tls = _server_tls(work) if args.tls else None
    with BreadthWeb(args.hosts, min_interval=1 / args.rate - JITTER, tls=tls, mixed=args.mixed,
                    silent=args.silent_dns) as web:
        print(f"web of {args.hosts} hosts ready in {time.monotonic() - built:.1f} s", flush=True)
        seeds = work / "seeds.txt"
        seeds.write_text("".join(f"{url}\n" for url in web.seeds()))
        data = args.data or work / "data"
        env = _env()
        probe = work / "commits.json"
        if args.commit_probe:
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "benchmarks" / "commit_probe"),
                                                 env["PYTHONPATH"]])
            env["COMMIT_PROBE_OUT"] = str(probe)
        counts: list[tuple[float, int]] = []
        sampling = threading.Event()
        sampler = threading.Thread(target=_sample_requests, args=(web, counts, sampling), daemon=True)
        if args.commit_probe:
            sampler.start()
        started = time.monotonic()
        out_path, err_path = work / "stdout.txt", work / "stderr.txt"
        with out_path.open("wb") as out, err_path.open("wb") as err:  # files: a pipe unread would fill
            cmd = _crawl_cmd(seeds, data, web.dns.address, args, args.max_pages,
                             stall_profile=args.stall_profile)
            child = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        peak_anon = 0
        samples: list[tuple[float, int, int, int, int, int]] = []
        next_sample = started
        killer = _LogKiller(data, started + args.kill_9) if args.kill_9 is not None else None
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)  # not poll(): it reaps without rusage
            if pid:
                break
            if killer is not None and killer.due():
                child.kill()
            now = time.monotonic()
            anon = _status_kb(child.pid, "RssAnon")
            peak_anon = max(peak_anon, anon)
            if now >= next_sample:
                at = web.stats()
                samples.append((now - started, at.requests, _fds(child.pid), anon, at.plain_requests,
                                at.tls_open))
                next_sample += args.every
            time.sleep(0.2)
        child.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.monotonic() - started
        sampling.set()
        stats = web.stats()
        queries = sum(web.dns.queries.values())
        types = dict(web.dns.query_types)
        if args.keep_killed:  # the LMDB file is sparse up to its map size: copied so (shutil fills it)
            subprocess.run(["cp", "-a", "--sparse=always", str(data), str(args.keep_killed)], check=True)
        resumed = _resume(web, seeds, work, args, env) if args.resume else []
        if killer is not None:
            resumed.insert(0, killer.report())
    code = child.returncode
    cpu = usage.ru_utime + usage.ru_stime
    first = (stats.first_request - started) if stats.first_request is not None else float("nan")
    print(f"exit {code}; {elapsed:.1f} s; requests {stats.requests} to {stats.hosts_seen} hosts "
          f"({stats.complete_hosts} complete)")
    print(f"time to first request {first:.2f} s; requests/s overall {stats.requests / elapsed:.0f}")
    print(f"CPU {cpu:.1f} s ({usage.ru_utime:.1f} user, {usage.ru_stime:.1f} sys): "
          f"{1000 * cpu / max(stats.requests, 1):.2f} ms per request")
    print(f"peak RssAnon {peak_anon / 1024:.0f} MiB; peak RSS (ru_maxrss) {usage.ru_maxrss / 1024:.0f} MiB")
    print(f"DNS queries {queries} ({types}): {queries / max(stats.hosts_seen, 1):.2f} per host seen")
    print(f"politeness violations at the server {stats.violations}; most connections open at the server "
          f"{stats.most_connections}")
    if args.tls:
        print(f"TLS handshakes at the server {stats.tls_handshakes}, {stats.tls_resumed} resumed "
              f"({stats.tls_resumed / max(stats.tls_handshakes, 1):.1%}); most TLS connections open at the "
              f"server {stats.most_tls_open}")
    if args.mixed:
        print(f"plain-HTTP hosts: requests {stats.plain_requests}, hosts complete "
              f"{stats.plain_complete_hosts} (https: {stats.requests - stats.plain_requests}, "
              f"{stats.complete_hosts - stats.plain_complete_hosts})")
    print("t(s)  requests  req/s  fds  RssAnon(MiB)" + ("  TLS-open" if args.tls else "")
          + ("  http-req  http-req/s" if args.mixed else ""))
    last_t, last_n, last_plain = 0.0, 0, 0
    for t, n, fds, anon, plain, tls_open in samples:
        span = t - last_t if t > last_t else float("inf")
        line = f"{t:5.0f} {n:9d} {(n - last_n) / span:6.0f} {fds:4d} {anon / 1024:8.0f}"
        if args.tls:
            line += f" {tls_open:9d}"
        if args.mixed:
            line += f" {plain:9d} {(plain - last_plain) / span:10.0f}"
        print(line)
        last_t, last_n, last_plain = t, n, plain
    summary = out_path.read_text(errors="replace")
    late = re.search(r"event loop late: p99 (\d+) ms, max (\d+) ms; with polecat on a CPU: p99 (\d+) ms, "
                     r"max (\d+) ms", " ".join(summary.split()))
    stalls = re.search(r"(\d+) stalls of 50 ms or more; with the loop's thread on a CPU: p99 (\d+) ms, "
                       r"max (\d+) ms, (\d+) stalls", " ".join(summary.split()))
    print("the node's event loop late (a timer every 50 ms, the whole run): "
          + (f"p99 {late[1]} ms, max {late[2]} ms; bounded by the node's CPU time over each sample: "
             f"p99 {late[3]} ms, max {late[4]} ms" if late else "under 1 ms at every sample")
          + (f"; {stalls[1]} samples 50 ms late or more; bounded by the loop thread's CPU time: p99 "
             f"{stalls[2]} ms, max {stalls[3]} ms, {stalls[4]} samples 50 ms or more" if stalls else ""))
    if args.stall_profile:
        print("\n".join(report(Path(args.stall_profile))))
    if args.commit_probe:
        print("\n".join(_commit_report(probe, counts)))
    print("\n".join(resumed))
    print("the crawl's summary:")
    print(out_path.read_text(errors="replace").strip())
    if code != 0:
        print("stderr tail:", err_path.read_text(errors="replace")[-2000:])


def _sample_requests(web: BreadthWeb, counts: list[tuple[float, int]], done: threading.Event) -> None:
    """``--commit-probe``: the server's request count every :data:`FINE` seconds until ``done``."""
    while not done.wait(FINE):
        counts.append((time.monotonic(), web.requests))


def _count_at(counts: list[tuple[float, int]], t: float) -> int:
    """The server's request count at the last sample at or before ``t``."""
    i = bisect.bisect_right(counts, (t, math.inf)) - 1
    return counts[i][1] if i >= 0 else 0


def _commit_report(probe: Path, counts: list[tuple[float, int]]) -> list[str]:
    """``--commit-probe``: the lines on the LMDB commits made while the crawl leased (the stop's are left
    out) and on the server's requests during them."""
    if not probe.exists():
        return ["commit probe: no report (the crawl did not exit normally?)"]
    got = json.loads(probe.read_text())
    last = got["last_lease"] or 0.0
    commits = [c for c in got["commits"] if c["start"] < last]
    longest, zero_from = 0.0, None
    for (t, n), (_, before) in zip(counts[1:], counts, strict=False):
        if not before:
            continue  # before the first request: the node's start, not a stall
        if n == before:
            zero_from = t if zero_from is None else zero_from
            longest = max(longest, t - zero_from + FINE)
        else:
            zero_from = None
    lines = [f"LMDB commits while leasing: {len(commits)}; the server's longest stretch without a request "
             f"{longest:.2f} s (sampled every {FINE} s)"]
    if not commits:
        return lines
    held = [c["end"] - c["start"] for c in commits]
    during = sum(_count_at(counts, c["end"]) - _count_at(counts, c["start"]) for c in commits)
    before = sum(_count_at(counts, c["start"]) - _count_at(counts, c["start"] - BEFORE) for c in commits)
    leases = sum(c["leases"] for c in commits)
    lines += [
        f"frontier calls held: mean {sum(held) / len(held):.2f} s, max {max(held):.2f} s, total "
        f"{sum(held):.1f} s (the writer thread's commit: mean "
        f"{sum(c['writer'] for c in commits) / len(commits):.2f} s)",
        f"during them: {leases} leases, {during} requests at the server ({during / sum(held):.0f}/s); in the "
        f"{BEFORE:.0f} s before each: {before / (BEFORE * len(commits)):.0f}/s",
        "per commit (held s, leases, requests at the server): "
        + ", ".join(f"({c['end'] - c['start']:.2f}, {c['leases']}, "
                    f"{_count_at(counts, c['end']) - _count_at(counts, c['start'])})" for c in commits),
    ]
    return lines


KILL_FILL = 0.9
"""``--kill-9``: the share of the log's longest (before an LMDB commit emptied it) at which the crawl is
killed."""


class _LogKiller:
    """``--kill-9``: follows the size of the crawl's write-ahead log; due, from ``not_before`` (monotonic)
    on, once the log, after at least one LMDB commit emptied it, is back to :data:`KILL_FILL` of the most
    it held before one."""

    def __init__(self, data: Path, not_before: float) -> None:
        self.data = data
        self.not_before = not_before
        self.longest = 0  # bytes the log held before the last drop
        self.size = 0
        self.drops = 0
        self.killed_at: int | None = None
        self.log: Path | None = None

    def due(self) -> bool:
        if self.log is None:  # found once: the data dir's store grows a file a segment
            self.log = next(self.data.glob(f"**/{LOG_NAME}"), None)
        size = self.log.stat().st_size if self.log is not None and self.log.exists() else 0
        if size < self.size:  # an LMDB commit emptied it (db.py rule 7)
            self.drops += 1
            self.longest = max(self.longest, self.size)
        self.size = size
        if (self.killed_at is None and self.drops and size >= KILL_FILL * self.longest
                and time.monotonic() >= self.not_before):
            self.killed_at = size
            return True
        return False

    def report(self) -> str:
        if self.killed_at is None:
            return f"not killed: the log was emptied {self.drops} times, the run ended first"
        return (f"SIGKILL with the log at {self.killed_at / 2**20:.1f} MiB on disk (longest before an LMDB "
                f"commit {self.longest / 2**20:.1f} MiB, {self.drops} commits seen)")


def _resume(web: BreadthWeb, seeds: Path, work: Path, args: argparse.Namespace,
            env: dict[str, str]) -> list[str]:
    """``--resume``: ``polecat status`` on the data dir the run left, then the same crawl again on it,
    timed to its first request at the server; answers the lines to print."""
    data = args.data or work / "data"
    started = time.monotonic()
    status = subprocess.run(polecat_command("status", str(data)), env=env, capture_output=True, text=True,
                            timeout=300)
    lines = [f"polecat status DIR: {time.monotonic() - started:.2f} s (exit {status.returncode}); "
             f"{status.stdout.splitlines()[0] if status.stdout else status.stderr[-300:]}"]
    before = web.stats().requests
    started = time.monotonic()
    child = subprocess.Popen(_crawl_cmd(seeds, data, web.dns.address, args, args.max_pages), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = float("nan")
    while child.poll() is None and time.monotonic() < started + 120:
        if web.stats().requests > before:
            first = time.monotonic() - started
            break
        time.sleep(0.02)
    child.terminate()
    child.wait(timeout=120)
    return [*lines, f"resume on the same data dir: first request after {first:.2f} s"]


def seeds_only(args: argparse.Namespace, work: Path) -> None:
    with BreadthWeb(1, min_interval=1 / args.rate - JITTER) as web:
        seeds = work / "seeds.txt"
        port = web.seeds()[0].rsplit(":", 1)[1].rstrip("/")
        with seeds.open("w") as f:
            f.write(web.seeds()[0] + "\n")  # the one host that answers, first
            for i in range(args.seeds_only - 1):
                f.write(f"http://s{i}.seeds.test:{port}/\n")  # NXDOMAIN: each costs one failed lookup
        env = _env()
        data = args.data or work / "data"
        sectors = _sectors_written(args.device)
        started = time.monotonic()
        cmd = _crawl_cmd(seeds, data, web.dns.address, args, 0)
        if args.profile:  # the node under cProfile (its stats written as SIGTERM ends it), no --nofile
            cmd = [cmd[0], "-m", "cProfile", "-o", args.profile, "-m", "polecat", *cmd[cmd.index("crawl"):]]
        child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = started + args.seconds
        peak_anon = 0
        while child.poll() is None and time.monotonic() < deadline:
            peak_anon = max(peak_anon, _status_kb(child.pid, "RssAnon"))
            time.sleep(0.05)
        first = web.stats().first_request
        dns_queries, dns_types = sum(web.dns.queries.values()), dict(web.dns.query_types)
        stopped = time.monotonic()
        child.terminate()  # SIGTERM: the node commits what it admitted and exits
        _, _, usage = os.wait4(child.pid, 0)  # not wait(): it reaps without rusage
        os.sync()  # what the child left dirty in the page cache reaches the device before it is read
        sectors = _sectors_written(args.device) - sectors
        status = subprocess.run(polecat_command("status", str(data)), env=env, capture_output=True,
                                text=True, timeout=120)
    hosts = int(status.stdout.split()[1]) if status.stdout.startswith("hosts ") else 0
    queued = int(m.group(1)) if (m := re.search(r"queued (\d+)", status.stdout)) else 0
    to_first = (first - started) if first is not None else float("nan")
    lmdb = (data / "frontier" / "data.mdb").stat().st_blocks * 512  # the blocks it holds on disk
    print(f"{args.seeds_only} seed lines: first request after {to_first:.2f} s; {hosts} hosts admitted "
          f"in the {stopped - started:.1f} s before SIGTERM: {hosts / (stopped - started):.0f} seeds/s "
          f"(with the crawl running: its leases, failed lookups, commits)")
    cpu = usage.ru_utime + usage.ru_stime
    print(f"CPU {cpu:.1f} s ({usage.ru_utime:.1f} user, {usage.ru_stime:.1f} sys): "
          f"{1e6 * cpu / max(hosts, 1):.0f} us per seed admitted (the crawl's work included); DNS queries "
          f"{dns_queries} ({dns_types}) for {hosts} hosts admitted")
    written = usage.ru_oublock * 512
    print(f"peak RssAnon {peak_anon / 1024:.0f} MiB with {queued} URLs queued; frontier LMDB "
          f"{lmdb / 2**20:.0f} MiB ({lmdb / max(queued, 1):.0f} B per queued URL); written "
          f"{written / 2**20:.0f} MiB (ru_oublock: {written / max(queued, 1):.0f} B per URL admitted)")
    if args.device:
        print(f"device {args.device}: {sectors * 512 / 2**20:.0f} MiB written (/sys/block stat), "
              f"{sectors * 512 / max(queued, 1):.0f} B per URL admitted")


def frontier_seeds(args: argparse.Namespace, work: Path) -> None:
    """The frontier alone (no crawl, no node): ``--frontier-seeds N`` host roots canonicalized and admitted
    in batches of the seed feed's size, committing every 2,000 changes as the node does."""
    cfg = Config(scope=ScopeConfig(mode="host"), frontier=FrontierConfig(working_hosts=args.working_hosts))
    db = FrontierDB(work / "frontier", map_size=cfg.frontier.map_size, params={})
    seen = SeenSet.restore(db.seen_keys, db.count("seen"), work / "seen.bloom", db.seq,
                           args.frontier_seeds, 0.01)
    frontier = Frontier(db, cfg, RobotsPolicy(cfg.robots, cfg.fetch.user_agent), seen, 0.0)
    canon = Canonicalizer()
    base = _status_kb(os.getpid(), "RssAnon")
    cpu = time.process_time()
    for start in range(0, args.frontier_seeds, BATCH):
        urls = [canon.canonicalize(f"http://s{i}.seeds.test:8080/")
                for i in range(start, min(start + BATCH, args.frontier_seeds))]
        db.apply(frontier.add_seeds([u for u in urls if u is not None], 1.0).writes)
        if db.pending >= cfg.frontier.commit_ops:
            frontier.commit()
    frontier.commit()
    cpu = time.process_time() - cpu
    anon = _status_kb(os.getpid(), "RssAnon")
    n = args.frontier_seeds
    print(f"{n} seeds admitted by the frontier alone: {n / cpu:.0f} seeds/s of CPU ({cpu:.1f} s); "
          f"RssAnon {anon / 1024:.0f} MiB ({(anon - base) / 1024:.0f} MiB over the {base / 1024:.0f} MiB "
          f"before); {frontier.hosts_in_memory} host records in memory (frontier.working_hosts "
          f"{args.working_hosts}), {frontier.queued} URLs queued")
    db.close()
    opened = time.monotonic()  # a resume: open the data again and ask for the first lease
    db = FrontierDB(work / "frontier", map_size=cfg.frontier.map_size, params={})
    seen = SeenSet.restore(db.seen_keys, db.count("seen"), work / "seen.bloom", db.seq,
                           args.frontier_seeds, 0.01)
    frontier = Frontier(db, cfg, RobotsPolicy(cfg.robots, cfg.fetch.user_agent), seen, 10.0)
    ready = time.monotonic()
    lease = db.applied(frontier.lease(20.0))
    print(f"reopened in {ready - opened:.2f} s (the Bloom filter rebuilt from the seen table: no snapshot "
          f"here), first lease {type(lease).__name__} {time.monotonic() - ready:.3f} s later, "
          f"{frontier.hosts_in_memory} host records in memory; {db.count('ops')} ops rows (the seed hosts' "
          "not read at the open)")
    db.close()
    for flags in ((), ("--busiest",)):  # the host counters (host_table rule 12), then every host record
        started = time.monotonic()
        status = subprocess.run(polecat_command("status", str(work), *flags),
                                env=_env(), capture_output=True, text=True,
                                timeout=600)
        print(f"polecat status DIR {' '.join(flags)}: {time.monotonic() - started:.2f} s "
              f"(exit {status.returncode}); {(status.stdout or status.stderr).splitlines()[0]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=10_000)
    p.add_argument("--max-pages", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=1.0, help="requests per second per host")
    p.add_argument("--concurrency", type=int, default=0, help="--concurrency of the crawl (its default)")
    p.add_argument("--nofile", type=int, default=4096,
                   help="the crawl's RLIMIT_NOFILE (the server here needs one descriptor per connection "
                        "too); 0: the crawl raises its own to the hard limit")
    p.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--seeds-only", type=int, default=0, metavar="N")
    p.add_argument("--frontier-seeds", type=int, default=0, metavar="N",
                   help="admit N seeds into a frontier in this process (no crawl): memory and seeds/s")
    p.add_argument("--working-hosts", type=int, default=FrontierConfig().working_hosts,
                   help="frontier.working_hosts (of the crawl: through a --config file)")
    p.add_argument("--seconds", type=float, default=30.0, help="--seeds-only: SIGTERM after this long")
    p.add_argument("--data", type=Path, metavar="DIR",
                   help="the crawl's data dir (absent: in the scratch dir; left in place)")
    p.add_argument("--device", metavar="NAME",
                   help="--seeds-only: also report the sectors written to /sys/block/NAME (the device of "
                        "--data's filesystem alone, e.g. a loop device) per URL admitted")
    p.add_argument("--frontier", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the crawl's [frontier] section, as TOML (e.g. log_max_mb=256)")
    p.add_argument("--profile", metavar="PATH",
                   help="--seeds-only: run the node under cProfile, its stats written to PATH")
    p.add_argument("--silent-dns", type=int, default=0, metavar="K",
                   help="every K-th host's name is never answered (a lame delegation)")
    p.add_argument("--tls", action="store_true",
                   help="the web serves HTTPS with a certificate from a local CA given to the crawl")
    p.add_argument("--mixed", action="store_true",
                   help="with --tls: every other host is served plain HTTP (a mixed breadth crawl)")
    p.add_argument("--tls-open", type=int, default=0, metavar="N",
                   help="the crawl's cap of TLS connections (fetch/pool.py TLS_OPEN) lowered to N "
                        "(raised to --concurrency where that is more, as pool rule 12 says)")
    p.add_argument("--stall-profile", metavar="PATH",
                   help="run the crawl on asyncio's own loop with its steps timed by the loop thread's CPU, "
                        "the profile written to PATH (JSON) and summed up after the run "
                        "(benchmarks/stall_profile.py)")
    p.add_argument("--commit-probe", action="store_true",
                   help="the LMDB commits and the server's requests during them (benchmarks/commit_probe)")
    p.add_argument("--resume", action="store_true",
                   help="after the crawl: time `polecat status DIR`, and a resume to its first request")
    p.add_argument("--kill-9", type=float, default=None, metavar="SECONDS",
                   help="with --resume: SIGKILL the crawl, SECONDS after its start or later, when its log "
                        "is nearly as long as it gets")
    p.add_argument("--keep-killed", type=Path, metavar="DIR",
                   help="with --kill-9: a copy of the data dir as the kill left it, made before the resume")
    args = p.parse_args()
    if args.mixed and not args.tls:
        p.error("--mixed needs --tls")
    if args.kill_9 is not None and not args.resume:
        p.error("--kill-9 needs --resume")
    if args.keep_killed and args.kill_9 is None:
        p.error("--keep-killed needs --kill-9")
    raise_nofile_limit()  # the server side holds one descriptor per connection the crawl opens
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        (frontier_seeds if args.frontier_seeds else seeds_only if args.seeds_only else breadth)(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
