"""Content dedup across workers (issue 35): the collapse of a crawl over 1, 2 and 4 workers against one
process, on a web of cross-host mirrors and near-copies, and what claims cost in CPU and pages/s.

    python -m benchmarks.bench_claims --hosts 40 --pages-per-host 40 --workers 1,2,4
    python -m benchmarks.bench_claims --hosts 2000 --pages-per-host 30 --workers 4 --nodes 3 --without

(the second: issue 35's claim cost in the steady state of a longer crawl, below).

The web (benchmarks/server.py, in its own processes) is a generated site whose last half of the hosts
mirror the first half (``SiteSpec.mirror_hosts``): each mirrored page byte for byte, or with one token
changed (``--mirror-near``); inside a host ``--dup`` of the pages copy another page and ``--near-dup``
change one token of another. It is crawled to the end from an empty data dir by one process (no
``--workers``), then by each worker count with content claims and (``--without``) right after it with
``[cluster] content_claims = false``, all in one run so they see the same machine load; ``--repeat N``
crawls that list N times (each pair the other way round in odd repetitions) and prints each run's
medians and its change against claims off, pair by pair (:func:`repeated`).

With ``--nodes 1,3`` the same web is also crawled by etcd clusters of those sizes (``polecat node``
processes on 127.0.0.60+, a private etcd, the web served by this process: polecat/testing/web.py), a
1-node cluster being the single-process figure for them; ``--without`` adds each size with claims off.
A node cluster's CPU is the nodes' user + system time from the first request to the last page (read
from /proc, start-up and stop left out), pages/s over the same span.

A node crawl is stopped (SIGTERM) once the web was asked for every page of its ground truth and then
went :data:`QUIET` seconds without a request (the page URLs the nodes fetch outside that truth, 25 of
1,912 in the 200 x 10 web, may be asked for after its last page), and every page URL is then accounted for
(:func:`account_pages`): stored, cut at the stop and still queued (fetched again on the next start),
finished without a page, or lost, which fails the run (benchmarks/README.md "A 3-node crawl whose
stores held 1,911 of 1,912 pages"). The row says how many were cut or never asked for. Right before the
stop each node's ``/metrics`` is kept beside its log (``n<k>.metrics``: its claims by event, its claim
frames by transport), to tell crawls of one size apart by what their claims did.

Figures per crawl: pages (the page records of the stores), fetched body bytes (the sizes of every page
record the stores hold, revisits included), stored bytes (what the stores appended to their segments:
compressed WARC records and deltas), the collapse (stored / fetched), bodies stored whole, revisit
records, the pages stored in full because a claim had no answer (``X-Polecat-Claim``), CPU seconds of
the whole process tree (wait4) per page, and pages/s over the span from the first to the last request.

Those whole-crawl figures hold the crawl's start (imports, etcd membership, the claim links' set-up) and its
end (the last hosts' politeness waits, the last pages' wait for their claims' answers), which weigh most on a
short crawl. Beside them, the **steady state** (:class:`SteadyWindow`): while the crawl runs, the web counts
the requests for its pages (the static server's ``served`` counter for a process and its workers, the test
web's log for nodes; robots.txt and soft-404 probes left out), and when that count first reaches
:data:`STEADY`'s fractions of the pages of the ground truth, the CPU of every crawl process (utime + stime,
of the node and its worker children, or of each node, from /proc) and the time are sampled: steady CPU a page
is the CPU between the two samples over the pages served between them, steady pages/s those pages over the
seconds between them ("steady s"). The CPU and the time are sampled at each tenth of those pages from
10 % to 90 % (:data:`MARKS`), so that the CPU a page of each tenth between them is printed after the table,
beside the page rate of each tenth of the crawl's page requests (:func:`profile`): whether the window is
flat, and whether a page costs more as the crawl grows.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_politeness import ADDRESSES
from benchmarks.compare import run_child
from benchmarks.server import StaticServer, render_site
from polecat.cluster.claimlink import CLAIM_HEADER
from polecat.cluster.layout import collection_dirs
from polecat.config import StoreConfig
from polecat.frontier.records import PAGE_OUTCOMES
from polecat.frontier.status import read_outcomes, read_queued
from polecat.store.segstore import SegmentStore
from polecat.testing.dns import LocalDnsServer
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import (
    is_page_request,
    loopback_port,
    node_toml,
    page_urls,
    start_node,
    until,
    wait_exit,
)
from polecat.testing.serverlog import RequestRecord
from polecat.testing.sitegen import Site, SiteSpec, ground_truth
from polecat.testing.siteserve import reserve_port
from polecat.testing.web import TestWeb

ROOT = Path(__file__).resolve().parent.parent

QUIET = 0.5
"""Seconds without a request after the last page of the truth was asked for before the nodes are stopped."""

MARKS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""Where the CPU and the time are sampled, in fractions of the ground truth's pages served."""

STEADY = (0.2, 0.8)
"""The steady window (two of :data:`MARKS`). Before it, the ramp: the hosts asked for robots.txt (a request
a host before its first page, not counted as a page) while the frontier fills; past it, the tail: hosts
running out of pages, their politeness waits, the last claims' answers. In the 2,000 x 20 crawls measured,
the first and the last tenth of the page requests ran under the middle's page rate in most (some at under
half of it), and the 10-20 % step's CPU a page was the highest in some (the lines after the table); 20 % and
80 % leave a tenth of margin on each side and 60 % of the pages in the window (benchmarks/README.md
"Issue 35: claim cost in the steady state of a longer crawl")."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of a crawl under way."""

    pages: int
    """Page requests the web had answered."""
    cpu_s: float
    """CPU seconds of every crawl process so far."""
    at: float
    """``time.monotonic()``."""


class SteadyWindow:
    """The steady state of one crawl (module docstring): fed the web's count of pages served at each poll,
    it samples the crawl's CPU and the time at the first poll whose count reaches each of ``fractions`` of
    ``expected`` pages; the steady window runs from the sample at ``steady[0]`` to the one at
    ``steady[1]``."""

    def __init__(self, expected: int, fractions: tuple[float, ...] = MARKS,
                 steady: tuple[float, float] = STEADY) -> None:
        self.marks = tuple(round(expected * f) for f in fractions)
        self._steady = (fractions.index(steady[0]), fractions.index(steady[1]))
        self.samples: list[Sample] = []

    def observe(self, pages: int, read: Callable[[], tuple[float, float]]) -> None:
        """``pages``: served so far; ``read``: the crawl's CPU seconds and the time, called at a mark only
        (one mark a poll: a count past two takes the next sample at the next poll)."""
        if len(self.samples) < len(self.marks) and pages >= self.marks[len(self.samples)]:
            cpu_s, at = read()
            self.samples.append(Sample(pages, cpu_s, at))

    def between(self, first: int, last: int) -> tuple[float, float, float] | None:
        """(seconds, CPU ms a page, pages/s) from the sample at mark ``first`` to the one at ``last``
        (indexes of ``fractions``); None before both, or with no page or no time between them."""
        if len(self.samples) <= last:
            return None
        start, end = self.samples[first], self.samples[last]
        pages, seconds = end.pages - start.pages, end.at - start.at
        if pages <= 0 or seconds <= 0:
            return None
        return seconds, (end.cpu_s - start.cpu_s) * 1000 / pages, pages / seconds

    def figures(self) -> tuple[float, float, float] | None:
        """:meth:`between` the steady window's two samples."""
        return self.between(*self._steady)

    def steps(self) -> list[float | None]:
        """The CPU ms a page from each mark to the next (None where :meth:`between` has none)."""
        return [None if (w := self.between(i, i + 1)) is None else w[1] for i in range(len(self.marks) - 1)]


@dataclass(frozen=True, slots=True)
class PageAccount:
    """What became of every page URL of a stopped crawl: asked for (the web's log) or still queued."""

    stored: int
    """Page URLs with a record in a store."""
    cut: tuple[str, ...]
    """Asked for, no record, still queued: the request was cut at the stop, the next start fetches it."""
    unasked: tuple[str, ...]
    """Never asked for, still queued."""
    failed: tuple[str, ...]
    """Asked for and finished without a page (a failed request, robots.txt): ``polecat pages --failed``."""
    lost: tuple[str, ...]
    """Asked for, no record, not queued, not finished without a page (or finished as a page with no
    record): a page the crawl lost."""


def account_pages(asked: Iterable[str], data: list[Path]) -> PageAccount:
    """:class:`PageAccount` of the page URLs ``asked`` for (robots.txt left out) and of those queued in
    the stopped crawl ``data`` (a cluster's data dirs)."""
    stored: set[str] = set()
    queued: set[str] = set()
    unpaged: set[str] = set()
    for node in collection_dirs(data):
        with SegmentStore.open(node / "store", StoreConfig(), read_only=True) as store:
            stored.update(r.url for r in store.records())
        queued.update(read_queued(node / "frontier"))
        unpaged.update(r.url for r in read_outcomes(node / "frontier") if r.outcome not in PAGE_OUTCOMES)
    want = set(asked) - stored
    return PageAccount(
        stored=sum(not u.endswith("/robots.txt") for u in stored), cut=tuple(sorted(want & queued)),
        unasked=tuple(sorted(u for u in queued - stored - want if not u.endswith("/robots.txt"))),
        failed=tuple(sorted((want & unpaged) - queued)), lost=tuple(sorted(want - queued - unpaged)))


def store_figures(data: Path | list[Path]) -> tuple[int, int, int, int, int, int]:
    """(pages, fetched body bytes, stored bytes, bodies, revisits, unanswered) over every store of
    ``data`` (a data dir, or a cluster's), robots.txt left out but for the stored bytes."""
    pages = fetched = stored = bodies = revisits = unanswered = 0
    for node in collection_dirs(data if isinstance(data, list) else [data]):
        with SegmentStore.open(node / "store", StoreConfig(), read_only=True) as store:
            s = store.stats()
            stored += s.stored_bytes
            bodies += s.bodies
            for r in store.records():
                if r.url.endswith("/robots.txt"):
                    continue
                pages += 1
                fetched += r.size
                revisits += r.kind == "revisit"
                unanswered += r.header(CLAIM_HEADER.lower()) is not None
    return pages, fetched, stored, bodies, revisits, unanswered


def profile(name: str, log: Iterable[RequestRecord], steady: SteadyWindow) -> str:
    """One crawl's line after the table: the page rate (pages/s) over each tenth of its page requests, in
    order (how flat the steady window's middle is, how long the ramp and the tail are: :data:`STEADY`),
    and the CPU ms a page between its samples (:meth:`SteadyWindow.steps`)."""
    starts = sorted(r.start for r in log if is_page_request(r))
    cuts = [starts[len(starts) * i // 10] for i in range(10)] + starts[-1:]
    rates = [f"{len(starts) / 10 / max(b - a, 1e-9):,.0f}" for a, b in itertools.pairwise(cuts)]
    cpu = ["-" if ms is None else f"{ms:.2f}" for ms in steady.steps()]
    return f"{name}: pages/s {' '.join(rates) or '-'}; CPU ms/page {' '.join(cpu)}"


def _row(name: str, data: Path | list[Path], cpu_s: float, span: float, steady: SteadyWindow,
         code: int = 0) -> str:
    pages, fetched, stored, bodies, revisits, unanswered = store_figures(data)
    window = steady.figures()
    return (f"| {name} | {pages:,} | {fetched / 1e6:.2f} | {stored / 1e6:.2f} | "
            f"{stored / max(1, fetched):.4f} | {bodies:,} | {revisits:,} | {unanswered} | {cpu_s:.1f} | "
            f"{cpu_s * 1000 / max(1, pages):.2f} | {pages / max(span, 1e-9):,.0f} | "
            + ("- | - | - |" if window is None else
               f"{window[0]:.2f} | {window[1]:.2f} | {window[2]:,.0f} |")
            + ("" if code == 0 else f" exit {code}"))


def site_spec(args: argparse.Namespace) -> SiteSpec:
    """The web that ``args`` describe (:func:`web_arguments`)."""
    return SiteSpec(hosts=args.hosts, pages_per_host=args.pages_per_host, seed=35,
                    mirror_hosts=args.hosts // 2, mirror_near_ratio=args.mirror_near, dup_ratio=args.dup,
                    near_dup_ratio=args.near_dup)


async def cluster(n: int, claims: bool, args: argparse.Namespace,
                  work: Path) -> tuple[str, str, tuple[float, float, float] | None]:
    """One crawl of the web by ``n`` etcd nodes into the new directory ``work``: its table row, its
    :func:`profile` line and its steady window (AssertionError naming the pages lost, if any)."""
    async with TestWeb(site_spec(args), dns_process=True) as web:
        steady = SteadyWindow(len(web.ground_truth("host")))
        cpu, codes, pages = await crawl_by_nodes(web, n, claims, args, work, steady)
        log = web.log
        starts = [r.start for r in log]
    assert not pages.lost, f"{len(pages.lost)} pages lost (data dirs kept in {work}): {pages.lost[:10]}"
    name = node_run_name(n, claims)
    row = _row(name, [work / f"n{k}" for k in range(n)], cpu, max(starts) - min(starts), steady,
               max(codes)) + (
        f" {len(pages.cut)} cut at the stop, still queued" if pages.cut else "") + (
        f" {len(pages.unasked)} never asked for, queued" if pages.unasked else "")
    return row, profile(name, log, steady), steady.figures()


def node_run_name(n: int, claims: bool) -> str:
    """A node crawl's name in the table (and, for ``--repeat``, the key of its windows)."""
    return f"{n} node{'s' if n > 1 else ''}" + ("" if claims else ", claims off")


def crawl_pair(without: bool, rep: int) -> tuple[bool, ...]:
    """Claims on, then off (``--without``) right after it, in that order in even repetitions and the other
    way round in odd ones: a pair of crawls sees the same load, and a drift of the machine's pace over
    the repetitions falls on either side alike."""
    return ((True, False) if rep % 2 == 0 else (False, True)) if without else (True,)


def worker_runs(args: argparse.Namespace, rep: int) -> list[tuple[str, int, bool]]:
    """The crawls of repetition ``rep``: one process, then each worker count's pair (:func:`crawl_pair`)."""
    return [("1 process", 0, True), *((f"{n} workers" + ("" if claims else ", claims off"), n, claims)
                                      for n in args.workers for claims in crawl_pair(args.without, rep))]


def repeated(windows: Mapping[str, Sequence[tuple[float, float, float] | None]]) -> str:
    """The steady windows of ``--repeat``'s crawls, by run: the median CPU a page and pages/s, and for a
    run with claims, its change against the same count with claims off, repetition by repetition (the
    two crawls of a pair ran back to back, :func:`crawl_pair`) and their median. A crawl whose window was not
    reached is left out."""
    lines = ["| run | repetitions | steady CPU ms/page, median | steady pages/s, median "
             "| CPU a page against claims off, each (median) | pages/s against claims off, each (median) |",
             "|---|---|---|---|---|---|"]
    for name, got in windows.items():
        seen = [w for w in got if w is not None]
        off = windows.get(f"{name}, claims off", [])
        pairs = [(on, o) for on, o in zip(got, off, strict=False) if on is not None and o is not None]
        changes = [""] * 2
        for k, col in ((0, 1), (1, 2)):
            each = [on[col] / o[col] - 1 for on, o in pairs]
            if each:
                changes[k] = (", ".join(f"{c:+.0%}" for c in each) + f" ({statistics.median(each):+.0%})")
        cpu = f"{statistics.median(w[1] for w in seen):.2f}" if seen else "-"
        rate = f"{statistics.median(w[2] for w in seen):,.0f}" if seen else "-"
        lines.append(f"| {name} | {len(seen)} of {len(got)} | {cpu} | {rate} | {changes[0] or '-'} "
                     f"| {changes[1] or '-'} |")
    return "\n".join(lines)


async def follow(web: TestWeb, truth: set[str], procs: list[subprocess.Popen[bytes]], steady: SteadyWindow,
                 within: float) -> None:
    """Read the web's log as it grows (every 50 ms, only its new requests) until every page of ``truth``
    was asked for (AssertionError after ``within`` seconds), feeding ``steady`` the pages served and the
    nodes' CPU."""
    missing, seen, pages = set(truth), 0, 0
    deadline = time.monotonic() + within
    while missing:
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for every page")
        log = web.log
        new = [r.url for r in log[seen:] if is_page_request(r)]
        seen, pages = len(log), pages + len(new)
        missing.difference_update(new)
        steady.observe(pages, lambda: (sum(tree_cpu_seconds(p.pid) for p in procs), time.monotonic()))
        await asyncio.sleep(0.05)


async def crawl_by_nodes(web: TestWeb, n: int, claims: bool, args: argparse.Namespace, work: Path,
                         steady: SteadyWindow | None = None) -> tuple[float, list[int], PageAccount]:
    """Crawl ``web`` to its last page with ``n`` etcd nodes (data dirs and logs ``work/n<k>``), then stop
    them (module docstring): the nodes' CPU seconds from the first request to the last page, their exit
    codes, and what became of every page; ``steady`` (if any: bench_stalls reads none) gets its samples
    on the way."""
    truth = web.ground_truth("host")
    steady = steady if steady is not None else SteadyWindow(len(truth))
    with EtcdServer() as etcd:
        procs, listens = [], []
        try:
            for k in range(n):
                host = f"127.0.0.{60 + k}"
                conf = work / f"n{k}.toml"
                listens.append(f"{host}:{loopback_port(host)}")
                toml = node_toml(web, work / f"n{k}", listens[-1], etcd.endpoint,
                                 f"n{k}", "", rate=args.rate, ttl=5, interval=60.0)
                # node_toml ends in its [cluster] section
                conf.write_text(toml + ("" if claims else "content_claims = false\n"))
                procs.append(start_node(conf, work / f"n{k}.log"))
            await until(lambda: bool(web.log), args.timeout, "the first request")
            cpu0 = sum(tree_cpu_seconds(p.pid) for p in procs)
            await follow(web, truth, procs, steady, args.timeout)
            cpu = sum(tree_cpu_seconds(p.pid) for p in procs) - cpu0
            await until(lambda: time.monotonic() - web.log[-1].start >= QUIET, args.timeout, "a quiet web")
            for k, listen in enumerate(listens):
                (work / f"n{k}.metrics").write_bytes(await asyncio.to_thread(scrape, listen))
            for p in procs:
                p.send_signal(signal.SIGTERM)
            codes = [await wait_exit(p, 60) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return cpu, codes, account_pages(page_urls(web), [work / f"n{k}" for k in range(n)])


def scrape(listen: str) -> bytes:
    """The ``/metrics`` of the node listening on ``listen``, or why it could not be read."""
    try:
        with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as resp:
            body: bytes = resp.read()
            return body
    except OSError as exc:
        return f"# not read: {exc}\n".encode()


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the live process ``pid`` and of its descendants (Linux /proc), with
    the children each has reaped (cutime + cstime): a child that exits moves its time into its parent's."""
    ticks, todo = 0, [pid]
    while todo:
        proc = Path(f"/proc/{todo.pop()}")
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            children = [int(c) for task in (proc / "task").iterdir()
                        for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone since its parent was read: its parent counts it once it is reaped
        ticks += sum(int(f) for f in fields[11:15])
        todo.extend(children)
    return ticks / os.sysconf("SC_CLK_TCK")


def crawl(args: argparse.Namespace) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    port = reserve_port(ADDRESSES)
    site = Site(site_spec(args))
    size = render_site(site, port, out / "site")
    (out / "seeds.txt").write_text("\n".join(site.seeds(port)) + "\n")
    (out / "off.toml").write_text("[cluster]\ncontent_claims = false\n")
    print(f"site: {args.hosts} hosts x {args.pages_per_host} pages ({args.hosts // 2} mirror hosts, "
          f"{args.mirror_near:.0%} of mirrored pages near-copies, dup {args.dup:.0%}, near-dup "
          f"{args.near_dup:.0%}), {size / 1024**2:.1f} MB; {os.cpu_count()} cores")
    expected = len(ground_truth(site, port, "host"))
    print(f"steady window: from {STEADY[0]:.0%} to {STEADY[1]:.0%} of the {expected:,} pages of the truth "
          "served")
    print("| run | pages | fetched MB | stored MB | stored / fetched | bodies | revisits | unanswered "
          "| CPU s | CPU ms/page | pages/s | steady s | steady CPU ms/page | steady pages/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    profiles: list[str] = []
    windows: dict[str, list[tuple[float, float, float] | None]] = {}
    with LocalDnsServer() as dns:
        for i, host in enumerate(site.hosts):
            dns.add(host, [ADDRESSES[i % len(ADDRESSES)]])
        for name, n, claims in [run for rep in range(args.repeat) for run in worker_runs(args, rep)]:
            data = out / f"data-{n}-{int(claims)}"
            shutil.rmtree(data, ignore_errors=True)
            argv = [sys.executable, "-m", "polecat", "crawl", "--seeds-file", str(out / "seeds.txt"),
                    "--data", str(data), "--rate", str(args.rate), "--concurrency", str(args.concurrency),
                    "--scope", "host", "--allow-private", "--quiet", "--dns-server", dns.address,
                    *(("--workers", str(n)) if n else ()),
                    *(() if claims else ("--config", str(out / "off.toml")))]
            server = StaticServer(out / "site", port, len(ADDRESSES), 1, out / "server", None)
            server.start()
            steady = SteadyWindow(expected)

            def poll(pid: int, steady: SteadyWindow = steady, server: StaticServer = server) -> None:
                steady.observe(server.served(), lambda: (tree_cpu_seconds(pid), time.monotonic()))

            try:
                code, _, cpu_s, _ = run_child(argv, None, out / f"crawler-{n}-{int(claims)}.txt",
                                              args.timeout, poll)
            finally:
                log = server.stop()
            starts = [r.start for r in log]
            print(_row(name, data, cpu_s, max(starts) - min(starts) if starts else 0.0, steady, code),
                  flush=True)
            profiles.append(profile(name, log, steady))
            windows.setdefault(name, []).append(steady.figures())
    for n, claims in [(n, claims) for rep in range(args.repeat) for n in args.nodes
                      for claims in crawl_pair(args.without, rep)]:
        work = out / f"nodes-{n}-{int(claims)}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        row, line, window = asyncio.run(cluster(n, claims, args, work))
        print(row, flush=True)
        profiles.append(line)
        windows.setdefault(node_run_name(n, claims), []).append(window)
    if args.repeat > 1:
        print(f"\n{repeated(windows)}")
    print(f"\nPer tenth: pages/s over each tenth of the crawl's page requests; CPU ms/page from each tenth "
          f"of the truth's {expected:,} pages served to the next, {MARKS[0]:.0%} to {MARKS[-1]:.0%}:")
    print("\n".join(profiles))


def web_arguments(ap: argparse.ArgumentParser, *, hosts: int, pages_per_host: int) -> None:
    """The options of the web (:func:`site_spec`) and of the crawl's rate, and ``--timeout``."""
    ap.add_argument("--hosts", type=int, default=hosts)
    ap.add_argument("--pages-per-host", type=int, default=pages_per_host)
    ap.add_argument("--mirror-near", type=float, default=0.3)
    ap.add_argument("--dup", type=float, default=0.1)
    ap.add_argument("--near-dup", type=float, default=0.1)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--timeout", type=float, default=600.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_claims", description=__doc__.split("\n")[0])
    web_arguments(ap, hosts=40, pages_per_host=40)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",") if x], default=[1, 2, 4],
                    help='worker counts, comma-separated ("": none, the node runs alone)')
    ap.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[],
                    help="also crawl with etcd clusters of these sizes (e.g. 1,3)")
    ap.add_argument("--without", action="store_true", help="also crawl each count with claims off")
    ap.add_argument("--repeat", type=int, default=1,
                    help="crawl the whole list this many times, then print each run's median steady figures "
                         "and its change against claims off, repetition by repetition: one crawl's "
                         "steady CPU a page moved by 5-10 %% between runs on a quiet 2-core machine")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "claims")
    crawl(ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
