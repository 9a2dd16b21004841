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
6. Memory: rules 1-2 keep one entry for each host that reserved or leased a page in this run (at most
   ``max_pages`` of them): an int of its state (pages leased x 4, reservation held, reservation used)
   keyed by the hash of the host's key: 72 B a host at 144,000 hosts (10 MB), not the host's key
   itself in a ``Counter`` and a set (130 B a host, 19 MB: the key was the last reference to a host's
   name once the frontier's working set let it go; 144,000 hosts is a million-page breadth crawl's,
   benchmarks/README.md "Issue 39: what grows with the hosts met"). Two hosts of one hash (~1 in 4 x 10^7
   for a million hosts a run) share an entry: at worst one of them asks its robots.txt without a page
   reserved, or is refunded the other's reservation.

Rules 3-5 bound the frontier's per-host state (about 400 bytes a host) and its on-disk queue.
"""

from __future__ import annotations

from polecat.config import ScopeConfig
from polecat.frontier.records import LeaseKind

_PAGE = 4
"""A page lease in a host's state (rule 6): the low bits are flags."""
_RESERVED = 2
"""The host holds a page of the budget for its robots.txt (rule 2; spent if it never gets a page)."""
_USED = 1
"""The host's first page used its reservation (a withdrawn page gives it back)."""


class PageBudget:
    """Rules 1 and 2: the page budget of one run, with the reservations robots.txt requests make."""

    def __init__(self, max_pages: int) -> None:
        self.max_pages = max_pages
        self.pages = 0
        """Page leases made in this run."""
        self.reserved = 0
        """Hosts holding a reservation."""
        self._hosts: dict[int, int] = {}
        """Each host's state (rule 6) by the hash of its key."""

    @property
    def used(self) -> int:
        """Pages leased plus pages reserved."""
        return self.pages + self.reserved

    @property
    def full(self) -> bool:
        """Whether no host without a reservation may start anything more in this run."""
        return self.max_pages > 0 and self.used >= self.max_pages

    def allows(self, kind: LeaseKind, host: str) -> bool:
        """Whether a ``kind`` lease of ``host`` fits the budget now."""
        if self.max_pages <= 0:
            return True
        state = self._hosts.get(hash(host), 0)
        if state & _RESERVED or (kind == "robots" and state >= _PAGE):  # a host with a page has its
            return True  # robots.txt refreshes paid
        return self.used < self.max_pages

    def charge(self, kind: LeaseKind, host: str) -> None:
        """Account for a lease :meth:`allows` admitted."""
        if self.max_pages <= 0:
            return
        key = hash(host)
        state = self._hosts.get(key, 0)
        if kind == "robots":
            if state < _PAGE and not state & _RESERVED:
                self._hosts[key] = state | _RESERVED
                self.reserved += 1
            return
        if state & _RESERVED:
            state = state & ~_RESERVED | _USED
            self.reserved -= 1
        self._hosts[key] = state + _PAGE
        self.pages += 1

    def refund(self, kind: LeaseKind, host: str) -> None:
        """A lease was withdrawn before anything was sent. A robots.txt lease keeps its reservation (the
        host asks again soon, and an earlier attempt of it may have been sent); a page lease gives back
        its page and, if it used one, the host's reservation."""
        if self.max_pages <= 0 or kind == "robots":
            return
        self.pages -= 1
        key = hash(host)
        state = self._hosts[key] - _PAGE
        if state & _USED:
            state = state & ~_USED | _RESERVED
            self.reserved += 1
        self._hosts[key] = state


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
