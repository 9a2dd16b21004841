"""Time, as the node and the pipeline read it: one small seam, so tests can drive it.

Two readings, because they answer two questions: ``wall()`` (Unix seconds) is what the frontier's
decisions take as ``now`` and what it persists (next-allowed times survive restarts); ``monotonic()`` is
what the fetcher stamps responses with (immune to clock steps). :func:`to_wall` converts the second into
the first with an offset read at the time of the conversion (:func:`wall_offset`).

Rule: the offset reads ``monotonic()`` before ``wall()``. The two readings are never at the same instant
(the process can be preempted, or lose the GIL, between them, for milliseconds under load); in this
order any pause makes converted times come out late, never early, and a converted time that anchors the
next request to a host (politeness rule 2) may only err late.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where the node and the pipeline read the time. :class:`polecat.testing.fakes.FakeClock` is the
    test double."""

    def wall(self) -> float:
        """Unix seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (the fetcher's response times)."""
        ...


class SystemClock:
    """The machine's clocks."""

    __slots__ = ()

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


def wall_offset(clock: Clock) -> float:
    """``wall - monotonic`` on ``clock``: never below the true offset (see the rule at the top)."""
    mono = clock.monotonic()
    return clock.wall() - mono


def to_wall(clock: Clock, monotonic: float) -> float:
    """``monotonic`` (a reading of ``clock.monotonic``) as wall-clock seconds (late, never early)."""
    return monotonic + wall_offset(clock)
