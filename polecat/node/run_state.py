"""What a node's run counts, and how its lease loop sleeps and is woken."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from polecat.runloop import AlarmClock

SEEDS_REFUSED_KEPT = 10
"""Refused seeds remembered by name (the run's cause names the first; the rest are counted)."""


@dataclass(slots=True)
class RunCounters:
    """The run's own figures (:func:`polecat.node.stats.collect_stats` reads them)."""

    fetches: int = 0
    """Page leases made (a lease withdrawn before anything was sent is taken back)."""
    answered: int = 0
    """Page requests that got an HTTP response (any status)."""
    violations: int = 0
    """Leases made before their host's time: the node's self-check of politeness rule 2; must stay 0."""
    bytes_fetched: int = 0
    """Page body bytes received, as sent on the wire."""
    errors: Counter[str] = field(default_factory=Counter)
    refresh_queued: int = 0
    freshness: tuple[int, int, int, int] | None = None
    """The last freshness figures: tracked, due, important, important within their window."""
    ended: str = ""
    """Why the run ended (polecat/node/verdict.py), once it has."""
    seeds_refused: list[tuple[str, str]] = field(default_factory=list)
    """The first seeds the frontier refused (at most :data:`SEEDS_REFUSED_KEPT`), with why: a seeds file
    of a million refused lines must not grow this list."""
    seeds_refused_total: int = 0


class Waker:
    """The lease loop's sleep: until a completion that matters, a new URL, a stop, or a wall-clock time.

    Rule: a lease that ends wakes the loop only where that can change its next decision
    (:meth:`after_lease`). It sleeps with no timer (for a free slot, or for the leases in flight), or a
    host is now due before its timer (the lease's own host, spaced again; a host its links queued). Any
    other wake-up would cost a loop turn, a lease call and a timer that decide nothing, several a page on
    a crawl that politeness paces. While the loop runs it decides afresh before it sleeps."""

    def __init__(self, next_due: Callable[[], float | None]) -> None:
        self._next_due = next_due
        self.event = asyncio.Event()
        self.sleeping = False
        self.until: float | None = None
        """When the current sleep ends by itself (None: only when woken)."""

    def set(self) -> None:
        """Wake the loop now."""
        self.event.set()

    async def sleep(self, alarms: AlarmClock, until: float | None) -> None:
        """Sleep until woken, or until the wall-clock time ``until``."""
        self.event.clear()
        if until is not None:
            alarms.set(until, self.event)
        self.sleeping, self.until = True, until
        try:
            await self.event.wait()
        finally:
            self.sleeping = False
            if until is not None:
                alarms.cancel()

    def after_lease(self) -> None:
        """A lease ended: wake the loop where that can change its next decision (the rule above)."""
        if not self.sleeping:
            return
        until = self.until
        due = self._next_due() if until is not None else None
        if until is None or (due is not None and due < until):
            self.event.set()
