"""Reading a frontier: host states, parked hosts, the longest queues, queue bands and the stats record.

Nothing here changes the frontier (the queue bands' count, once made, is kept by the host table; the stats
move the hosts due by then to ready, host_table.py rule 17, as the next lease would).
"""

from __future__ import annotations

import heapq

from polecat.frontier.host_table import HostTable
from polecat.frontier.intake import Intake
from polecat.frontier.keys import PRIORITY_BANDS
from polecat.frontier.politeness import HostState
from polecat.frontier.records import FrontierStats


class Observation:
    """Read-only views of a frontier for the node, the CLI and the operator API."""

    def __init__(self, table: HostTable, intake: Intake) -> None:
        self._table = table
        self._hosts = table.hosts
        self._intake = intake

    def host_state(self, host: str) -> HostState | None:
        """The record of ``host`` (a copy read from the table when it is out of memory), None: unknown."""
        return self._table.peek(host)

    def parked_hosts(self) -> dict[str, str]:
        """Hosts in memory parked in this run, with the reason (reported by the node; host_table.py
        rule 11 keeps the others out of memory, counted in ``stats().hosts_parked``)."""
        return dict(self._table.parked)

    def busiest(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` hosts in memory (host_table.py rule 6) with the longest queues, longest first."""
        queued = ((h, st.queued) for h, st in self._hosts.items() if st.queued > 0)
        return heapq.nlargest(n, queued, key=lambda hq: (hq[1], hq[0]))

    def queue_bands(self) -> dict[str, int] | None:
        """Queued URLs by priority band (:data:`PRIORITY_BANDS`), from the count the host table keeps;
        None while a data dir's first count is made, a step each call (host_table.py rule 24)."""
        table = self._table
        if not table.band_step():
            return None
        assert table.bands is not None
        return {name: table.bands[name] for name in (*(n for n, _ in PRIORITY_BANDS), "low")}

    def host_counts(self) -> tuple[int, int]:
        """``(known, with URLs queued)``: hosts in memory or not, from the table's counters (host_table.py
        rule 12), read without a pass over any host."""
        return self._table.known_hosts, self._table.with_queue

    def quarantined_hosts(self) -> int:
        """Hosts in memory backing off after failures (not parked), from the table's counter (host_table.py
        rule 16)."""
        return self._table.quarantined

    def stats(self, now: float) -> FrontierStats:
        """The frontier's figures at ``now``, from the table's counters (host_table.py rules 12, 16, 17):
        no pass over the hosts."""
        table = self._table
        table.advance(now)
        ready = len(table.due)
        next_at = table.next_waiting()
        return FrontierStats(
            hosts=table.known_hosts, hosts_ready=ready,
            hosts_waiting=len(table.scheduled) - ready + table.cold_rows,
            hosts_parked=len(table.parked) + table.parked_out, queued=table.queued,
            in_flight=len(table.leases),
            accepted=table.accepted, seen=self._intake.seen_again,
            rejected=tuple(sorted(self._intake.rejected.items())), done=tuple(sorted(table.done.items())),
            dropped_blocked=table.dropped_blocked,
            done_total=tuple(sorted(table.done_total.items())), hosts_backoff=len(table.backing_off),
            next_ready_at=next_at if next_at is not None else 0.0,
        )
