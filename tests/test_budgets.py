"""Budgets bound every request (issue 10): the page budget pays for robots.txt and its DNS lookups, and
hosts, new hosts per page and queued URLs are capped. Sans-IO properties, then real crawls of a page
that links thousands of hosts that do not resolve (loopback test web + test DNS server)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from polecat import Crawler
from polecat.config import ScopeConfig
from polecat.frontier.budgets import PageBudget, admit_reason
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config

LEASES = st.lists(st.tuples(st.sampled_from(["page", "robots"]), st.integers(0, 20), st.booleans()),
                  max_size=200)


@given(st.integers(1, 10), LEASES)
def test_pages_plus_hosts_asked_without_a_page_stay_within_max_pages(max_pages: int,
                                                                     leases: list[Any]) -> None:
    """Rule 2 as a property: every page sent and every host whose robots.txt was asked without a page
    following costs one page of the budget, whatever the order and the withdrawals."""
    budget = PageBudget(max_pages)
    asked: set[int] = set()
    paged: set[int] = set()
    pages = 0
    for kind, host, withdrawn in leases:
        if not budget.allows(kind, f"h{host}"):
            continue
        budget.charge(kind, f"h{host}")
        if withdrawn:
            budget.refund(kind, f"h{host}")
        elif kind == "page":
            pages += 1
            paged.add(host)
        elif host not in paged:
            asked.add(host)
    assert pages + len(asked - paged) <= max_pages
    assert budget.used <= max_pages


def test_a_reservation_becomes_the_hosts_page_and_a_spent_one_is_not_returned() -> None:
    budget = PageBudget(2)
    budget.charge("robots", "a")
    budget.charge("robots", "b")
    assert budget.full and not budget.allows("robots", "c") and not budget.allows("page", "c")
    assert budget.allows("page", "a") and budget.allows("robots", "b")  # its retry is paid
    budget.charge("page", "a")
    assert budget.pages == 1 and budget.full  # b never got a page: its reservation stays spent
    assert budget.allows("robots", "a")  # a's robots.txt refresh is paid by its page


class _SetsBudget:
    """Rules 1-2 as the budget kept them before rule 6: the hosts' keys in two sets and a Counter."""

    def __init__(self, max_pages: int) -> None:
        self.max_pages, self.pages = max_pages, 0
        self.reserved: set[str] = set()
        self.paged: Counter[str] = Counter()
        self.used_reservation: set[str] = set()

    def allows(self, kind: str, host: str) -> bool:
        if host in self.reserved or (kind == "robots" and self.paged[host] > 0):
            return True
        return self.pages + len(self.reserved) < self.max_pages

    def charge(self, kind: str, host: str) -> None:
        if kind == "robots":
            if self.paged[host] == 0:
                self.reserved.add(host)
            return
        if host in self.reserved:
            self.reserved.discard(host)
            self.used_reservation.add(host)
        self.paged[host] += 1
        self.pages += 1

    def refund(self, kind: str, host: str) -> None:
        if kind == "page":
            self.pages -= 1
            self.paged[host] -= 1
            if host in self.used_reservation:
                self.used_reservation.discard(host)
                self.reserved.add(host)


@given(st.integers(1, 10), LEASES)
def test_a_hosts_state_as_one_int_decides_as_the_sets_did(max_pages: int, leases: list[Any]) -> None:
    """Rule 6 changes what the budget keeps, not what it decides: every answer, and the pages and
    reservations counted, are those of the sets it kept before."""
    budget, sets = PageBudget(max_pages), _SetsBudget(max_pages)
    charged: list[tuple[Any, str]] = []
    for kind, host, withdraw in leases:
        name = f"h{host}"
        for k in ("page", "robots"):
            assert budget.allows(k, name) == sets.allows(k, name)
        if budget.allows(kind, name):
            budget.charge(kind, name)
            sets.charge(kind, name)
            charged.append((kind, name))
        if withdraw and charged:
            kind, name = charged.pop()
            budget.refund(kind, name)
            sets.refund(kind, name)
        assert (budget.pages, budget.reserved) == (sets.pages, len(sets.reserved))


def test_the_budget_keeps_no_host_name_and_an_int_a_host() -> None:
    """Rule 6: a million-page breadth crawl charges a page and a robots.txt for each of ~144,000 hosts,
    whose names the budget was the last to hold; now it keeps none of them, and under 100 B a host."""
    budget = PageBudget(1_000_000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            host = f"h{i}.breadth.test:45705"
            budget.charge("robots", host)
            budget.charge("page", host)
            budget.charge("page", host)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 20_000 * 100, held
    assert budget.pages == 40_000 and budget.used == 40_000
    assert all(isinstance(key, int) for key in budget._hosts)


def test_no_limit_reserves_nothing() -> None:
    budget = PageBudget(0)
    for i in range(1000):
        assert budget.allows("robots", f"h{i}")
        budget.charge("robots", f"h{i}")
    assert not budget.full and budget.used == 0


def test_admit_reasons_name_each_limit() -> None:
    cfg = ScopeConfig(max_hosts=10, max_new_hosts_per_page=3, max_queued=100)
    ok = {"new_host": True, "hosts": 5, "queued": 50, "page_new_hosts": 2}
    assert admit_reason(cfg, **ok) is None
    assert admit_reason(cfg, **{**ok, "queued": 100}) == "queue_full"
    assert admit_reason(cfg, **{**ok, "hosts": 10}) == "host_limit"
    assert admit_reason(cfg, **{**ok, "page_new_hosts": 3}) == "page_host_limit"
    assert admit_reason(cfg, **{**ok, "hosts": 10, "page_new_hosts": 3, "new_host": False}) is None


def _link_farm(web: TestWeb, n: int) -> None:
    """The root of the first host links ``n`` distinct hosts that the test DNS server does not know."""
    links = "".join(f'<a href="http://x{i}.nowhere.test/">x</a>' for i in range(n))
    web.respond(web.site.hosts[0], "/", 200, headers={"Content-Type": "text/html"},
                body=f"<html><body>{links}</body></html>".encode())


def _crawl(web: TestWeb, data: Path, **scope: Any) -> Any:
    cfg = crawl_config(web, data, dns={"timeout": 0.5}, politeness={"rate": 5.0, "give_up_after": 1})
    cfg = replace(cfg, scope=replace(cfg.scope, mode="any", seeds=(web.seeds[0],), **scope))

    async def go() -> Any:
        async with Crawler(cfg) as crawler:
            return await asyncio.wait_for(crawler.run(), 60)

    return asyncio.run(go())


def test_max_pages_bounds_robots_and_dns_of_a_page_linking_thousands_of_hosts(test_web: TestWebFactory,
                                                                                tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=5, seed=1))
    _link_farm(web, 5_000)
    stats = _crawl(web, tmp_path / "data", max_pages=2)
    asked = {name for name in web.dns.queries if name.endswith("nowhere.test")}
    assert len(asked) <= 1  # one reservation was left: one new host tried
    assert sum(web.dns.queries.values()) <= 6
    assert sum(1 for r in web.log if r.target == "/robots.txt") <= 2
    assert stats.ended == "max pages reached"
    assert stats.hosts <= 1 + 1_000  # the page added at most max_new_hosts_per_page hosts


def test_a_page_adds_at_most_max_new_hosts_per_page(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=5, seed=1))
    _link_farm(web, 3_000)
    stats = _crawl(web, tmp_path / "data", max_new_hosts_per_page=20)
    assert stats.hosts == 21
    assert dict(stats.urls_rejected)["page_host_limit"] == 2_980
    asked = {name for name in web.dns.queries if name.endswith("nowhere.test")}
    assert len(asked) == 20
