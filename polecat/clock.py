"""Time, as the node and the pipeline read it: one small seam, so tests can drive it.

Two readings, because they answer two questions: ``wall()`` (Unix seconds) is what the frontier's
decisions take as ``now`` and what it persists (next-allowed times survive restarts); ``monotonic()`` is
what the fetcher stamps responses with (immune to clock steps). :func:`to_wall` converts the second into
the first with an offset read at the time of the conversion.
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


def to_wall(clock: Clock, monotonic: float) -> float:
    """``monotonic`` (a reading of ``clock.monotonic``) as wall-clock seconds."""
    return monotonic + (clock.wall() - clock.monotonic())
