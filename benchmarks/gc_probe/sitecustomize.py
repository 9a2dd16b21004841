"""Counts the cyclic collector's passes and their CPU time in every polecat crawl process started with
this directory first on PYTHONPATH, and appends one line per process to $GC_PROBE_OUT at exit:

    PYTHONPATH=benchmarks/gc_probe:. GC_PROBE_OUT=/tmp/gc.txt \\
        python -m benchmarks.compare --size small --runs 1 --runners polecat

(The harness's children inherit PYTHONPATH; Python imports ``sitecustomize`` at start-up.)
"""

import atexit
import gc
import os
import sys
import time

if "crawl" in sys.argv and os.environ.get("GC_PROBE_OUT"):
    _started = [0.0]
    _passes = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}

    def _time_pass(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started[0] = time.thread_time()
        else:
            stat = _passes[info["generation"]]
            stat[0] += 1
            stat[1] += time.thread_time() - _started[0]

    def _report() -> None:
        line = " ".join(f"gen{g}: {n} passes {s * 1e3:.0f} ms;" for g, (n, s) in _passes.items())
        with open(os.environ["GC_PROBE_OUT"], "a") as out:
            out.write(f"{line} thresholds {gc.get_threshold()}; process CPU {time.process_time():.2f} s\n")

    gc.callbacks.append(_time_pass)
    atexit.register(_report)
