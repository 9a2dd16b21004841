"""Crawl budgets: what bounds the requests, hosts and queued URLs of a crawl, whatever its pages link to.

Rules (this module owns them; the frontier asks before it leases or queues):

1. Pages: a run leases at most ``scope.max_pages`` page requests (0: no limit). The node ends the run
   when they are all leased.
2. robots.txt, and the DNS lookups it starts, are paid for by that page budget: a host's first
   robots.txt request of a run is made only when one page of the budget can be reserved for the host.
   The host's first page lease uses the reservation. A host that never gets to a page (its robots.txt
   or its name failed and it was given up, or every URL was disallowed) keeps the reservation, spent.
   So a run of ``max_pages`` N makes at most N first robots.txt requests and N page requests; the
   retries of one host are bounded by politeness (give-up, park). Without ``max_pages`` nothing is
   reserved and rules 3-5 bound the work.
3. Hosts: the frontier knows at most ``scope.max_hosts`` hosts; a discovered URL of a new host past it
   is refused (``host_limit``).
4. New hosts per page: one page's links add at most ``scope.max_new_hosts_per_page`` hosts; its other
   links to new hosts are refused (``page_host_limit``), so no single page makes the crawler resolve and
   ask thousands of hosts, nor hold them in memory.
5. Queued URLs: at most ``scope.max_queued`` URLs are queued in all; discovered URLs past it are refused
   (``queue_full``). Seeds are exempt from rules 3-5: they are the operator's choice.

Memory: the budget holds the hosts that were reserved or fetched in this run (at most ``max_pages``);
rules 3-5 bound the frontier's per-host state (about 400 bytes a host) and its on-disk queue.
"""

from __future__ import annotations

from collections import Counter

from polecat.config import ScopeConfig
from polecat.frontier.records import LeaseKind


class PageBudget:
    """Rules 1 and 2: the page budget of one run, with the reservations robots.txt requests make."""

    def __init__(self, max_pages: int) -> None:
        self.max_pages = max_pages
        self.pages = 0
        """Page leases made in this run."""
        self._reserved: set[str] = set()
        """Hosts holding a page of the budget for their robots.txt (spent when they never get a page)."""
        self._paged: Counter[str] = Counter()
        """Page leases per host in this run (a host with one has its robots.txt refreshes paid)."""
        self._used_reservation: set[str] = set()
        """Hosts whose first page used their reservation (a withdrawn page gives it back)."""

    @property
    def used(self) -> int:
        """Pages leased plus pages reserved."""
        return self.pages + len(self._reserved)

    @property
    def full(self) -> bool:
        """Whether no host without a reservation may start anything more in this run."""
        return self.max_pages > 0 and self.used >= self.max_pages

    def allows(self, kind: LeaseKind, host: str) -> bool:
        """Whether a ``kind`` lease of ``host`` fits the budget now."""
        if self.max_pages <= 0 or host in self._reserved:
            return True
        if kind == "robots" and self._paged[host] > 0:
            return True
        return self.used < self.max_pages

    def charge(self, kind: LeaseKind, host: str) -> None:
        """Account for a lease :meth:`allows` admitted."""
        if self.max_pages <= 0:
            return
        if kind == "robots":
            if self._paged[host] == 0:
                self._reserved.add(host)
            return
        if host in self._reserved:
            self._reserved.discard(host)
            self._used_reservation.add(host)
        self._paged[host] += 1
        self.pages += 1

    def refund(self, kind: LeaseKind, host: str) -> None:
        """A lease was withdrawn before anything was sent. A robots.txt lease keeps its reservation (the
        host asks again soon, and an earlier attempt of it may have been sent); a page lease gives back
        its page and, if it used one, the host's reservation."""
        if self.max_pages <= 0 or kind == "robots":
            return
        self.pages -= 1
        self._paged[host] -= 1
        if host in self._used_reservation:
            self._used_reservation.discard(host)
            self._reserved.add(host)


def admit_reason(cfg: ScopeConfig, *, new_host: bool, hosts: int, queued: int,
                 page_new_hosts: int) -> str | None:
    """Rules 3-5 for one discovered URL: the refusal reason, or None to queue it. ``page_new_hosts``:
    new hosts the same page's links added so far."""
    if queued >= cfg.max_queued:
        return "queue_full"
    if new_host:
        if hosts >= cfg.max_hosts:
            return "host_limit"
        if page_new_hosts >= cfg.max_new_hosts_per_page:
            return "page_host_limit"
    return None
