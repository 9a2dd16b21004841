"""Per-IP politeness keys (``politeness.key_by_ip``): several hosts served by one address share its
budget. Rule 1 and 2 of polecat/frontier/politeness.py apply to the IP as to a host: one request in
flight, and the next no earlier than one interval (of the host that used it) after the last response's
headers. This module only keeps the IP states and who waits for them; the frontier schedules hosts.
"""

from __future__ import annotations

import math

from polecat.frontier.politeness import Attempt, IpState, after_ip_attempt


class IpKeys:
    """Which host's request holds which IP, each IP's next-allowed time, and the hosts waiting."""

    __slots__ = ("_held", "_ips", "_waiters")

    def __init__(self) -> None:
        self._ips: dict[str, IpState] = {}
        self._waiters: dict[str, set[str]] = {}
        self._held: dict[str, str] = {}

    def held_by(self, host: str) -> str | None:
        """The IP ``host``'s in-flight request holds, if any."""
        return self._held.get(host)

    def wait_time(self, host: str, ip: str, now: float) -> float | None:
        """None: ``host`` may use ``ip`` now. Otherwise when to try again: ``inf`` while another host's
        request is in flight there (``host`` is then among the waiters :meth:`release` returns)."""
        state = self._ips.get(ip)
        if state is None:
            return None
        if state.in_flight:
            self._waiters.setdefault(ip, set()).add(host)
            return math.inf
        return state.next_allowed if state.next_allowed > now else None

    def take(self, host: str, ip: str) -> None:
        self._ips.setdefault(ip, IpState()).in_flight = True
        self._held[host] = ip

    def release(self, host: str, attempt: Attempt | None = None, interval: float = 0.0
                ) -> tuple[set[str], float]:
        """Free the IP ``host`` holds (spacing its next use after ``attempt`` by ``interval``); returns
        the hosts that waited for it and the IP's next-allowed time."""
        ip = self._held.pop(host, None)
        if ip is None:
            return set(), 0.0
        state = self._ips[ip]
        state.in_flight = False
        if attempt is not None:
            after_ip_attempt(state, interval, attempt)
        return self._waiters.pop(ip, set()), state.next_allowed
