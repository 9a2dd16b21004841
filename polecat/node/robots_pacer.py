"""The robots.txt redirect hops of one robots lease, run as the frontier decides them (politeness rule 8,
polecat/frontier/hops.py): go, wait or fail as :meth:`Frontier.hop` says, and give each hop's outcome back
(:meth:`Frontier.release`). The fetcher calls it between hops (polecat/fetch/http.py ``fetch_robots``)."""

from __future__ import annotations

import asyncio

from polecat.clock import Clock
from polecat.dedup.canon import Canonicalizer
from polecat.errors import FetchTimeout
from polecat.fetch.http import Response
from polecat.frontier.frontier import Frontier
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Lease, Refused
from polecat.hosts import host_key
from polecat.node.pipeline import attempt_of


class RobotsPacer:
    """Paces one robots lease's redirect hops; see the module docstring."""

    def __init__(self, frontier: Frontier, canon: Canonicalizer, lease: Lease, clock: Clock) -> None:
        self._frontier = frontier
        self._clock = clock
        self._canon = canon
        self._lease = lease
        self._lease_host = lease.host
        self._host = lease.host
        self.lease_attempt: Attempt | None = None
        """The last request on the leased host, once a hop has left it."""

    def _host_of(self, url: str) -> str:
        canonical = self._canon.canonicalize(url)
        return host_key(canonical) if canonical is not None else self._lease_host

    async def before(self, url: str, previous: Response) -> None:
        attempt = attempt_of(previous, self._clock)
        if self.on_lease_host:
            self.lease_attempt = attempt
        # The leased host: spaces its next request. A borrowed host: gives it back.
        self._frontier.release(self._host, attempt)
        host = self._host_of(url)
        since = self._clock.wall()
        while True:
            now = self._clock.wall()
            decision = self._frontier.hop(self._lease, host, url, now, since)
            if isinstance(decision, Lease):
                break
            if isinstance(decision, Refused):
                self._host = host  # nothing was sent: the failure is not the leased host's
                raise FetchTimeout(f"robots.txt redirect to {url}: {decision.reason}")
            await asyncio.sleep(max(0.0, (decision.until or now) - now))
        self._host = host

    @property
    def on_lease_host(self) -> bool:
        """Whether the last request went to the leased host."""
        return self._host == self._lease_host

    @property
    def hop_from(self) -> Attempt | None:
        """The leased host's last attempt when the last request went to another host (a failure there is
        not the leased host's: polecat/frontier/outcomes.py rule 2)."""
        return None if self.on_lease_host else self.lease_attempt

    def after(self, url: str, response: Response | None) -> None:
        if response is None and not self.on_lease_host:
            now = self._clock.wall()
            self._frontier.release(self._host, Attempt(now, now, None, failed=True))

    def finish(self, final: Response) -> Attempt:
        """The attempt to complete the lease with, after giving back a borrowed host."""
        attempt = attempt_of(final, self._clock)
        if self.on_lease_host:
            return attempt
        self._frontier.release(self._host, attempt)
        assert self.lease_attempt is not None
        return self.lease_attempt
