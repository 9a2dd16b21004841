"""The refresh scan in steps (polecat/frontier/refresh_queue.py rules 1-2, polecat/node/leases.py rule 3):
each step reads a bounded number of rows, the steps together queue what one call queues, a URL changed
between two steps is left to its new state, and a one-off refresh run whose scan takes many steps does not
end before it is over."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat import Crawler
from polecat.config import Config, RefreshConfig
from polecat.frontier import refresh_queue
from polecat.frontier.keys import url_key
from polecat.frontier.records import UrlRecord
from polecat.frontier.refresh import History, observe
from polecat.frontier.refresh_queue import DueScan
from polecat.hosts import host_key
from polecat.testing.sitegen import SiteSpec
from polecat.writes import Put, Write
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests
from tests.frontier_helpers import Rig, canon
from tests.test_refresh_index import effect, random_records, seeded

REFRESH = RefreshConfig(min_interval=10.0, max_interval=2_000.0, default_interval=100.0, min_visits=2,
                        refresh_share=1.0, important_min=0.5)
CFG = Config(scope=replace(Config().scope, mode="any"), refresh=REFRESH)


def all_due(hosts: int, per_host: int) -> list[UrlRecord]:
    """Finished URLs, every one due at 1,000 s, each visited at its own time (so their freshness
    boundaries differ: a step of the freshness walk stops between two boundaries only)."""
    records = []
    for h in range(hosts):
        for i in range(per_host):
            last = 2.0 + h + i / 100
            hist = observe(observe(History(), 1.0, True), last, True)
            records.append(UrlRecord(canon(f"http://h{h}.test/p{i}"), "fetched", "200", last,
                                     history=hist.encode().hex(), due=last))
    return records


def run_steps(rig: Rig, scan: DueScan, now: float, rows: int, hosts: int) -> list[int]:
    """Step ``scan`` to its end, applying each step's writes as the node does; the reads of each step."""
    index, reads = rig.raw._refresh.index, []
    for _ in range(10_000):
        before = index.reads
        step = rig.raw.scan_step(scan, now, rows=rows, hosts=hosts)
        reads.append(index.reads - before)
        rig.db.apply(step.writes)
        if step.value is not None:
            return reads
    raise AssertionError("the scan never ended")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), hosts=st.integers(1, 5), per_host=st.integers(1, 8),
       rows=st.integers(1, 12), plans=st.integers(1, 3), window=st.sampled_from((None, 60.0)))
def test_the_steps_queue_what_one_call_queues(seed: int, hosts: int, per_host: int, rows: int, plans: int,
                                              window: float | None) -> None:
    records = random_records(random.Random(seed), hosts, per_host)
    whole, stepped = (Rig(Path(f"unused-{k}"), cfg=CFG, backend="memory") for k in "ab")
    seeded(whole, records)
    seeded(stepped, records)
    now = 400.0
    one = whole.raw.requeue_due(now, window=window)
    scan = DueScan(now, window)
    writes: list[Write] = []
    index = stepped.raw._refresh.index
    for _ in range(10_000):
        step = stepped.raw.scan_step(scan, now, rows=rows, hosts=plans)
        writes += step.writes
        stepped.db.apply(step.writes)
        if step.value is not None:
            break
    assert (scan.queued, step.value) == one.value
    assert effect(writes, stepped) == effect(one.writes, whole)
    assert step.value == index.recount(now)


def test_each_step_reads_at_most_its_rows_and_plans_at_most_its_hosts(tmp_path: Path) -> None:
    """Ten hosts of 30 due URLs: a step reads at most its 7 rows (and the one row past the due ones that
    ends the first part), so a host's 30 rows take several steps; in the end it queued what one call
    queues."""
    rig, whole = Rig(tmp_path / "a", cfg=CFG), Rig(tmp_path / "b", cfg=CFG)
    seeded(rig, all_due(10, 30))
    seeded(whole, all_due(10, 30))
    scan = DueScan(1_000.0)
    reads = run_steps(rig, scan, 1_000.0, rows=7, hosts=1)
    assert max(reads) <= 8 and len(reads) >= 600 // 7
    assert scan.queued == whole.frontier.requeue_due(1_000.0)[0] > 250  # some spaced by the host budgets


def test_a_url_changed_between_two_steps_is_left_to_its_new_state(tmp_path: Path) -> None:
    """The due rows are all read (the first part), then one due URL is finished again and another is
    given a due time after the scan's ``now`` before their hosts are planned: neither is queued."""
    rig = Rig(tmp_path, cfg=CFG)
    seeded(rig, all_due(3, 4))
    scan = DueScan(1_000.0)
    while not scan.collected:
        rig.db.apply(rig.raw.scan_step(scan, 1_000.0, rows=1, hosts=1).writes)
    assert scan.queued == 0 and sum(len(due) for due in scan.found.values()) == 12
    out: list[Write] = []
    for url, due in ((canon("http://h1.test/p2"), None), (canon("http://h2.test/p0"), 5_000.0)):
        key = url_key(url)
        raw = rig.db.get("urls", key)
        assert raw is not None
        rec = replace(UrlRecord.decode(raw), due=due)
        out.append(Put("urls", key, rec.encode()))
        rig.raw._refresh.url_written(host_key(url), key, rec, out)
    rig.db.apply(out)
    run_steps(rig, scan, 1_000.0, rows=1, hosts=1)
    assert scan.queued == 10
    queued = {UrlRecord.decode(raw).url for key, raw in rig.db.items("urls")
              if UrlRecord.decode(raw).due is None}
    assert canon("http://h1.test/p2") in queued  # its own record, untouched by the scan
    assert rig.frontier.requeue_due(1_000.0)[0] == 0 and rig.frontier.requeue_due(6_000.0)[0] == 1


@pytest.mark.slow
def test_a_refresh_run_whose_scan_takes_many_steps_ends_after_it(test_web: TestWebFactory, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-off refresh run (no API: it ends once idle) with a scan of one row and one host a step:
    the frontier has nothing to lease until the scan's last hosts are planned, and the run goes on until
    every due page was fetched again."""
    web = test_web(SiteSpec(hosts=3, pages_per_host=4, seed=8, robots=("allow",)))
    fast = {"min_interval": 0.5, "max_interval": 1.0, "default_interval": 1.0, "min_visits": 1}
    first = crawl_config(web, tmp_path / "d", politeness={"rate": 20.0}, refresh={"enabled": False, **fast})
    again = crawl_config(web, tmp_path / "d", politeness={"rate": 20.0}, refresh={"enabled": True, **fast})

    async def crawl(cfg: Config) -> int:
        async with Crawler(cfg) as crawler:
            stats = await asyncio.wait_for(crawler.run(), 120)
            return stats.refresh_queued

    assert asyncio.run(crawl(first)) == 0
    pages = sorted(page_requests(web))
    assert len(pages) == 12
    time.sleep(1.5)  # every page is due 1 s after its fetch
    web.clear_log()
    monkeypatch.setattr(refresh_queue, "SCAN_ROWS", 1)
    monkeypatch.setattr(refresh_queue, "SCAN_HOSTS", 1)
    assert asyncio.run(crawl(again)) == 12
    assert sorted(page_requests(web)) == pages


def test_the_freshness_walk_in_steps_stops_between_boundaries_only(tmp_path: Path) -> None:
    """Groups of URLs with one freshness boundary each: a walk of one row a step passes a whole group or
    none of it (the cursor is a time), and its figures equal a recount."""
    rig = Rig(tmp_path, cfg=CFG)
    records = []
    for group in range(5):
        for i in range(4):
            hist = observe(observe(History(), 1.0, True), 2.0 + group, True)
            records.append(UrlRecord(canon(f"http://g{group}.test/p{i}"), "fetched", "200", 2.0 + group,
                                     history=hist.encode().hex()))
    seeded(rig, records)
    index = rig.raw._refresh.index
    steps = []
    for _ in range(100):
        before = index.reads
        fresh = index.freshness_step(1_000.0, 1)
        steps.append(index.reads - before)
        if fresh is not None:
            break
    assert fresh == index.recount(1_000.0) and fresh.tracked == 20
    assert len(steps) == 5 and all(n <= 5 for n in steps)  # a group of 4 and the row that ends the step
