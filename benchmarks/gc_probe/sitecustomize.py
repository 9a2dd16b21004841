"""Counts the cyclic collector's passes and their CPU time in every polecat crawl process started with
this directory first on PYTHONPATH, and appends one line per process to $GC_PROBE_OUT at exit:

    PYTHONPATH=benchmarks/gc_probe:. GC_PROBE_OUT=/tmp/gc.txt \\
        python -m benchmarks.compare --size small --runs 1 --runners polecat

(The harness's children inherit PYTHONPATH; Python imports ``sitecustomize`` at start-up.)

With ``GC_PROBE_LEAK=1`` it also measures what the frozen objects hold that only the collector frees
(polecat/runloop.py rule 8): at exit, a full pass, then everything unfrozen and a full pass again; the
objects the second frees are the cycles that became garbage after they were frozen, by type.
"""

import atexit
import gc
import os
import sys
import time
from collections import Counter

if "crawl" in sys.argv and os.environ.get("GC_PROBE_OUT"):
    _started = [0.0]
    _passes = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}

    def _time_pass(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started[0] = time.thread_time()
        else:
            stat = _passes[info["generation"]]
            spent = time.thread_time() - _started[0]
            stat[0] += 1
            stat[1] += spent
            stat[2] = max(stat[2], spent)

    def _leak() -> str:
        gc.callbacks.remove(_time_pass)
        plain = gc.collect()
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        gc.set_debug(gc.DEBUG_SAVEALL)
        freed = gc.collect()
        kinds = Counter(type(o).__qualname__ for o in gc.garbage).most_common(8)
        size = sum(map(sys.getsizeof, gc.garbage))
        return (f" at exit a full pass freed {plain}; of {frozen} objects frozen, a full pass once unfrozen "
                f"freed {freed} ({size} B by getsizeof): {kinds};")

    def _report() -> None:
        line = " ".join(f"gen{g}: {n} passes {s * 1e3:.0f} ms, longest {m * 1e3:.1f} ms;"
                        for g, (n, s, m) in _passes.items())
        line += f" thresholds {gc.get_threshold()}; process CPU {time.process_time():.2f} s;"
        if os.environ.get("GC_PROBE_LEAK"):
            line += _leak()
        with open(os.environ["GC_PROBE_OUT"], "a") as out:
            out.write(line + "\n")

    gc.callbacks.append(_time_pass)
    atexit.register(_report)
