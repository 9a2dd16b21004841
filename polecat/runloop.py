"""How a polecat process runs its event loop: uvloop where it is installed, and the cyclic garbage
collector and the C allocator set for a crawl.

Rules (for the processes polecat owns: ``polecat crawl``, ``polecat node``, ``--workers`` children; a
program embedding :class:`polecat.Crawler` keeps its own loop and collector):

1. uvloop when importable (a dependency wherever it builds), else asyncio's own loop.
2. What is alive when the loop starts (modules, configuration, compiled patterns) is collected once,
   then frozen out of the collector (``gc.freeze``): no later collection traverses it again.
3. The youngest generation is collected every :data:`GC_THRESHOLDS` ``[0]`` net allocations of tracked
   objects instead of Python's 700. A crawl allocates ~100 such objects a page and keeps few, so at 700
   the collector ran ~130 times a second of crawling and its ~10 full collections per 10,000 pages each
   held the event loop ~18 ms (benchmarks/README.md, "Garbage collection"). Cycles are still freed
   when they die before the next pass (rule 8 freezes what survives one). 20,000, not the 50,000 of
   before: a young
   pass traverses every object allocated since the last and still alive (up to ~130,000 at 50,000,
   as the deaths of older objects count against the allocations), 46-70 ms of a 1M-host breadth
   crawl's loop (benchmarks/README.md, "Issue 39: the collector's full passes").
4. A wait for a wall-clock time is an alarm from :func:`alarm_clock`. uvloop counts a timer in whole
   milliseconds from the time it read when its current iteration began, so a timer fires up to a
   millisecond and a half early (more after a long iteration). A loop woken that early found its host
   not yet due and slept again: ~11 rounds a page (benchmarks/README.md, "Issue 17, sixth pass").
   :class:`LoopAlarmClock` re-arms its loop timer for what is left until the time has come: precise,
   but a remainder under half a millisecond rounds to a zero-delay timer, so the loop spins through
   empty iterations for it: 30-300 us of CPU a wait by where the time falls (benchmarks/bench_alarm.py),
   ~70 fires a page on the real web. :class:`TimerFdAlarmClock` (Linux, the system clock) hands the
   time to the kernel: a timerfd on ``CLOCK_REALTIME`` armed at the absolute time, watched by the loop,
   wakes it once, at the time plus the kernel's timer slack (~50 us), never before. (Rounding each
   delay up to whole milliseconds instead made each wait ~0.75 ms late and a politeness-paced crawl of
   five hosts 13 % slower.)
5. glibc's heap keeps the memory a page freed for the next page (polecat/heap.py rule 2,
   :func:`~polecat.heap.keep_freed_heap`): given back and faulted in again, it cost 2-32 page faults a
   page.
6. A task that works through a backlog in one step of the loop (leases, held page completions) counts
   its items in a :class:`StepBudget` and gives the loop a turn once the step has done its most or spent
   its seconds on the node's clock (polecat/node/leases.py rule 6, commits.py rule 10).
7. Every pass of the collector is recorded by generation (:data:`COLLECTOR`, a ``gc.callbacks`` entry
   installed with rules 2-3): passes, CPU seconds of the thread it ran on, the longest. Whichever thread
   a pass runs on, it holds the GIL, so the event loop waits for all of it: the summary of ``polecat
   crawl`` and ``/metrics`` show them (issue 39: a full pass held a 1M-host breadth crawl's loop 823 ms).
8. After each pass, everything alive is frozen (``gc.freeze``, as rule 2 does once): what survived a
   pass is mostly the node's long-lived state (host records, cached answers, idle connections), which
   grows with the hosts met, and no later pass traverses it. So no pass traverses more than what was
   allocated since the last one and is still alive, where a middle pass over the state of a
   100,000-page crawl took 98-145 ms, a full one over a million-page crawl's 823 ms, and middle passes
   over two to five young passes' survivors, frozen at each middle pass only, up to 69.5-127.7 ms. The
   price: a cycle among frozen objects that becomes garbage is never freed. The crawl's own cycles die
   young (polecat/frontier/outcomes.py rule 5, polecat/fetch/pool.py rule 4 and http.py cut those of
   failed requests); the frozen garbage was measured (benchmarks/README.md, "Issue 39: the collector's
   full passes": what a full pass frees once everything is unfrozen at the end of a crawl), and the
   frozen count is shown with rule 7's passes.
9. A young pass at least every :data:`YOUNG_EVERY` seconds (a task :func:`run` starts beside the
   program): the collector counts allocations net of deaths, and the deaths of frozen objects (records
   dropped from the working set, cached answers expired) count against the allocations of what replaces
   them, so in a crawl whose state churns more than it grows the count hardly moves while the young
   generation fills: ~81,500 young objects at 963 s of a million-page crawl, young passes of up to 63 ms
   (benchmarks/README.md, "Issue 39: the collector's full passes"). A timed pass traverses what the
   last seconds left alive, then freezes it (rule 8).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import math
import os
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from polecat.clock import Clock, SystemClock
from polecat.heap import keep_freed_heap

__all__ = ["COLLECTOR", "GC_THRESHOLDS", "AlarmClock", "CollectorPasses", "LoopAlarmClock",
           "TimerFdAlarmClock", "alarm_clock", "run"]

T = TypeVar("T")

GC_THRESHOLDS = (20_000, 10, 10)
"""``gc.set_threshold`` arguments (rules 3 and 8): the young generation every 20,000 net allocations (~200
pages); the middle and old ones every 10 passes of the one below (Python's defaults), which never come:
the freeze after each pass (rule 8) empties their generations and resets the counts of passes."""


YOUNG_EVERY = 2.0
"""Seconds between two young passes at most (rule 9)."""


_FOREVER = 2.0**32
"""Unix seconds (year 2106) no alarm waits past: within any timespec's range and uvloop's longest timer."""


def _capped(until: float) -> float:
    """``until``, or :data:`_FOREVER` for a time no timer holds (later, inf, nan): such alarms wait for
    ever, without an error, on both clocks."""
    return until if until < _FOREVER else _FOREVER


class AlarmClock(Protocol):
    """Sets an event once the wall clock reaches a time (rule 4): one alarm at a time."""

    def set(self, until: float, event: asyncio.Event) -> None:
        """Set ``event`` once ``wall() >= until``; replaces the alarm set before, if any."""
        ...

    def cancel(self) -> None:
        """The alarm set, if any, sets nothing."""
        ...

    def close(self) -> None:
        """Cancel, and release what the clock holds (a file descriptor)."""
        ...


class LoopAlarmClock:
    """An alarm on the loop's own timers, re-armed for what is left while the time has not come: any
    loop, any clock (tests drive it with a fake one)."""

    __slots__ = ("_event", "_handle", "_loop", "_until", "_wall")

    def __init__(self, loop: asyncio.AbstractEventLoop, wall: Callable[[], float]) -> None:
        self._loop, self._wall = loop, wall
        self._handle: asyncio.TimerHandle | None = None
        self._event: asyncio.Event | None = None
        self._until = 0.0

    def set(self, until: float, event: asyncio.Event) -> None:
        self.cancel()
        until = _capped(until)
        self._until, self._event = until, event
        self._handle = self._loop.call_later(max(0.0, until - self._wall()), self._fire)

    def _fire(self) -> None:
        left = self._until - self._wall()
        if left > 0:
            self._handle = self._loop.call_later(left, self._fire)
        elif self._event is not None:
            self._event.set()
            self._handle = self._event = None

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._event = None

    def close(self) -> None:
        self.cancel()


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


_CLOCK_REALTIME = 0
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class TimerFdAlarmClock:
    """An alarm the kernel keeps: a ``CLOCK_REALTIME`` timerfd armed at the absolute time (the wall
    clock is ``time.time()``, the same clock), read by the loop when it fires. Linux only:
    :func:`alarm_clock` falls back where it cannot be made."""

    __slots__ = ("_armed", "_event", "_fd", "_loop", "_settime", "_spec", "_until")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols (see polecat/heap.py)
        settime = libc.timerfd_settime
        settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p)
        fd = libc.timerfd_create(_CLOCK_REALTIME, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        try:
            loop.add_reader(fd, self._fire)
        except BaseException:
            os.close(fd)
            raise
        self._loop, self._fd, self._settime = loop, fd, settime
        self._spec = _Itimerspec()
        self._event: asyncio.Event | None = None
        self._until = 0.0
        self._armed = False

    def _arm(self, until: float) -> None:
        value = self._spec.it_value
        sec = math.floor(until)
        # Up to the next whole nanosecond: the kernel fires at or after it, never before ``until``.
        value.tv_sec, value.tv_nsec = sec, min(999_999_999, math.ceil((until - sec) * 1e9))
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._armed = until > 0

    def set(self, until: float, event: asyncio.Event) -> None:
        until = _capped(until)
        self._until, self._event = until, event
        self._arm(max(until, 1e-9))  # 0 would disarm the timer; a time long past fires at once all the same

    def _fire(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed or disarmed after the expiry was seen: nothing is due
            return
        self._armed = False
        if self._event is None:
            return
        # Read directly, not through a Clock: this alarm exists only for SYSTEM_CLOCK (alarm_clock) and
        # must compare with the very clock its timerfd counts, CLOCK_REALTIME, which time.time() reads.
        if time.time() < self._until:  # a float reading of the kernel's nanoseconds, a hair below
            self._arm(self._until)
            return
        self._event.set()
        self._event = None

    def cancel(self) -> None:
        self._event = None
        if self._armed:
            self._arm(0.0)  # an all-zero it_value disarms

    def close(self) -> None:
        self.cancel()
        self._loop.remove_reader(self._fd)
        os.close(self._fd)


class StepBudget:
    """The items done in one step of the event loop and when it began (rule 6): at most ``most`` items
    or ``seconds`` on ``clock`` a step."""

    def __init__(self, clock: Clock, most: int, seconds: float) -> None:
        self._clock = clock
        self._most = most
        self._seconds = seconds
        self.began = clock.monotonic()
        self.done = 0

    def begin(self) -> None:
        """The loop gave the other tasks a turn: a new step begins."""
        self.began, self.done = self._clock.monotonic(), 0

    def spent(self) -> bool:
        """Count one item; whether the step has done its most or used its time."""
        self.done += 1
        return self.done >= self._most or self._clock.monotonic() - self.began >= self._seconds


def alarm_clock(loop: asyncio.AbstractEventLoop, clock: Clock) -> AlarmClock:
    """The alarm clock for ``loop`` and ``clock`` (rule 4): the kernel's timer where it can be had
    (Linux, the system clock, a loop that watches file descriptors), else the loop's own timers."""
    if isinstance(clock, SystemClock) and sys.platform == "linux":
        try:
            return TimerFdAlarmClock(loop)
        except (OSError, AttributeError, NotImplementedError):  # no timerfd, or a loop without readers
            pass
    return LoopAlarmClock(loop, clock.wall)


@dataclass(slots=True)
class GenerationPasses:
    """The collector's passes of one generation (rule 7)."""

    passes: int = 0
    seconds: float = 0.0
    """CPU seconds of the threads the passes ran on."""
    longest: float = 0.0
    """CPU seconds of the longest pass."""


@dataclass(slots=True)
class CollectorPasses:
    """The collector's passes since :meth:`install`, by generation (rule 7): a ``gc.callbacks`` entry."""

    generations: tuple[GenerationPasses, ...] = field(
        default_factory=lambda: tuple(GenerationPasses() for _ in range(3)))
    _began: float = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        # A pass never interleaves with another (the GIL, and the collector does not re-enter), so one
        # start time serves every thread; thread_time is that thread's own, since its start.
        if phase == "start":
            self._began = time.thread_time()
            return
        spent = time.thread_time() - self._began
        gen = self.generations[info["generation"]]
        gen.passes += 1
        gen.seconds += spent
        gen.longest = max(gen.longest, spent)

    def install(self) -> None:
        """Record every pass from now on (once, however often called)."""
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def line(self) -> str:
        """The passes in words, as the crawl's summary shows them, and the objects frozen (rule 8)."""
        return "; ".join([*(f"generation {g}: {p.passes} passes, {1000 * p.seconds:.0f} ms, longest "
                            f"{1000 * p.longest:.1f} ms" for g, p in enumerate(self.generations)),
                          f"{gc.get_freeze_count()} objects frozen"])


def freeze_survivors(phase: str, info: dict[str, int]) -> None:
    """Rule 8: a ``gc.callbacks`` entry freezing everything alive after each pass. The pass has ended:
    freezing moves the generations' lists whole into the permanent one, in O(1)."""
    if phase == "stop":
        gc.freeze()


COLLECTOR = CollectorPasses()
"""The process's record of the collector's passes (rule 7), installed by :func:`tune_gc`."""


def tune_gc() -> None:
    """Rules 2, 3, 7 and 8: freeze what exists now, then collect the young generation less often; record
    every pass; freeze the survivors of every pass."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    COLLECTOR.install()
    if freeze_survivors not in gc.callbacks:
        gc.callbacks.append(freeze_survivors)  # after COLLECTOR: the freeze is not counted in the pass


async def _young_passes() -> None:
    """Rule 9: a young pass every :data:`YOUNG_EVERY` seconds, until cancelled."""
    while True:
        await asyncio.sleep(YOUNG_EVERY)
        gc.collect(0)


async def _with_young_passes(main: Coroutine[Any, Any, T]) -> T:
    """``main``, with rule 9's task beside it for as long as it runs."""
    passes = asyncio.create_task(_young_passes())
    try:
        return await main
    finally:
        passes.cancel()


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop (rule 1), with the collector (rules 2, 3, 7-9) and
    the C allocator (rule 5) set."""
    tune_gc()
    keep_freed_heap()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(_with_young_passes(main))
    return uvloop.run(_with_young_passes(main))
