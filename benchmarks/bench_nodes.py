"""Throughput of a ``polecat node`` cluster of 1, 2, 4 processes on loopback.

    python -m benchmarks.bench_nodes --nodes 1 2 4 --hosts 128 --pages-per-host 40 --rate 20 --runs 2

For each N: a private etcd, a generated web (``--hosts`` x ``--pages-per-host``, served by this process
on 127.0.0.x), and N ``polecat node --config`` processes on 127.0.0.50+ sharing the crawl (seeds in
every node's config: each queues the ones it owns). Times run from the first request the server saw to
the last page of the web; the nodes' CPU (user + system, read from /proc at the first request and
when the last page was fetched: start-up and the stop are out, joins after the first request are in)
is divided by the pages, and so is this process's (the web server's, and the polling) over the same
span. Politeness
violations are judged at the server from the request log (must be 0). Every node is then stopped with
SIGTERM (a graceful leave).

Rates per host bound the crawl (``--rate`` x ``--hosts`` pages/s at most), and this process serves the
web, so on a small machine the server and the nodes share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import loopback_port, node_toml, page_urls, start_node, until, wait_exit
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15 of stat)


async def one(n: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    spec = SiteSpec(hosts=args.hosts, pages_per_host=args.pages_per_host, seed=args.seed)
    async with TestWeb(spec, dns_process=True) as web:
        truth = web.ground_truth("host")
        with EtcdServer() as etcd:
            procs: list[subprocess.Popen[bytes]] = []
            try:
                for k in range(n):
                    host = f"127.0.0.{50 + k}"
                    conf = work / f"n{k}.toml"
                    conf.write_text(node_toml(web, work / f"n{k}", f"{host}:{loopback_port(host)}",
                                              etcd.endpoint, f"n{k}", "", rate=args.rate, ttl=args.ttl,
                                              interval=60.0))
                    procs.append(start_node(conf, work / f"n{k}.log"))
                await until(lambda: bool(web.log), args.within, "the first request")
                cpu_start, server_start = sum(cpu_seconds(p.pid) for p in procs), time.process_time()
                await until(lambda: set(page_urls(web)) >= truth, args.within, "every page")
                cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_start
                server = time.process_time() - server_start
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                try:
                    codes = [await wait_exit(p, 60) for p in procs]
                except AssertionError:  # say what the node that did not stop was doing
                    for k in range(n):
                        print(f"--- n{k}.log", *(work / f"n{k}.log").read_text().splitlines()[-15:],
                              sep="\n")
                    raise
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        pages = [r for r in web.log if r.target != "/robots.txt"]
        first = min(r.start for r in web.log)
        last = max(r.start for r in pages)
        fetched = Counter(page_urls(web))
        return {"nodes": n, "pages": len(truth), "seconds": last - first,
                "pages_per_s": len(truth) / (last - first), "cpu_ms_per_page": 1000 * cpu / len(truth),
                "server_ms_per_page": 1000 * server / len(truth),
                "twice": sum(1 for c in fetched.values() if c > 1),
                "violations": len(politeness_violations(web.log, web.min_intervals(args.rate))),
                "exit_codes_nonzero": sum(1 for c in codes if c != 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--pages-per-host", type=int, default=40)
    ap.add_argument("--rate", type=float, default=20.0, help="requests/s per host")
    ap.add_argument("--ttl", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--within", type=float, default=300.0)
    ap.add_argument("--runs", type=int, default=1, help="rounds of every --nodes count, in turn")
    args = ap.parse_args()
    print("| run | nodes | pages | seconds | pages/s | node CPU ms/page (all nodes) | server CPU ms/page | "
          "fetched twice | violations |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in range(args.runs):
        base = None
        for n in args.nodes:
            with tempfile.TemporaryDirectory(prefix="polecat-nodes-") as tmp:
                started = time.monotonic()
                r = asyncio.run(one(n, args, Path(tmp)))
            base = base or r["pages_per_s"]
            print(f"| {run + 1} | {n} | {r['pages']:.0f} | {r['seconds']:.1f} | {r['pages_per_s']:.0f} "
                  f"({r['pages_per_s'] / base:.2f}x) | {r['cpu_ms_per_page']:.2f} | "
                  f"{r['server_ms_per_page']:.2f} | {r['twice']:.0f} | {r['violations']:.0f} |", flush=True)
            took = time.monotonic() - started
            assert r["exit_codes_nonzero"] == 0, f"a node exited non-zero (run of {took:.0f} s)"


if __name__ == "__main__":
    main()
