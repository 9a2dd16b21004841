"""Politeness efficiency: does a polite crawler keep every host busy at its allowed rate?

    python -m benchmarks.bench_politeness --hosts 500 --seconds 60

H hosts at ``--rate`` req/s each (1 by default) and enough concurrency, so the ceiling is H x rate
requests per second. The generated web has more pages per host than the run can fetch, so no host runs
dry. The static benchmark server (benchmarks/server.py, its own process, pinned to one core with this
harness and the loopback DNS server) serves it; ``polecat crawl`` runs as a subprocess pinned to the other
core and gets SIGINT after ``--seconds``. Every figure comes from the server's request log:

- achieved rate over the steady-state window (``--warmup`` s after launch to 1 s before the SIGINT;
  robots.txt fetches count, as they use the same per-host budget) against the ceiling: the bar is 95 %;
- politeness violations over the whole run (overlaps, or starts closer than 1/rate): must be 0;
- how late each host's next request came (gap - 1/rate) and how many hosts ever sat idle (a gap over
  twice the interval inside the window), i.e. where the missing percent went.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.compare import run_child
from benchmarks.server import StaticServer, render_site
from polecat.testing.dns import LocalDnsServer
from polecat.testing.serverlog import RequestRecord, politeness_violations
from polecat.testing.sitegen import Site, SiteSpec
from polecat.testing.siteserve import reserve_port

ROOT = Path(__file__).resolve().parent.parent
ADDRESSES = [f"127.0.0.{i + 1}" for i in range(8)]
BAR = 0.95


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def report(log: list[RequestRecord], hosts: int, rate: float, window: tuple[float, float], launch: float,
           ) -> tuple[float, int]:
    """Print the figures; returns (efficiency, violations)."""
    lo, hi = window
    interval = 1.0 / rate
    inside = [r for r in log if lo <= r.start < hi]
    span = hi - lo
    achieved = len(inside) / span
    pages = sum(1 for r in inside if r.target != "/robots.txt")
    ceiling = hosts * rate
    violations = politeness_violations(log, interval)
    by_host: defaultdict[str, list[float]] = defaultdict(list)
    for r in log:
        by_host[r.host].append(r.start)
    late: list[float] = []
    idle = 0
    for starts in by_host.values():
        starts.sort()
        host_gaps = [b - a for a, b in itertools.pairwise(starts) if lo <= a and b < hi]
        late.extend(g - interval for g in host_gaps)
        idle += any(g > 2 * interval for g in host_gaps)
    print(f"requests logged: {len(log):,} ({sum(1 for r in log if r.target == '/robots.txt'):,} robots.txt), "
          f"hosts seen {len(by_host)}/{hosts}")
    print(f"steady-state window: {lo - launch:.1f}..{hi - launch:.1f} s after launch ({span:.1f} s)")
    print(f"achieved: {achieved:,.1f} req/s ({pages / span:,.1f} pages/s) against a ceiling of "
          f"{ceiling:,.0f} req/s = {achieved / ceiling:.1%} (bar {BAR:.0%})")
    print(f"per-host lateness (gap - interval) in window: median {pct(late, 0.5) * 1000:.1f} ms, "
          f"p99 {pct(late, 0.99) * 1000:.1f} ms, max {max(late or [0]) * 1000:.1f} ms; "
          f"hosts ever idle (> 2 intervals): {idle}")
    buckets: defaultdict[int, int] = defaultdict(int)
    for r in log:
        buckets[int((r.start - launch) // 5)] += 1
    print("req/s by 5 s after launch: " + " ".join(f"{buckets[b] / 5:.0f}" for b in sorted(buckets)))
    print(f"politeness violations: {len(violations)}")
    for v in violations[:5]:
        print(f"  {v.host}: {v.kind}, gap {v.gap * 1000:.1f} ms < {v.required * 1000:.0f} ms")
    return achieved / ceiling, len(violations)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_politeness",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=60.0, help="crawl this long, then SIGINT")
    ap.add_argument("--rate", type=float, default=1.0, help="requests per second per host")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds after launch left out of the window")
    ap.add_argument("--concurrency", type=int, help="crawler concurrency (default: the number of hosts)")
    ap.add_argument("--pages-per-host", type=int, help="default: enough that no host runs dry")
    ap.add_argument("--server-workers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "politeness")
    args = ap.parse_args(argv)
    if args.seconds <= args.warmup + 2:
        ap.error("--seconds must exceed --warmup by more than 2")
    pages = args.pages_per_host or int(args.seconds * args.rate * 1.5) + 20
    concurrency = args.concurrency or args.hosts
    allowed = sorted(os.sched_getaffinity(0))
    crawler_cpu, server_cpu = (str(allowed[0]), str(allowed[1])) if len(allowed) > 1 else (None, None)
    if server_cpu is not None:
        os.sched_setaffinity(0, {int(server_cpu)})  # this harness and its DNS thread share the server's core

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    port = reserve_port(ADDRESSES)
    site = Site(SiteSpec(hosts=args.hosts, pages_per_host=pages, seed=5, page_bytes=1024))
    t0 = time.monotonic()
    size = render_site(site, port, out / "site")
    print(f"site: {args.hosts} hosts x {pages} pages, {size / 1024**2:.0f} MB, "
          f"rendered in {time.monotonic() - t0:.1f} s", flush=True)
    (out / "seeds.txt").write_text("\n".join(site.seeds(port)) + "\n")
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    argv_ = [
        sys.executable, "-m", "polecat", "crawl", "--seeds-file", str(out / "seeds.txt"),
        "--data", str(data), "--rate", str(args.rate), "--concurrency", str(concurrency),
        "--scope", "any", "--allow-private", "--quiet", "--max-pages", str(args.hosts * pages),
    ]
    server = StaticServer(out / "site", port, len(ADDRESSES), args.server_workers, out / "server", server_cpu)
    with LocalDnsServer() as dns:
        for i, host in enumerate(site.hosts):
            dns.add(host, [ADDRESSES[i % len(ADDRESSES)]])
        argv_ += ["--dns-server", dns.address]
        server.start()
        try:
            launch = time.monotonic()
            code, wall, cpu_s, rss_kb = run_child(argv_, crawler_cpu, out / "crawler.txt", args.seconds)
        finally:
            log = server.stop()
    print(f"crawler: exit {code}, {wall:.1f} s wall, {cpu_s:.1f} s CPU ({cpu_s / wall:.0%} of a core), "
          f"peak RSS {rss_kb / 1024:.0f} MB, concurrency {concurrency}")
    window = (launch + args.warmup, launch + args.seconds - 1)
    efficiency, violations = report(log, args.hosts, args.rate, window, launch)
    ok = efficiency >= BAR and violations == 0 and code == 130
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
