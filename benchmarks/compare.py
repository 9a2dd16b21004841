"""polecat against Scrapy and against the raw limit, side by side, on one generated web.

    python -m benchmarks.compare --size small [--runs 3] [--runners polecat,scrapy,limit]
    python -m benchmarks.compare --corpus real [--runs 3] [--runners polecat,scrapy,limit]

Renders the site once (``--corpus real``: serves the installed Debian documentation instead, see
benchmarks/docweb.py), then for every runner and run: starts the static server (fresh log) on one core,
runs the crawler pinned to the other core with taskset, stops the server and computes the figures from
its request log and the crawler's rusage. Prints per-run lines and the median table with ratios, and
writes everything to ``OUT/results.json``. Needs no network beyond loopback.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import polecat
from benchmarks.corpora import FLOOR_HASH, blake2b_us, floor_stages
from benchmarks.docweb import doc_web
from benchmarks.metrics import RunFigures, figures, median_figures, politeness_ceiling, table
from benchmarks.runners import RUNNERS, RunContext, command
from benchmarks.server import StaticServer, render_site
from benchmarks.sizes import SIZES, Size
from polecat.store.segstore import ZSTD_LEVEL
from polecat.testing.dns import LocalDnsServer
from polecat.testing.sitegen import Site, ground_truth
from polecat.testing.siteserve import reserve_port

ROOT = Path(__file__).resolve().parent.parent


def _cpus() -> tuple[str | None, str | None]:
    """(crawler core, server core): the first two cores this process may use, or no pinning on one."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None, None
    return str(allowed[0]), str(allowed[1])


def run_child(
    argv: list[str], cpu: str | None, log_file: Path, timeout: float,
    poll: Callable[[int], None] | None = None,
) -> tuple[int, float, float, int]:
    """Run ``argv`` pinned to ``cpu``; returns (exit code, wall s, CPU s from wait4, peak RSS KB).
    Past ``timeout`` it gets SIGINT, then SIGKILL 10 s later. ``poll`` is called with the child's pid
    every 50 ms while it runs (a benchmark's samples of a crawl under way).

    Peak RSS is the child's own VmHWM, sampled from /proc while it runs: wait4's ru_maxrss is not
    usable, because Linux carries a process's RSS high-water mark across fork and exec, so every child
    would report at least this harness's RSS (about 0.9 GB with the large site loaded)."""
    if cpu is not None:
        argv = ["taskset", "-c", cpu, *argv]
    start = time.monotonic()
    with log_file.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    interrupted = False
    peak_kb = 0
    while True:
        peak_kb = max(peak_kb, _vm_hwm_kb(proc.pid))
        if poll is not None:
            poll(proc.pid)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        elapsed = time.monotonic() - start
        if elapsed > timeout and not interrupted:
            proc.send_signal(signal.SIGINT)
            interrupted = True
        elif elapsed > timeout + 10:
            proc.kill()
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.monotonic() - start, usage.ru_utime + usage.ru_stime, peak_kb


def _vm_hwm_kb(pid: int) -> int:
    """The process's resident high-water mark in KB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass(frozen=True, slots=True)
class Web:
    """What one comparison crawls, who serves it, and how runs are judged."""

    name: str
    port: int
    seeds: list[str]
    truth: set[str]
    hosts: dict[str, str]
    """Virtual host -> the loopback address it is served on."""
    intervals: dict[str, float]
    """Per-host politeness interval the runs are judged by."""
    robots: Site | None
    """The generated site whose robots.txt rules judge the runs; None: no rules (every page allowed)."""
    floor_pages: list[bytes]
    """Pages the floor's in-process stages are measured on."""
    served: Path
    """The server worker's first argument: a rendered site directory, or a docweb manifest."""
    module: str
    """The server worker (``python -m MODULE``)."""
    rate: float
    concurrency: int
    timeout: float
    scope: str


def generated_web(size: Size, addresses: list[str], out: Path, floor_pages: int = 400) -> Web:
    """``size``'s generated web, rendered into ``out/site``."""
    port = reserve_port(addresses)
    site = Site(size.spec)
    t0 = time.monotonic()
    total = render_site(site, port, out / "site")
    truth = ground_truth(site, port)
    print(
        f"site: {len(site.pages)} pages, {total / len(site.pages) / 1024:.1f} KB average, "
        f"ground truth {len(truth)} URLs, rendered in {time.monotonic() - t0:.1f} s",
        flush=True,
    )
    step = max(1, len(site.pages) // floor_pages)
    return Web(
        name="generated",
        port=port,
        seeds=site.seeds(port),
        truth=truth,
        hosts={h: addresses[i % len(addresses)] for i, h in enumerate(site.hosts)},
        intervals={h: max(1 / size.rate, site.crawl_delay(h)) for h in site.hosts},
        robots=site,
        floor_pages=[site.render(i, port) for i in range(0, len(site.pages), step)],
        served=out / "site",
        module="benchmarks.server",
        rate=size.rate,
        concurrency=size.concurrency,
        timeout=size.timeout,
        scope="any",
    )


REAL_RATE = 200.0
"""Requests per second per host on the real web (``--rate`` changes it): 5 hosts, so up to 1,000 requests a
second in all, as on the ``small`` web (200 hosts at 5), and ~3.5 s for its largest host (~690 pages).
Pacing costs CPU: the same crawl at 50 a second spends ~0.4 ms more a page (benchmarks/README.md)."""


def real_web(addresses: list[str], out: Path, rate: float = REAL_RATE) -> Web | None:
    """The installed Debian documentation (benchmarks/docweb.py) crawled at ``rate`` requests a second
    per host, or None if none of it is installed."""
    port = reserve_port(addresses)
    web = doc_web(port)
    if web is None:
        return None
    kb = sum(map(len, web.html.values())) / len(web.html) / 1024
    print(
        f"real web: {len(web.roots)} packages ({', '.join(sorted(web.roots))}), {len(web.truth)} URLs, "
        f"{len(web.html)} HTML pages of {kb:.1f} KB average",
        flush=True,
    )
    manifest = out / "docweb.json"
    manifest.write_text(json.dumps({host: str(root) for host, root in web.roots.items()}))
    return Web(
        name="real",
        port=port,
        seeds=web.seeds,
        truth=web.truth,
        hosts={h: addresses[i % len(addresses)] for i, h in enumerate(sorted(web.roots))},
        intervals=dict.fromkeys(web.roots, 1 / rate),
        robots=None,
        floor_pages=list(web.html.values()),
        served=manifest,
        module="benchmarks.docweb",
        rate=rate,
        concurrency=64,
        timeout=300,
        scope="host",
    )


def compare(
    web: Web,
    runners: list[str],
    runs: int | Mapping[str, int],
    out: Path,
    *,
    workers: int = 1,
    slack: float = 0.0,
    cpus: tuple[str | None, str | None] = (None, None),
) -> dict[str, RunFigures]:
    """Run every runner ``runs`` times (or ``runs[runner]``) over ``web``; ``cpus`` = (crawler core,
    server core)."""
    crawler_cpu, server_cpu = cpus
    out.mkdir(parents=True, exist_ok=True)
    truth = web.truth
    print(f"politeness ceiling: {politeness_ceiling(truth, web.intervals):.0f} pages/s", flush=True)
    (out / "seeds.txt").write_text("\n".join(web.seeds) + "\n")
    (out / "urls.txt").write_text("\n".join(sorted(truth)) + "\n")
    (out / "hosts.json").write_text(json.dumps(web.hosts))
    results: dict[str, RunFigures] = {}
    per_run: dict[str, list[dict[str, float | int]]] = {}
    with LocalDnsServer() as dns:
        for host, address in web.hosts.items():
            dns.add(host, [address])
        for runner in runners:
            runs_figures = []
            for i in range(runs if isinstance(runs, int) else runs[runner]):
                run_dir = out / "runs" / f"{runner}-{i}"
                subprocess.run(["rm", "-rf", str(run_dir)], check=True)
                run_dir.mkdir(parents=True)
                ctx = RunContext(
                    out / "seeds.txt",
                    out / "urls.txt",
                    out / "hosts.json",
                    dns.address,
                    run_dir,
                    web.rate,
                    web.concurrency,
                    web.scope,
                )
                argv = command(runner, ctx)
                server = StaticServer(
                    web.served,
                    web.port,
                    len(set(web.hosts.values())),
                    workers,
                    run_dir / "server",
                    server_cpu,
                    web.module,
                )
                server.start()
                try:
                    code, wall, cpu_s, rss = run_child(argv, crawler_cpu, run_dir / "output.txt", web.timeout)
                finally:
                    log = server.stop()
                fig = figures(
                    log,
                    web.robots,
                    truth,
                    web.intervals,
                    wall=wall,
                    cpu_s=cpu_s,
                    maxrss_kb=rss,
                    exit_code=code,
                    slack=slack,
                )
                runs_figures.append(fig)
                print(
                    f"{runner} run {i + 1}: " + ", ".join(f"{k}={v:.4g}" for k, v in asdict(fig).items()),
                    flush=True,
                )
            results[runner] = median_figures(runs_figures)
            per_run[runner] = [asdict(f) for f in runs_figures]
    report: dict[str, object] = {"median": {k: asdict(v) for k, v in results.items()}, "runs": per_run}
    if "limit" in results:
        report["floor"] = floor(web.floor_pages, results, (out / "floor.txt"))
    (out / "results.json").write_text(json.dumps(report, indent=1))
    return results


def floor(pages: list[bytes], results: Mapping[str, RunFigures], out: Path) -> dict[str, float]:
    """The floor per page (the bare loop's CPU, plus lexbor parse, SHA-256 and zstd of ``pages``
    measured here) and polecat's ratio to it, and to the floor with BLAKE2b as its hash; printed, written
    to ``out``, returned (ms)."""
    stages = floor_stages(pages, ZSTD_LEVEL)
    blake2b = blake2b_us(pages) / 1000
    parts = {"fetch (bare GET loop)": results["limit"].cpu_ms_per_page}
    parts.update((name, us / 1000) for name, us in stages)
    total = sum(parts.values())
    lines = [f"floor, CPU ms/page: {' + '.join(f'{k} {v:.3f}' for k, v in parts.items())} = {total:.3f}"]
    parts["floor"] = total
    if "polecat" in results:
        parts["polecat/floor"] = results["polecat"].cpu_ms_per_page / total
        lines.append(f"polecat/floor: {parts['polecat/floor']:.2f}x")
        with_blake2b = total - parts[FLOOR_HASH] + blake2b
        parts["polecat/floor with BLAKE2b"] = results["polecat"].cpu_ms_per_page / with_blake2b
        lines.append(f"polecat/floor with BLAKE2b {blake2b:.3f} as its hash (issue 17's first floor, "
                     f"{with_blake2b:.3f}): {parts['polecat/floor with BLAKE2b']:.2f}x")
    print("\n".join(lines), flush=True)
    out.write_text("\n".join(lines) + "\n")
    return parts


def compile_crawler() -> None:
    """Write polecat's bytecode caches before the runs, as ``pip install`` does for an installed package
    (and did for every other runner's packages). An editable checkout run with PYTHONDONTWRITEBYTECODE
    set would otherwise compile every polecat module from source in each crawl process: ~0.09 s of CPU
    a process, a cost of the checkout, not of the crawler."""
    compileall.compile_dir(Path(polecat.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument(
        "--corpus",
        choices=("generated", "real"),
        default="generated",
        help="the generated web of --size, or real HTML: installed Debian docs (benchmarks/docweb.py)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=REAL_RATE, help="--corpus real: requests/s per host")
    parser.add_argument("--scrapy-runs", type=int, help="runs for Scrapy (default --runs; it is slow)")
    parser.add_argument(
        "--limit-runs",
        type=int,
        help="runs for the bare loop (default --runs): the floor takes the median of its CPU a page, which "
        "moves by up to 10 %% run to run, more than polecat's",
    )
    parser.add_argument(
        "--runners", default=",".join(RUNNERS), help="comma-separated subset of " + ",".join(RUNNERS)
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "compare")
    parser.add_argument(
        "--server-workers", type=int, default=1, help="server processes (all pinned to the server core)"
    )
    parser.add_argument(
        "--slack",
        type=float,
        default=0.0,
        help="seconds of tolerance when counting per-host interval violations",
    )
    args = parser.parse_args(argv)
    runners = [r for r in args.runners.split(",") if r]
    unknown = set(runners) - set(RUNNERS)
    if unknown:
        parser.error(f"unknown runners: {', '.join(sorted(unknown))}")
    cpus = _cpus()
    if cpus[1] is not None:
        os.sched_setaffinity(0, {int(cpus[1])})  # the harness and its DNS thread share the server's core
    out = args.out / (args.size if args.corpus == "generated" else "real")
    out.mkdir(parents=True, exist_ok=True)
    runs = {r: args.runs for r in runners}
    if args.scrapy_runs is not None:
        runs["scrapy"] = args.scrapy_runs
    if args.limit_runs is not None:
        runs["limit"] = args.limit_runs
    addresses = [f"127.0.0.{i + 1}" for i in range(8)]
    if args.corpus == "real":
        web = real_web(addresses, out, args.rate)
        if web is None:
            parser.error("no documentation package of benchmarks/docweb.py is installed")
    else:
        web = generated_web(SIZES[args.size], addresses, out)
    compile_crawler()
    results = compare(web, runners, runs, out, workers=args.server_workers, slack=args.slack, cpus=cpus)
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
