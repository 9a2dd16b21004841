"""Time, as polecat reads it: one small seam, so tests can drive it.

Two readings, because they answer two questions: ``wall()`` (Unix seconds) is what the frontier's
decisions take as ``now`` and what it persists (next-allowed times survive restarts); ``monotonic()`` is
what the fetcher stamps responses with and what intervals and deadlines are measured on (backoff,
fencing, TTLs: immune to clock steps). :func:`to_wall` converts the second into
the first with an offset read at the time of the conversion (:func:`wall_offset`).

Rules:
1. The offset reads ``monotonic()`` before ``wall()``. The two readings are never at the same instant
   (the process can be preempted, or lose the GIL, between them, for milliseconds under load); in this
   order any pause makes converted times come out late, never early, and a converted time that anchors
   the next request to a host (politeness rule 2) may only err late.
2. Every time a decision or a schedule depends on is read here or given as ``now``: policy takes
   ``now``; the components that run it take a :class:`Clock` (default :data:`SYSTEM_CLOCK`): the node,
   the fetcher (response stamps, dated Retry-After, DNS TTLs, idle connections), the cluster
   (membership, hand-off, failover, resize), the processes (supervisor, machine, node service) and the
   service (API, metrics). Components that must agree share one clock (the crawler and its fetcher;
   a machine's membership and its fencing check). Two direct reads stay, each saying why where it is:
   the timerfd alarm clock in :mod:`polecat.runloop` (it exists only for the system clock and compares
   with the kernel clock it arms) and the command line timing itself (``commands/main.py``).
3. Waiting stays on the event loop's timers (``asyncio.sleep``, ``call_later``, the fetch deadlines):
   a component that polls computes its deadlines from its clock and sleeps in between, so a fake clock
   decides when things are due and the loop only decides how often they are looked at.

4. ``monotonic()`` is ``CLOCK_MONOTONIC``, which stops while the machine is suspended (it is the event
   loop's clock too, so timers and response stamps agree with it). Lease times are read with
   ``boottime()`` instead (``CLOCK_BOOTTIME`` on Linux: it counts the time suspended; elsewhere the
   monotonic clock): fencing (polecat/cluster/ownership.py rule 5) compares them with an etcd lease
   that keeps running while the machine sleeps, so a node resumed after a suspend longer than
   ``ttl / 2`` wakes fenced. A process that is only stopped (SIGSTOP, a GC pause) sees both advance.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """Where the components that run decisions read the time (rule 2).
    :class:`polecat.testing.fakes.FakeClock` is the test double."""

    def wall(self) -> float:
        """Unix seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (the fetcher's response times)."""
        ...

    def boottime(self) -> float:
        """Seconds on a clock that never goes back and counts the time the machine was suspended
        (lease times: rule 4)."""
        ...


class SystemClock:
    """The machine's clocks."""

    __slots__ = ()

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def boottime(self) -> float:
        return _boottime()


def _boot_reader() -> Callable[[], float]:
    """``CLOCK_BOOTTIME`` where the platform has it (Linux), else the monotonic clock (rule 4)."""
    boot = getattr(time, "CLOCK_BOOTTIME", None)
    if boot is None:
        return time.monotonic
    return functools.partial(time.clock_gettime, boot)


_boottime = _boot_reader()
SYSTEM_CLOCK = SystemClock()


def wall_offset(clock: Clock) -> float:
    """``wall - monotonic`` on ``clock``: never below the true offset (see the rule at the top)."""
    mono = clock.monotonic()
    return clock.wall() - mono


def to_wall(clock: Clock, monotonic: float) -> float:
    """``monotonic`` (a reading of ``clock.monotonic``) as wall-clock seconds (late, never early)."""
    return monotonic + wall_offset(clock)
