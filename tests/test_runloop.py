"""polecat.runloop: the loop and the collector settings of the processes polecat owns (run in a child
process: they are process-wide)."""

from __future__ import annotations

import ast
import gc
import os
import subprocess
import sys

import pytest

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


_FREEZE = """
import asyncio, gc, weakref
from polecat import runloop

class Node:
    pass

def listed(obj):
    return any(o is obj for o in gc.get_objects())

async def main():
    kept = Node()
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    before = listed(kept) and listed(a)
    gc.collect(0)  # a young pass: its survivors, the cycle alive among them, are frozen
    frozen = not listed(kept) and not listed(a)
    del a, b
    gc.collect(2)
    leaked = alive() is not None
    gc.unfreeze()
    gc.collect()
    return before, frozen, leaked, alive() is None, runloop.COLLECTOR.generations[0].passes

print(runloop.run(main()))
"""


def test_the_survivors_of_every_pass_are_frozen() -> None:
    """Rule 8: what survives a pass is frozen (no later pass traverses it), and so a cycle frozen alive
    is not freed when it dies, only once unfrozen (the price the rule measures). Rule 7 counted the
    young pass."""
    out = subprocess.run([sys.executable, "-c", _FREEZE], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    before, frozen, leaked, freed_unfrozen, young_passes = ast.literal_eval(out.strip())
    assert before and frozen
    assert leaked and freed_unfrozen
    assert young_passes >= 1


_TIMED = """
import asyncio
from polecat import runloop

runloop.YOUNG_EVERY = 0.05

async def main():
    await asyncio.sleep(0.5)  # next to no allocations: the count alone never calls a pass
    return runloop.COLLECTOR.generations[0].passes

print(runloop.run(main()))
"""


def test_a_young_pass_comes_every_young_every_seconds_however_few_allocations() -> None:
    """Rule 9: a program that allocates next to nothing still gets a young pass every YOUNG_EVERY seconds
    (here 0.05 s over 0.5 s: counted, with slack for a loaded machine, not timed)."""
    out = subprocess.run([sys.executable, "-c", _TIMED], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert 2 <= int(out.strip()) <= 10


_ALARM = """
import asyncio, sys, time
from polecat import runloop
from polecat.clock import SYSTEM_CLOCK

async def main(kind):
    loop, event = asyncio.get_running_loop(), asyncio.Event()
    clock = (runloop.TimerFdAlarmClock(loop) if kind == "timerfd" else
             runloop.LoopAlarmClock(loop, time.time))
    early = []
    late = []
    for gap in (0.0037, 0.0003, 0.0, -1.0, 0.0121) * 5:
        event.clear()
        start = time.time()
        until = start + gap
        # Lateness is measured against a reference: a plain loop timer for the same time, run by the
        # same loop. A loaded machine delays both alike (the process is not scheduled); a clock that
        # adds its own delay shows as the alarm's waiter waking well after the reference's callback.
        reference = loop.create_future()
        loop.call_at(loop.time() + (until - start), lambda: reference.set_result(time.time()))
        clock.set(until, event)
        await event.wait()
        now = time.time()
        early.append(now < until)
        late.append(now - max(await reference, until, start))
    # A long iteration before the alarm is armed (uvloop's clock is stale then): still never early.
    event.clear()
    time.sleep(0.01)
    until = time.time() + 0.002
    clock.set(until, event)
    await event.wait()
    early.append(time.time() < until)
    # A new time replaces the one set before.
    event.clear()
    clock.set(time.time() + 0.01, event)
    until = time.time() + 0.03
    clock.set(until, event)
    await event.wait()
    early.append(time.time() < until)
    # A time no timer can hold (inf, nan) waits for ever without an error, until replaced.
    event.clear()
    clock.set(float("inf"), event)
    clock.set(float("nan"), event)
    await asyncio.sleep(0.01)
    early.append(event.is_set())
    until = time.time() + 0.002
    clock.set(until, event)
    await event.wait()
    early.append(time.time() < until)
    # A cancelled alarm sets nothing, not even once its time has passed.
    event.clear()
    clock.set(time.time() + 0.005, event)
    clock.cancel()
    await asyncio.sleep(0.03)
    fired = event.is_set()
    clock.close()
    chosen = type(runloop.alarm_clock(loop, SYSTEM_CLOCK)).__name__
    return any(early), fired, sorted(late)[len(late) // 2] < 0.005, chosen

print(runloop.run(main(sys.argv[1])))
"""


@pytest.mark.parametrize("kind", ["loop", "timerfd"])
def test_an_alarm_never_wakes_its_waiter_early_even_on_uvloop(kind: str) -> None:
    if kind == "timerfd" and sys.platform != "linux":
        pytest.skip("timerfd is Linux's")
    out = subprocess.run([sys.executable, "-c", _ALARM, kind], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    # Never early, a cancelled alarm sets nothing, the median alarm was not late by more than 5 ms after a
    # loop timer for the same time (a clock that adds its own delay does it every time; a loaded machine
    # that deschedules the process between the two wakes does it now and then, which the median ignores),
    # and a crawl on Linux gets the kernel's timer.
    assert ast.literal_eval(out.strip()) == (False, False, True, "TimerFdAlarmClock")


def test_an_alarm_rearms_itself_while_the_time_has_not_come() -> None:
    """Driven by a wall clock that runs behind: each early timer re-arms, the event is set only once the
    clock says so, and the alarm's own callback does it (no waiter ran in between)."""
    import asyncio

    async def main() -> tuple[int, bool]:
        loop, event = asyncio.get_running_loop(), asyncio.Event()
        reads = [0]

        def wall() -> float:
            reads[0] += 1
            return 100.0 if reads[0] < 5 else 100.01  # four reads "too early", then the time has come

        runloop.LoopAlarmClock(loop, wall).set(100.01, event)
        await asyncio.wait_for(event.wait(), 5)
        return reads[0], event.is_set()

    assert asyncio.run(main()) == (5, True)


_CHURN = """
import os, resource, sys
from polecat.heap import keep_freed_heap

tuned = keep_freed_heap() if sys.argv[1] == "tuned" else False

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def page():
    # A page's transient blocks: some over 128 KiB, 6 MiB in all, freed together.
    blocks = [bytearray(200_000) for _ in range(30)]
    del blocks

page()
start = faults()
for _ in range(20):
    page()
print(tuned, (faults() - start) / 20)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator")
def test_keep_freed_heap_keeps_freed_memory_for_the_next_page() -> None:
    """Rule 5 (polecat/heap.py rule 2): blocks freed after a page are served again to the next without
    new page faults; left untuned, glibc gives them back and the kernel faults them in again (so the check
    can fail)."""
    def run(mode: str, env: dict[str, str] | None = None) -> tuple[bool, float]:
        out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True,
                             check=True, timeout=60, env=env).stdout.split()
        return out[0] == "True", float(out[1])

    tuned, tuned_faults = run("tuned")
    assert tuned and tuned_faults < 50
    untuned, untuned_faults = run("untuned")
    assert not untuned and untuned_faults > 1000  # 6 MiB are ~1,500 pages
    # An operator's own allocator settings win: then polecat sets nothing.
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "131072"}
    assert run("tuned", env) == (False, pytest.approx(untuned_faults, rel=0.5))


def test_collector_passes_are_recorded_by_generation() -> None:
    """Rule 7: each pass of the collector counts in its generation's record, once, and the summary line
    and /metrics read those records."""
    passes = runloop.CollectorPasses()
    passes.install()
    passes.install()  # once, however often installed
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        gc.callbacks.remove(passes)
    assert passes not in gc.callbacks
    assert [g.passes for g in passes.generations] == [1, 0, 2]
    assert all(g.longest <= g.seconds for g in passes.generations)
    assert passes.line().startswith("generation 0: 1 passes, ")
    assert "generation 2: 2 passes, " in passes.line()
