"""Reading a frontier: URL records, host states, queue bands and the stats record.
"""

from __future__ import annotations

import math
from collections import Counter

from polecat.frontier.keys import (
    PRIORITY_BANDS,
    priority_band,
    url_key,
)
from polecat.frontier.politeness import HostState
from polecat.frontier.records import (
    FrontierStats,
    UrlRecord,
)
from polecat.frontier.state import FrontierState


class FrontierObservation(FrontierState):
    """Read-only views of a frontier for the node, the CLI and the operator API."""

    def url_record(self, url: str, key: bytes | None = None) -> UrlRecord | None:
        """What is recorded of the finished ``url`` (``key``: its ``urls`` key, when known)."""
        raw = self._db.get("urls", key or url_key(url))
        return UrlRecord.decode(raw) if raw is not None else None

    def host_state(self, host: str) -> HostState | None:
        return self._hosts.get(host)

    def parked_hosts(self) -> dict[str, str]:
        """Hosts parked in this run, with the reason (reported by the node)."""
        return dict(self._parked)

    def queue_bands(self) -> dict[str, int]:
        """Queued URLs by priority band (:data:`PRIORITY_BANDS`). The first call counts the queue table."""
        if self._bands is None:
            bands: Counter[str] = Counter()
            for key, _ in self._db.items("queue"):
                bands[priority_band(key)] += 1
            self._bands = bands
        return {name: self._bands[name] for name in (*(n for n, _ in PRIORITY_BANDS), "low")}

    def quarantined_hosts(self) -> int:
        """Hosts backing off after failures (not parked)."""
        return sum(1 for st in self._hosts.values() if st.failures > 0 and not st.parked)

    @property
    def queued(self) -> int:
        return self._queued

    def stats(self, now: float) -> FrontierStats:
        ready = backoff = 0
        next_at = math.inf
        for h, at in self._scheduled.items():
            st = self._hosts[h]
            if st.parked:
                continue
            if at <= now:
                ready += 1
            else:
                next_at = min(next_at, at)
                backoff += bool(st.failures or st.strikes)
        parked = len(self._parked)
        return FrontierStats(
            hosts=len(self._hosts), hosts_ready=ready, hosts_waiting=len(self._scheduled) - ready,
            hosts_parked=parked, queued=self._queued, in_flight=len(self._leases),
            accepted=self._accepted, seen=self._seen_count, rejected=tuple(sorted(self._rejected.items())),
            done=tuple(sorted(self._done.items())), dropped_blocked=self._dropped_blocked,
            done_total=tuple(sorted(self._done_total.items())), hosts_backoff=backoff,
            next_ready_at=next_at if next_at != math.inf else 0.0,
        )
