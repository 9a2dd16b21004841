"""Requests outside the queue: robots.txt redirect hops (politeness rule 8, polecat/frontier/politeness.py).

A robots.txt lease may be redirected to another path of its host or to another host (www -> apex, a
CDN). Each hop is a request to the host it lands on, so the frontier decides when it may go, as for a
lease: :meth:`RobotsHops.hop` answers ``Lease`` (go now), ``Wait`` (ask again then) or ``Refused`` (the
target host stayed unavailable past ``ROBOTS_HOP_MAX_WAIT``: the fetch fails); the node only runs that
decision and reports each hop's outcome with :meth:`RobotsHops.release`.
"""

from __future__ import annotations

import random

from polecat.frontier.host_table import HostTable, quarantined
from polecat.frontier.politeness import HOLD_RETRY, ROBOTS_HOP_MAX_WAIT, Attempt, after_attempt
from polecat.frontier.records import Lease, Refused, Wait


class RobotsHops:
    """The robots.txt redirect hops of a frontier (see the module docstring)."""

    def __init__(self, table: HostTable, rng: random.Random) -> None:
        self._table = table
        self._hosts = table.hosts
        self._rng = rng

    def hop(self, lease: Lease, host: str, url: str, now: float, since: float) -> Lease | Wait | Refused:
        """May a redirect hop of the robots.txt ``lease`` request ``url`` on ``host`` now? ``since``: when
        the hop first asked. A ``Lease`` to another host holds it: give it back with :meth:`release`."""
        if host == lease.host:  # the lease keeps its host busy: the hop only waits for its interval
            allowed = self.next_allowed(host)
            return Wait(allowed) if allowed > now else Lease(host, url, "robots", not_before=allowed)
        at = self.hold(host, now)
        if at is None:
            return Lease(host, url, "robots", not_before=self.next_allowed(host))
        if at > since + ROBOTS_HOP_MAX_WAIT:
            return Refused(f"{host} stays busy")
        return Wait(at)

    def hold(self, host: str, now: float) -> float | None:
        """Borrow ``host`` for one request that is not in its queue (a robots.txt redirect hop landing
        there). None: it is held now, under the same rules as a lease; call :meth:`release` when the
        request ends. Otherwise the time to ask again (while it is busy, its end time is unknown)."""
        st = self._table.state(host)
        if st.in_flight:
            return now + HOLD_RETRY
        if st.next_allowed > now:
            return st.next_allowed
        st.in_flight = True
        return None

    def release(self, host: str, attempt: Attempt) -> None:
        """Apply the politeness rules to an extra request to ``host``: frees a host borrowed with
        :meth:`hold`; for a leased host (a same-host redirect hop) only spaces its next request."""
        table, st = self._table, self._hosts[host]
        was = quarantined(st)
        after_attempt(table.pol, table.rate(host), st, attempt, self._rng)
        table.health(st, was)  # host_table rule 16
        table.save(host)
        if host not in table.leases:
            st.in_flight = False
            table.wake(host, st, st.next_allowed)

    def next_allowed(self, host: str) -> float:
        """The earliest time ``host`` may be asked again (0.0 for a host the frontier does not know)."""
        st = self._table.peek(host)
        return st.next_allowed if st is not None else 0.0
