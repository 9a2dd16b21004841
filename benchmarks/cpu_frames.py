"""CPU under named frames: for each function given, the CPU of every sample with it on the stack (its
inclusive time) and of its callees, from the per-process samples benchmarks/cpu_sampler/ writes:

    PYTHONPATH=benchmarks/cpu_sampler:. CPU_SAMPLE_OUT=/tmp/s1 timeout 900 \\
        python -m benchmarks.bench_scale --hosts 100000 --max-pages 60000 --every 30
    python -m benchmarks.cpu_frames /tmp/s1 polecat/node/lease_runner.py:_robots_fetch=10898 \\
        polecat/node/lease_runner.py:_page_fetch=60000

A frame is ``path:function`` as the sampler names it, or ``path:*`` for any function of a module (a
sample counted once however many of its functions it holds); ``=N`` divides its CPU by N calls (the
requests of that kind the server saw) to give microseconds a call. ``--run MARKER`` keeps the processes
whose command line (or a parent's) holds MARKER (default: `` crawl ``, the node of ``polecat crawl``). A
sample is worth its process's CPU seconds over its samples; a frame that recurses is counted once a sample.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from benchmarks.cpu_parts import load


def under(stacks: dict[str, int], frame: str) -> tuple[int, collections.Counter[str]]:
    """Samples with ``frame`` on the stack, and how many of them each of its direct callees holds."""
    prefix = frame[:-1] if frame.endswith(":*") else None
    total = 0
    callees: collections.Counter[str] = collections.Counter()
    for stack, n in stacks.items():
        frames = stack.split(";")
        at = next((i for i, f in enumerate(frames) if f.startswith(prefix)), -1) if prefix else (
            frames.index(frame) if frame in frames else -1)
        if at < 0:
            continue
        total += n
        callees[frames[at + 1] if at + 1 < len(frames) else "(its own code)"] += n
    return total, callees


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu_frames", description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="a CPU_SAMPLE_OUT directory")
    ap.add_argument("frames", nargs="+", metavar="PATH:FUNCTION[=CALLS]")
    ap.add_argument("--run", default=" crawl ", help="what names the processes to read")
    ap.add_argument("--callees", type=int, default=8, help="callees shown a frame")
    args = ap.parse_args(argv)
    records = [r for r in load([args.dir]) if args.run in r["run"]]
    stacks: collections.Counter[str] = collections.Counter()
    cpu = 0.0
    for r in records:
        cpu += r["cpu"]
        stacks.update(r["stacks"])
    samples = sum(stacks.values())
    if not samples:
        print(f"no samples of a process naming {args.run!r} in {args.dir}", file=sys.stderr)
        return 1
    each = cpu / samples
    print(f"{len(records)} processes, {cpu:.2f} CPU s in {samples:,} samples ({each * 1e3:.2f} ms a sample)")
    for spec in args.frames:
        frame, _, calls = spec.partition("=")
        n, callees = under(stacks, frame)
        per = f", {n * each / int(calls) * 1e6:.1f} us a call of {int(calls):,}" if calls else ""
        print(f"{frame}: {n:,} samples, {n * each:.2f} s ({100 * n / samples:.1f} %){per}")
        for callee, k in callees.most_common(args.callees):
            per_call = f", {k * each / int(calls) * 1e6:.1f} us a call" if calls else ""
            print(f"    {callee}: {k:,} samples, {k * each:.2f} s{per_call}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
