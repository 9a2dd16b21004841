"""How a polecat process runs its event loop: uvloop where it is installed, and the cyclic garbage
collector set for a crawl.

Rules (for the processes polecat owns: ``polecat crawl``, ``polecat node``, ``--workers`` children; a
program embedding :class:`polecat.Crawler` keeps its own loop and collector):

1. uvloop when importable (a dependency wherever it builds), else asyncio's own loop.
2. What is alive when the loop starts (modules, configuration, compiled patterns) is collected once,
   then frozen out of the collector (``gc.freeze``): no later collection traverses it again.
3. The youngest generation is collected every :data:`GC_THRESHOLDS` ``[0]`` net allocations of tracked
   objects instead of Python's 700. A crawl allocates ~100 such objects a page and keeps few, so at 700
   the collector ran ~130 times a second of crawling and its ~10 full collections per 10,000 pages each
   held the event loop ~18 ms (benchmarks/README.md, "Garbage collection"). Cycles are still freed:
   young ones at the next young pass, older ones by the middle and old generations' passes, which
   keep Python's rule of running every ``GC_THRESHOLDS[1]`` and ``[2]`` passes of the one below.
4. A wait for a wall-clock time is an :class:`Alarm`. uvloop counts a timer in whole milliseconds from
   the time it read when its current iteration began, so a timer fires up to a millisecond and a half
   early (more after a long iteration). A loop woken that early by a plain timer found its host not yet
   due and slept again, each round for under a millisecond: ~11 rounds a page, each a call into the
   frontier (benchmarks/README.md, "Issue 17, sixth pass"). The alarm re-arms itself for what is left,
   in its callback, and wakes its waiter only once the time has come: as precise as before, at the cost
   of a timer handle a round. (Rounding the delay up instead, so that no timer fires early, made each
   wait ~0.75 ms late and a politeness-paced crawl of five hosts 13 % slower.)
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["GC_THRESHOLDS", "Alarm", "run"]

T = TypeVar("T")

GC_THRESHOLDS = (50_000, 20, 10)
"""``gc.set_threshold`` arguments: the young generation every 50,000 net allocations (~500 pages), the
middle one every 20 young passes, the old one every 10 middle passes (and only once the objects that
survived into it since its last pass are a quarter of it, Python's own rule)."""


class Alarm:
    """Sets ``event`` once ``wall()`` reaches ``until`` (rule 4); :meth:`cancel` before it is dropped."""

    __slots__ = ("_event", "_handle", "_loop", "_until", "_wall")

    def __init__(self, loop: asyncio.AbstractEventLoop, wall: Callable[[], float], until: float,
                 event: asyncio.Event) -> None:
        self._loop, self._wall, self._until, self._event = loop, wall, until, event
        self._handle = loop.call_later(max(0.0, until - wall()), self._fire)

    def _fire(self) -> None:
        left = self._until - self._wall()
        if left > 0:
            self._handle = self._loop.call_later(left, self._fire)
        else:
            self._event.set()

    def cancel(self) -> None:
        self._handle.cancel()


def tune_gc() -> None:
    """Rules 2 and 3: freeze what exists now, then collect the young generation less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop (rule 1), with the collector set (rules 2, 3)."""
    tune_gc()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(main)
    return uvloop.run(main)
