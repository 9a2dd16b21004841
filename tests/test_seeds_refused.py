"""Refused seeds: the run names the first and counts them all, in bounded memory (a seeds file of a
million refused lines must not grow a list of them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from polecat import Crawler
from polecat.config import config_from_mapping
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
