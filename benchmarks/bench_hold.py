"""What the hold costs at a join (ownership rule 11): every slice a node gains waits the old owner's
abort bound (``ABORT_BOUND``, 1 s) before its hosts' first request.

    python -m benchmarks.bench_hold --hosts 24 --pages-per-host 60 --rate 5 --runs 2

For each run, with the hold (the release) and without it (the same nodes with
``polecat.processes.machine.ABORT_BOUND`` set to 0, started as ``python -m benchmarks.bench_hold
--node``): two ``polecat node`` processes crawl a generated web; once a third of its pages are fetched
a third node joins. Measured at the server: for each host the join moved to the newcomer (the Ring of
two members against that of three), the pause of the move (the longest gap between two requests to the
host once the third node started), against the same for the hosts that stayed; the seconds from the
join to the last page; pages fetched twice; politeness violations (must be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from polecat.cluster.ring import Ring
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import (
    cluster_confs,
    kill_rest,
    page_urls,
    stop_all,
    until,
)
from polecat.testing.serverlog import RequestRecord, politeness_violations
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb

NODES = ("b0", "b1", "b2")


def start(conf: Path, log: Path, hold: bool) -> subprocess.Popen[bytes]:
    """``polecat node --config conf``, the hold patched out unless ``hold``."""
    env = {**os.environ, "POLECAT_CLUSTER_SECRET": "the secret of the hold benchmark"}
    head = ["-m", "polecat"] if hold else ["-m", "benchmarks.bench_hold", "--node"]
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, *head, "node", "--config", str(conf), "--log-level", "info"],
                                env=env, stderr=out)


def pauses(log: list[RequestRecord], hosts: set[str], since: float) -> list[float]:
    """Per host of ``hosts``, the longest gap between two of its page requests, the later one after
    ``since``."""
    starts: dict[str, list[float]] = defaultdict(list)
    for r in log:
        if r.host in hosts and r.target != "/robots.txt":
            starts[r.host].append(r.start)
    out = []
    for host in hosts:
        s = sorted(starts[host])
        gaps = [b - a for a, b in itertools.pairwise(s) if b > since]
        if gaps:
            out.append(max(gaps))
    return out


async def one(hold: bool, args: argparse.Namespace, work: Path) -> dict[str, float]:
    spec = SiteSpec(hosts=args.hosts, pages_per_host=args.pages_per_host, seed=args.seed)
    async with TestWeb(spec, dns_process=True) as web:
        truth = web.ground_truth("host")
        names = {host_key(u): u.split("//")[1].split(":")[0] for u in truth}
        before, after = Ring(NODES[:2]), Ring(NODES)
        moved = {names[h] for h in names if before.owner(slice_of(h)) != after.owner(slice_of(h))}
        with EtcdServer() as etcd:
            confs = cluster_confs(web, etcd.endpoint, work, NODES, first_ip=100, rate=args.rate, ttl=args.ttl)
            logs = {n: work / f"{n}.log" for n in NODES}
            procs = {n: start(confs[n], logs[n], hold) for n in NODES[:2]}
            try:
                await until(lambda: len(set(page_urls(web))) >= len(truth) // 3, args.within, "a third")
                joined = time.monotonic()
                procs[NODES[2]] = start(confs[NODES[2]], logs[NODES[2]], hold)
                await until(lambda: set(page_urls(web)) >= truth, args.within, "every page")
                end = max(r.start for r in web.log)
                await stop_all(procs, logs)
            finally:
                kill_rest(procs.values())
        log = web.log
        stayed = set(names.values()) - moved
        fetched = Counter(page_urls(web))
        return {"moved": len(moved), "moved_pause": statistics.median(pauses(log, moved, joined)),
                "stayed_pause": statistics.median(pauses(log, stayed, joined)), "to_end": end - joined,
                "twice": sum(c > 1 for c in fetched.values()),
                "violations": len(politeness_violations(log, web.min_intervals(args.rate)))}


def main() -> None:
    if sys.argv[1:2] == ["--node"]:  # a node without the hold (ownership rule 11's ABORT_BOUND at 0)
        import polecat.processes.machine as machine
        from polecat.commands.main import main as polecat

        vars(machine)["ABORT_BOUND"] = 0.0
        sys.argv = ["polecat", *sys.argv[2:]]
        sys.exit(polecat())
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=24)
    ap.add_argument("--pages-per-host", type=int, default=60)
    ap.add_argument("--rate", type=float, default=5.0, help="requests/s per host")
    ap.add_argument("--ttl", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--within", type=float, default=300.0)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    print("| run | hold | hosts moved | median pause of a moved host (s) | of a host that stayed (s) | "
          "join to last page (s) | fetched twice | violations |")
    print("|---|---|---|---|---|---|---|---|")
    for run in range(args.runs):
        for hold in (True, False):
            with tempfile.TemporaryDirectory(prefix="polecat-hold-") as tmp:
                r = asyncio.run(one(hold, args, Path(tmp)))
            print(f"| {run + 1} | {'yes' if hold else 'no'} | {r['moved']:.0f} | {r['moved_pause']:.2f} | "
                  f"{r['stayed_pause']:.2f} | {r['to_end']:.1f} | {r['twice']:.0f} | {r['violations']:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
