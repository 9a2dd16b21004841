"""Where two runs' CPU differs, by part of the code: reads the per-process samples that
benchmarks/cpu_sampler/ writes and prints, for the processes of a run with claims and of one without, the
samples of each part (a category of stack frames) and the difference per page.

    PYTHONPATH=benchmarks/cpu_sampler:. CPU_SAMPLE_OUT=/tmp/s1 timeout 900 \\
        python -m benchmarks.bench_claims --hosts 200 --pages-per-host 10 --workers 4 --without
    python -m benchmarks.cpu_parts /tmp/s1 [/tmp/s2 ...] --on data-4-1 --off data-4-0 --pages 1912

A run is the processes whose command line (or a parent's: the workers of ``polecat crawl --workers``)
holds ``--on`` or ``--off`` (bench_claims's data dirs ``data-N-1`` and ``data-N-0``, node clusters
``nodes-N-1`` and ``nodes-N-0``). A sample goes to start-up when it is inside an import, else to the part
of its innermost frame that a part names (so the claim code a transport's handler calls is claim code,
the transport's own framing is the transport's). A sample is worth the process's CPU seconds over its
samples.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

STARTUP = "start-up (imports; source compiled where no bytecode is cached)"
PARTS: list[tuple[str, str]] = [
    ("store put (segment append, WARC, delta)", r"polecat/store/"),
    ("claims stream (claimstream.py, aiohttp's WebSocket)",
     r"cluster/claimstream.py:|^aiohttp/(_websocket/|client_ws.py:|web_ws.py:|http_websocket.py:)"),
    ("HTTP transport (aiohttp, cluster/transport.py)", r"^aiohttp/|cluster/transport.py:"),
    ("signing and frame checks (auth.py, hmac, batch.py)", r"cluster/auth.py:|^hmac.py:|cluster/batch.py:"),
    ("claims: frame codec (claimwire.py, msgpack)", r"cluster/claimwire.py:|^msgpack/"),
    ("claims: books and queues (claims.py)", r"cluster/claims.py:"),
    ("claims: the runner (claimlink.py)", r"cluster/claimlink.py:"),
    ("unix socket transport (unixwire.py, asyncio streams)", r"cluster/unixwire.py:|^asyncio/streams.py:"),
    ("asyncio timers, tasks, events", r"^asyncio/(timeouts|tasks|locks|futures|base_events).py:"),
    ("commits (node/commits.py)", r"polecat/node/commits.py:"),
    ("frontier and leasing", r"polecat/frontier/|polecat/node/lease_runner.py:|polecat/node/leases.py:"),
    ("pipeline (parse, fingerprint, dedup)", r"polecat/node/pipeline.py:|polecat/parse/|polecat/dedup/"),
    ("fetch", r"polecat/fetch/"),
    ("event loop (uvloop's own work, lands on its run)", r"^asyncio/runners.py:run$"),
]
_IMPORT = re.compile(r"^<frozen importlib")
_PARTS = [(name, re.compile(pattern)) for name, pattern in PARTS]


def part_of(frames: list[str]) -> str:
    """The part a sample's stack (outermost frame first) is counted in (module docstring)."""
    if any(_IMPORT.search(f) for f in frames):
        return STARTUP
    for frame in reversed(frames):
        for name, pattern in _PARTS:
            if pattern.search(frame):
                return name
    return "other"


def load(dirs: list[Path]) -> list[dict[str, Any]]:
    """Every process record of ``dirs``, each with ``run``: the command lines of it and its parents."""
    records: list[dict[str, Any]] = []
    for d in dirs:
        by_pid = {r["pid"]: r for r in (json.loads(p.read_text()) for p in sorted(d.glob("*.json")))}
        for r in by_pid.values():
            line, parent = " ".join(r["argv"]), by_pid.get(r["ppid"])
            while parent is not None:
                line += " " + " ".join(parent["argv"])
                parent = by_pid.get(parent["ppid"])
            records.append({**r, "run": line})
    return records


def tally(records: list[dict[str, Any]], marker: str) -> tuple[collections.Counter[str], float, int]:
    """Samples by part, CPU seconds and samples of the processes of the run named by ``marker``."""
    parts: collections.Counter[str] = collections.Counter()
    cpu = 0.0
    samples = 0
    for r in records:
        if marker not in r["run"]:
            continue
        cpu += r["cpu"]
        for stack, n in r["stacks"].items():
            parts[part_of(stack.split(";"))] += n
            samples += n
    return parts, cpu, samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu_parts", description=__doc__.split("\n")[0])
    ap.add_argument("dirs", type=Path, nargs="+", help="CPU_SAMPLE_OUT directories, one per benchmark run")
    ap.add_argument("--on", default="data-4-1", help="what names the run with claims (default: 4 workers)")
    ap.add_argument("--off", default="data-4-0", help="what names the run without")
    ap.add_argument("--pages", type=int, default=1912, help="pages a run fetched (per run)")
    args = ap.parse_args(argv)
    records = load(args.dirs)
    on, cpu_on, n_on = tally(records, args.on)
    off, cpu_off, n_off = tally(records, args.off)
    if not n_on or not n_off:
        print("no samples for --on or --off", file=sys.stderr)
        return 1
    per = (cpu_on + cpu_off) / (n_on + n_off) * 1e6 / (len(args.dirs) * args.pages)  # us/page a sample
    extra = n_on - n_off
    print(f"{len(args.dirs)} runs; samples with {n_on:,} ({cpu_on:.1f} CPU s), without {n_off:,} "
          f"({cpu_off:.1f} CPU s); a sample is {per:.2f} us a page")
    print("| part | with, samples | without | difference | share of it | us a page |")
    print("|---|---|---|---|---|---|")
    for name in sorted(set(on) | set(off), key=lambda k: off[k] - on[k]):
        d = on[name] - off[name]
        print(f"| {name} | {on[name]:,} | {off[name]:,} | {d:+,} | {100 * d / max(1, abs(extra)):.0f} % | "
              f"{d * per:+.0f} |")
    steady_on, steady_off = n_on - on[STARTUP], n_off - off[STARTUP]
    print(f"| **all** | {n_on:,} | {n_off:,} | {extra:+,} | | {extra * per:+.0f} |")
    print(f"\nwithout start-up: {steady_on:,} against {steady_off:,} samples "
          f"({100 * (steady_on - steady_off) / max(1, steady_off):+.0f} %); with it "
          f"{100 * extra / n_off:+.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
