"""How often a short 3-node crawl stalls, and on what: issue 35's 3-node crawl of ``bench_claims``, run
again and again, each run's node logs and server request log kept.

    python -m benchmarks.bench_stalls --runs 20 --out DIR
    python -m benchmarks.bench_stalls --runs 3 --dns-pause 1.5 --out DIR   # a nameserver's pause, forced

Each run crawls ``bench_claims``' web (200 hosts x 10 pages by default) to its last page with 3 etcd
nodes (:func:`benchmarks.bench_claims.crawl_by_nodes`) into ``DIR/run<k>-<claims>``: the nodes' logs,
and ``requests.json``, the server's log (``[wall, start, host, target, status]`` a request). A run whose
span from the first to the last request exceeds ``--stall`` seconds is a stall; its data dirs are kept,
as are those of a run with a page cut at the stop or lost (:func:`benchmarks.bench_claims.account_pages`;
the others' are deleted). One JSON line a run, also appended to ``DIR/results.jsonl``: span, requests,
pages/s (page requests over the span), the DNS queries the web's nameserver saw, robots.txt fetches the
nodes logged as failed (and of those, on DNS), the largest gap between two requests and when it began,
and the hosts first requested after it; the pages stored, and the URLs cut at the stop (still
queued), never asked for (queued), finished without a page, and lost.

``--dns-pause S`` holds every answer of the web's nameserver for ``S`` seconds from its
``--dns-pause-at``-th query on, as a starved nameserver does on a loaded machine (benchmarks/README.md
"A 3-node crawl that stalled ~60 s").
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_claims import crawl_by_nodes, site_spec, web_arguments
from polecat.testing.web import TestWeb

ROBOTS_FAILED = re.compile(r" INFO polecat: \S+/robots\.txt failed: (\S+)")
"""A robots.txt fetch a node logged as failed, and the first word of its reason (``dns:``...)."""


async def one_run(args: argparse.Namespace, claims: bool, work: Path) -> dict[str, Any]:
    """One crawl into ``work``: its JSON line (module docstring)."""
    async with TestWeb(site_spec(args)) as web:
        if args.dns_pause:
            web.dns.hold(args.dns_pause, args.dns_pause_at)
        _, codes, account = await crawl_by_nodes(web, 3, claims, args, work)
        dns_queries = sum(web.dns.queries.values())
        log = sorted(web.log, key=lambda r: r.start)
    rows = [[r.wall, r.start, r.host, r.target, r.status] for r in log]
    (work / "requests.json").write_text(json.dumps(rows))
    starts = [r.start - log[0].start for r in log]
    gap, after = max((b - a, i + 1) for i, (a, b) in enumerate(itertools.pairwise(starts)))
    late = sorted({r.host for r in log[after:]}) if gap > 1.0 else []
    logs = [(work / f"n{k}.log").read_text() for k in range(3)]
    failed = [m.group(1) for text in logs for m in ROBOTS_FAILED.finditer(text)]
    pages = sum(r.target != "/robots.txt" for r in log)
    return {"run": work.name, "claims": claims, "span": round(starts[-1], 2), "requests": len(log),
            "pages_per_s": round(pages / max(starts[-1], 1e-9)), "dns_queries": dns_queries,
            "robots_failed": len(failed), "robots_failed_dns": sum(f == "dns:" for f in failed),
            "gap": round(gap, 2), "gap_from": round(starts[after - 1], 2), "hosts_after_gap": len(late),
            "first_after_gap": late[:5], "codes": codes, "stored": account.stored, "cut": account.cut,
            "unasked": account.unasked, "failed": account.failed, "lost": account.lost}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_stalls", description=__doc__.split("\n")[0])
    web_arguments(ap, hosts=200, pages_per_host=10)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--minutes", type=float, default=0.0, help="start no run after this many (0: no limit)")
    ap.add_argument("--claims", choices=["on", "off", "both"], default="off")
    ap.add_argument("--stall", type=float, default=20.0, help="a run whose span exceeds this stalled")
    ap.add_argument("--dns-pause", type=float, default=0.0)
    ap.add_argument("--dns-pause-at", type=int, default=120)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + args.minutes * 60 if args.minutes else float("inf")
    stalls = losses = runs = 0
    for k in range(args.runs):
        for claims in {"on": [True], "off": [False], "both": [True, False]}[args.claims]:
            if time.monotonic() > end:
                break
            work = args.out / f"run{k:03d}-{'on' if claims else 'off'}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            load = Path("/proc/loadavg").read_text().split()[0]
            row = {**asyncio.run(one_run(args, claims, work)), "load": load}
            row["stalled"] = row["span"] > args.stall
            runs += 1
            stalls += row["stalled"]
            losses += bool(row["lost"])
            print(json.dumps(row), flush=True)
            with (args.out / "results.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            if not (row["stalled"] or row["cut"] or row["lost"]):
                for n in range(3):
                    shutil.rmtree(work / f"n{n}", ignore_errors=True)
    print(f"{stalls} of {runs} runs stalled (span > {args.stall:g} s)")
    print(f"{losses} of {runs} runs lost pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
