"""When a crawl over several members is finished (sans-IO; the parent feeds it the members' reports).

A member alone cannot tell: its frontier may be empty while another member is about to hand it URLs.

Rules:
1. A member reports ``quiet`` when its frontier is idle, its outbox is empty (every URL it handed off was
   acknowledged) and nothing is being received (polecat/cluster/link.py rule 4).
2. A hand-off is acknowledged only after the receiver committed the URLs, so while URLs are on their way
   the sender is not quiet, and once they arrived the receiver is not quiet (it has them queued) until it
   fetched them, which changes its counters.
3. The crawl is finished when two observations in a row see every member quiet, every member has sent a
   fresh report since the first of them, and no member's counters changed in between: no report can then
   be stale with work hidden behind it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Report:
    """The part of a member's report that termination looks at."""

    seq: int
    quiet: bool
    counters: tuple[int, ...]
    """Fetches, URLs handed off, acknowledged and received: anything that moves when work happens."""


class Termination:
    """Rule 3 over successive snapshots of every member's latest report."""

    def __init__(self) -> None:
        self._first: dict[str, Report] | None = None

    def observe(self, reports: Mapping[str, Report | None]) -> bool:
        """True once the crawl is finished; call it with every member's latest report (None: none yet)."""
        if any(r is None or not r.quiet for r in reports.values()):
            self._first = None
            return False
        current = {k: r for k, r in reports.items() if r is not None}
        first = self._first
        if first is None or first.keys() != current.keys():
            self._first = current
            return False
        if any(current[k].counters != first[k].counters for k in current):
            self._first = current
            return False
        return all(current[k].seq > first[k].seq for k in current)

    def reset(self) -> None:
        """A member restarted: what it reported before says nothing about now."""
        self._first = None
