"""Refused seeds: the run names the first and counts them all, in bounded memory (a seeds file of a
million refused lines must not grow a list of them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.frontier.intake import ACCEPTED, SEEN
from polecat.frontier.routing import Routing
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.node import verdict
from polecat.node.run_state import SEEDS_REFUSED_KEPT
from polecat.testing.fakes import FakeClock, FakeFetcher, MemoryPageStore


def test_refused_seeds_are_named_up_to_a_bound_and_all_counted(tmp_path: Path) -> None:
    cfg = config_from_mapping({"data_dir": str(tmp_path), "scope": {"mode": "any", "block": ["*.test"]}})
    clock = FakeClock(tick=0.0)

    async def run() -> tuple[list[tuple[str, str]], int, str]:
        async with Crawler(cfg, clock=clock, fetcher=FakeFetcher(clock, {}), store=MemoryPageStore()) as c:
            for i in range(SEEDS_REFUSED_KEPT * 5):
                assert c.add_seed(f"http://h{i}.test/") == "blocked"
            stats = await c.run()
            counters = c._counters
            return list(counters.seeds_refused), counters.seeds_refused_total, stats.cause

    named, total, cause = asyncio.run(run())
    assert len(named) == SEEDS_REFUSED_KEPT and total == SEEDS_REFUSED_KEPT * 5
    assert named[0] == ("http://h0.test/", "blocked")
    assert cause == (f"nothing could be fetched: seed http://h0.test/ was refused (blocked) (and "
                     f"{SEEDS_REFUSED_KEPT * 5 - 1} more seeds); remove the --block pattern")


def test_the_cause_counts_more_seeds_than_it_names() -> None:
    cause = verdict.nothing_fetched_cause(answered=0, attempted=0, parked=(), done=(),
                                          seeds_refused=[("http://a.test/", "out_of_scope")],
                                          seeds_refused_total=3)
    assert cause == ("nothing could be fetched: seed http://a.test/ was refused (out_of_scope) "
                     "(and 2 more seeds)")


def test_the_cause_counts_hosts_parked_out_of_memory() -> None:
    """host_table.py rule 11: the parked hosts named are those in memory; the count is of them all."""
    named = verdict.nothing_fetched_cause(answered=0, attempted=5, parked=[("a.test", "dns: NXDOMAIN")],
                                          seeds_refused=(), done=(), parked_total=40_000)
    assert named.startswith("nothing could be fetched: a.test (and 39999 more hosts): ")
    unnamed = verdict.nothing_fetched_cause(answered=0, attempted=5, parked=(), seeds_refused=(), done=(),
                                            parked_total=40_000)
    assert unnamed == "nothing could be fetched: 40000 hosts were given up"


class _TwoMembers:
    """Slices of even number are member ``a``'s, the others ``b``'s (polecat/frontier/routing.py Owners)."""

    members = ("a", "b")

    def owner(self, slice_id: int) -> str:
        return "a" if slice_id % 2 == 0 else "b"


def test_a_seeds_batch_answers_each_line_in_its_place(tmp_path: Path) -> None:
    """``Crawler.add_seeds`` (a seeds file's batch): a line not an http(s) URL is None, another member's
    seed ``"other_owner"`` (its host joins the scope here), a refused seed its reason (counted), the others
    the frontier's decision, each in its place; a batch with none of those answers the frontier's decisions
    as they are."""
    cfg = config_from_mapping({"data_dir": str(tmp_path), "scope": {"mode": "any", "block": ["*.blocked"]}})
    clock = FakeClock(tick=0.0)
    urls = [f"http://h{i}.test/" for i in range(12)]
    owned = {url: slice_of(host_key(url)) % 2 == 0 for url in urls}
    assert set(owned.values()) == {True, False}
    mine = [url for url in urls if owned[url]]
    blocked = next(f"http://b{i}.blocked/" for i in range(100) if slice_of(f"b{i}.blocked") % 2 == 0)

    async def run() -> tuple[list[str | None], list[str | None], int]:
        async with Crawler(cfg, clock=clock, fetcher=FakeFetcher(clock, {}), store=MemoryPageStore()) as c:
            plain = c.add_seeds([*mine, mine[0]])
            c._frontier.set_routing(Routing(_TwoMembers(), "a"))
            mixed = c.add_seeds(["ftp://x.test/", *urls, blocked, "not a url", mine[1]])
            return plain, mixed, c._counters.seeds_refused_total

    plain, mixed, refused = asyncio.run(run())
    assert plain == [ACCEPTED] * len(mine) + [SEEN]
    assert mixed == [None, *(SEEN if owned[url] else "other_owner" for url in urls), "blocked", None, SEEN]
    assert refused == 1
