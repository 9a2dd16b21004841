"""Which steps hold the event loop of ``polecat crawl`` (issue 39: no step over 50 ms), by the CPU time
of the loop's thread, not by wall time (a loaded machine stretches a step; it does not add CPU to it).

    python -m benchmarks.stall_profile OUT NOFILE polecat-args...

runs ``polecat`` with ``polecat-args`` (``crawl ...``) under RLIMIT_NOFILE ``NOFILE`` (0: unchanged) on
asyncio's own event loop, not uvloop: its handles are Python objects whose runs can be timed. Each step
(one handle run: a task's step or a callback) is timed with ``time.thread_time``; those of
:data:`STEP` or more are kept by what ran (the task's coroutine, or the callback), with stack samples a
watch thread takes every :data:`SAMPLE_EVERY` while a step has run :data:`SAMPLE_AFTER` (the innermost
polecat frames). Each loop iteration is timed too (its ready handles run back to back, so a timer is
late by their sum), and each collection of the cyclic garbage collector on the loop's thread. At exit
the profile is written to ``OUT`` as JSON; ``python -m benchmarks.bench_scale --stall-profile OUT``
runs its crawl this way and prints :func:`report`. The steps' own Python frames are slower to run than
under uvloop; what they do is the same.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.events
import atexit
import gc
import json
import resource
import runpy
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

STEP = 0.02
"""Seconds of the loop thread's CPU from which a step is kept."""
ITERATION = 0.03
"""Seconds of the loop thread's CPU from which a loop iteration is kept."""
SAMPLE_AFTER = 0.015
"""Seconds (wall) a step has run before the watch thread samples its stack."""
SAMPLE_EVERY = 0.003
"""Seconds between two stack samples of a long step."""
GC_KEPT = 0.005
"""Seconds of CPU from which a collection of the garbage collector is kept."""


class StallProfile:
    """The steps, iterations and collections of the loop's thread, as :mod:`this module <stall_profile>`
    says."""

    def __init__(self) -> None:
        self.loop_thread = threading.get_ident()
        self.steps: defaultdict[str, list[float]] = defaultdict(list)
        self.samples: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.iterations: list[tuple[float, list[tuple[float, int, str]]]] = []
        self.iteration_parts: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        """What the iterations of 50 ms or more ran, summed: handles and CPU by what ran, and the loop's own
        part (``loop``: its selector, its events and timers made into handles)."""
        self.collections: list[tuple[int, float]] = []
        self._in_iteration: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self._step_began = 0.0
        self._step_samples: Counter[str] | None = None
        self._gc_began = 0.0
        self._watching = False
        self._run_handle = asyncio.events.Handle._run
        self._run_once = asyncio.base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def install(self) -> None:
        """Time every handle and iteration of asyncio's loop from now on; start the watch thread."""
        run_handle, run_once = self._run_handle, self._run_once
        profile = self

        def timed_handle(handle: asyncio.Handle) -> None:
            began = time.thread_time()
            profile._step_began, profile._step_samples = time.perf_counter(), Counter()
            try:
                run_handle(handle)
            finally:
                profile._step_began = 0.0
                profile._ran(handle, time.thread_time() - began)

        def timed_iteration(loop: asyncio.AbstractEventLoop) -> None:
            profile._in_iteration.clear()
            began = time.thread_time()
            run_once(loop)
            spent = time.thread_time() - began
            if spent >= ITERATION:
                parts = sorted(((cpu, int(n), what) for what, (n, cpu) in profile._in_iteration.items()),
                               reverse=True)
                profile.iterations.append((spent, parts[:4]))
                if spent >= 0.05:
                    loop_part = profile.iteration_parts["loop"]
                    loop_part[0] += 1
                    loop_part[1] += spent - sum(cpu for cpu, _, _ in parts)
                    for cpu, n, what in parts:
                        summed = profile.iteration_parts[what]
                        summed[0] += n
                        summed[1] += cpu

        asyncio.events.Handle._run = timed_handle  # type: ignore[method-assign,assignment]
        asyncio.base_events.BaseEventLoop._run_once = timed_iteration  # type: ignore[attr-defined]
        gc.callbacks.append(self._collected)
        self._watching = True
        threading.Thread(target=self._watch, name="stall-profile", daemon=True).start()

    def uninstall(self) -> None:
        """Undo :meth:`install` (the watch thread ends within one sample)."""
        asyncio.events.Handle._run = self._run_handle  # type: ignore[method-assign]
        asyncio.base_events.BaseEventLoop._run_once = self._run_once  # type: ignore[attr-defined]
        gc.callbacks.remove(self._collected)
        self._watching = False

    def _ran(self, handle: asyncio.Handle, cpu: float) -> None:
        what = _what(handle)  # every handle, short ones too: an iteration of many short steps is one stall
        part = self._in_iteration[what]
        part[0] += 1
        part[1] += cpu
        if cpu >= STEP:
            self.steps[what].append(cpu)
            if self._step_samples is not None:
                self.samples[what].update(self._step_samples)

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self.loop_thread:
            return
        if phase == "start":
            self._gc_began = time.thread_time()
        elif (spent := time.thread_time() - self._gc_began) >= GC_KEPT:
            self.collections.append((int(info["generation"]), spent))

    def _watch(self) -> None:
        while self._watching:
            time.sleep(SAMPLE_EVERY)
            began, samples = self._step_began, self._step_samples
            if began and samples is not None and time.perf_counter() - began > SAMPLE_AFTER:
                frame = sys._current_frames().get(self.loop_thread)
                if frame is not None:
                    samples[_where(frame)] += 1

    def as_dict(self) -> dict[str, Any]:
        """The profile as JSON data: steps by what ran (count, count of 50 ms or more, max and median
        ms, the commonest stack samples), the longest iterations, the collections kept."""
        steps = {}
        for what, cpus in sorted(self.steps.items(), key=lambda item: -sum(item[1])):
            cpus = sorted(cpus)
            steps[what] = {"count": len(cpus), "over_50ms": sum(c >= 0.05 for c in cpus),
                           "max_ms": round(cpus[-1] * 1000, 1),
                           "median_ms": round(cpus[len(cpus) // 2] * 1000, 1),
                           "where": self.samples[what].most_common(6)}
        iterations = sorted(self.iterations, reverse=True)
        return {"steps": steps, "iterations_over_50ms": sum(s >= 0.05 for s, _ in iterations),
                "iterations_over_30ms": len(iterations),
                "longest_iterations": [[round(s * 1000, 1), [[round(c * 1000, 1), n, w] for c, n, w in parts]]
                                       for s, parts in iterations[:20]],
                "iteration_parts_over_50ms": {what: [int(n), round(cpu * 1000, 1)] for what, (n, cpu) in
                                              sorted(self.iteration_parts.items(), key=lambda kv: -kv[1][1])},
                "collections_over_5ms": [[g, round(s * 1000, 1)] for g, s in self.collections]}


def _what(handle: asyncio.Handle) -> str:
    """What a handle runs: ``task NAME`` (its coroutine's qualified name) or ``callback NAME``."""
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return "task " + getattr(coro, "__qualname__", repr(coro))
    return "callback " + (getattr(callback, "__qualname__", None) or type(callback).__name__)


def _where(frame: FrameType) -> str:
    """The innermost three polecat frames of a stack, innermost first, and the innermost frame of all."""
    inner = f"{frame.f_code.co_qualname} {Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
    ours: list[str] = []
    at: FrameType | None = frame
    while at is not None and len(ours) < 3:
        name = at.f_code.co_filename
        if "/polecat/" in name:
            ours.append(f"{at.f_code.co_qualname} {name.rsplit('/polecat/', 1)[1]}:{at.f_lineno}")
        at = at.f_back
    return " < ".join(ours) + " || " + inner


def report(path: Path) -> list[str]:
    """Lines that say what the profile at ``path`` found (for bench_scale)."""
    data = json.loads(path.read_text())
    lines = [f"stall profile (asyncio's loop; the loop thread's CPU): {data['iterations_over_50ms']} loop "
             f"iterations of 50 ms or more ({data['iterations_over_30ms']} of 30 ms or more); steps of "
             f"{STEP * 1000:.0f} ms or more:"]
    for what, step in data["steps"].items():
        lines.append(f"  {what}: {step['count']} (of 50 ms or more {step['over_50ms']}), max "
                     f"{step['max_ms']} ms, median {step['median_ms']} ms")
        lines += [f"      {n} x {where}" for where, n in step["where"][:3]]
    parts = data.get("iteration_parts_over_50ms", {})
    if parts:
        lines.append("  what the iterations of 50 ms or more ran (handles, CPU in all): " + "; ".join(
            f"{what} {n}, {ms:.0f} ms" for what, (n, ms) in list(parts.items())[:8]))
    collections = data["collections_over_5ms"]
    if collections:
        lines.append(f"  garbage collections of 5 ms or more: {len(collections)}, the longest "
                     f"{max(ms for _, ms in collections)} ms")
    return lines


def main() -> None:
    out, nofile = Path(sys.argv[1]), int(sys.argv[2])
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    sys.modules["uvloop"] = None  # type: ignore[assignment]  # polecat.runloop falls back to asyncio's loop
    profile = StallProfile()
    profile.install()
    atexit.register(lambda: out.write_text(json.dumps(profile.as_dict(), indent=1)))
    sys.argv = ["polecat", *sys.argv[3:]]
    runpy.run_module("polecat", run_name="__main__")


if __name__ == "__main__":
    main()
