"""polecat.runloop: the loop and the collector settings of the processes polecat owns (run in a child
process: they are process-wide)."""

from __future__ import annotations

import ast
import subprocess
import sys

from polecat import runloop

_CHILD = """
import asyncio, gc, weakref
from polecat import runloop

class Node:
    pass

async def main():
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    alive = weakref.ref(a)
    del a, b
    # Tracked objects kept alive advance the young generation's count (freed ones take it back).
    kept = [[] for _ in range(2 * runloop.GC_THRESHOLDS[0])]
    del kept
    return (gc.get_threshold(), gc.get_freeze_count(), type(asyncio.get_running_loop()).__module__,
            alive() is None)

print(runloop.run(main()))
"""


def test_run_freezes_startup_objects_collects_less_often_and_still_frees_cycles() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    thresholds, frozen, loop_module, cycle_freed = ast.literal_eval(out.strip())
    assert thresholds == runloop.GC_THRESHOLDS
    assert frozen > 1000  # the modules imported before the loop started
    assert loop_module.startswith("uvloop")
    assert cycle_freed
