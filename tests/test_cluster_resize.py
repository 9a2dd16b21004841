"""Changing --workers between runs of one crawl: slices move with export/adopt before anything is fetched."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from polecat.cluster.batch import HandoffUrl
from polecat.cluster.layout import (
    LAYOUT_FILE,
    needs_resize,
    record_layout,
    recorded_ring,
    recorded_workers,
    worker_config,
    worker_dir,
)
from polecat.cluster.outbox import Outbox
from polecat.cluster.resize import JOURNAL, member_ids, resize
from polecat.cluster.ring import RING_VERSION, Ring
from polecat.config import Config, config_from_mapping
from polecat.frontier.opener import open_frontier
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests
from tests.frontier_helpers import queued_urls_in
from tests.test_crawl_restart import crawl_cmd, finish, start


def _pages(data: Path) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "polecat", "pages", str(data)], capture_output=True,
                         text=True, timeout=60)
    return {line.split("\t")[0] for line in out.stdout.splitlines()[1:]}  # after the header line


@pytest.mark.slow
def test_two_then_three_then_one_workers_cover_everything_once(test_web: TestWebFactory,
                                                               tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=20, pages_per_host=30, seed=13))
    rate, data = 20.0, tmp_path / "data"
    truth = web.ground_truth("host")
    moved = []
    for workers, max_pages in (("2", "150"), ("3", "150"), ("1", "0")):
        extra = ["--workers", workers] + (["--max-pages", max_pages] if max_pages != "0" else [])
        code, output = finish(start(crawl_cmd(web, data, rate, *extra), data), timeout=180)
        assert code == 0, output
        moved += [line for line in output.splitlines() if " workers: " in line and "slices moved" in line]
        if max_pages != "0":
            assert len(set(page_requests(web))) < len(truth)
    assert [m.split(":")[1].strip() for m in moved] == ["2 -> 3 workers", "3 -> 1 workers"], moved
    counts = Counter(page_requests(web))
    assert set(counts) == truth
    # Clean stops between the runs: nothing is fetched twice (the commit window is never replayed).
    assert max(counts.values()) == 1, [u for u, n in counts.items() if n > 1]
    assert politeness_violations(web.log, web.min_intervals(rate)) == []
    robots = Counter(r.host for r in web.log if r.target == "/robots.txt")
    assert max(robots.values()) == 1  # robots answers moved with their hosts
    assert _pages(data) == truth  # workers 1 and 2 of the 3-worker run kept their stores: still read
    assert (data / "workers" / "2").is_dir() and not (data / "resize.json").exists()


def test_a_one_process_crawl_continues_with_two_workers(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=10, pages_per_host=20, seed=4))
    rate, data = 20.0, tmp_path / "data"
    code, output = finish(start(crawl_cmd(web, data, rate, "--max-pages", "60"), data))
    assert code == 0, output
    code, output = finish(start(crawl_cmd(web, data, rate, "--workers", "2"), data))
    assert code == 0, output
    assert "1 -> 2 workers" in output, output
    counts = Counter(page_requests(web))
    assert set(counts) == web.ground_truth("host")
    assert max(counts.values()) == 1
    assert politeness_violations(web.log, web.min_intervals(rate)) == []
    assert not (data / "frontier").exists() and (data / "workers" / "0" / "frontier").is_dir()


def _queued_by_worker(cfg: Config, n: int) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for k in range(n):
        lf = open_frontier(worker_config(cfg, k, n), time.time())
        try:
            txn = lf.db.txn
            out[k] = set(queued_urls_in(txn.cursor(db=lf.db.hosts), txn.cursor(db=lf.db.queue)))
        finally:
            lf.close()
    return out


def _queue_by_ring(cfg: Config, ring: Ring, urls: list[str]) -> None:
    now = time.time()
    for k in range(len(ring.members)):
        lf = open_frontier(worker_config(cfg, k, len(ring.members)), now)
        for u in urls:
            if ring.owner(slice_of(host_key(u))) == f"w{k}":
                lf.db.applied(lf.frontier.add(u, 1, 1.0, now))
        lf.commit()
        lf.close()


def test_a_layout_of_the_first_ring_version_moves_to_the_current_one(tmp_path: Path) -> None:
    cfg = config_from_mapping({"data_dir": str(tmp_path / "d"), "scope": {"mode": "any"}})
    urls = [f"http://h{i}.test/p" for i in range(300)]
    old = Ring(member_ids(3), version=1)
    (cfg.data_dir / "workers").mkdir(parents=True)
    (cfg.data_dir / LAYOUT_FILE).write_text(json.dumps({"workers": 3}))  # as written before "ring"
    _queue_by_ring(cfg, old, urls)
    assert recorded_ring(cfg.data_dir) == 1 and needs_resize(cfg.data_dir, 3)
    report = resize(cfg, 3)
    new = Ring(member_ids(3))
    assert report.slices_moved == len(old.moves(new)) > 0
    queued = _queued_by_worker(cfg, 3)
    for k, got in queued.items():
        assert all(new.owner(slice_of(host_key(u))) == f"w{k}" for u in got), k
    assert sorted(u for got in queued.values() for u in got) == sorted(urls)
    assert recorded_ring(cfg.data_dir) == RING_VERSION and not needs_resize(cfg.data_dir, 3)


def test_resize_moves_queues_and_outboxes_to_the_new_owners_and_survives_a_repeat(tmp_path: Path) -> None:
    cfg = config_from_mapping({"data_dir": str(tmp_path / "d"), "scope": {"mode": "any"}})
    urls = [f"http://h{i}.test/p{j}" for i in range(60) for j in range(3)]
    two = Ring(member_ids(2))
    record_layout(cfg.data_dir, 2)
    _queue_by_ring(cfg, two, urls)
    # w0 still had URLs of w1's hosts waiting in its outbox: they must reach their owner under 3 workers.
    waiting = [f"http://late{i}.test/x" for i in range(20)]
    box = Outbox(worker_dir(cfg.data_dir, 0) / "handoff")
    box.put("w1", [HandoffUrl(u, 1, 1.0) for u in waiting])
    box.commit()
    box.close()
    report = resize(cfg, 3)
    assert (report.old, report.new, report.outbox_urls) == (2, 3, 20)
    three = Ring(member_ids(3))
    assert report.slices_moved == len(two.moves(three))
    queued = _queued_by_worker(cfg, 3)
    for k, got in queued.items():
        assert all(three.owner(slice_of(host_key(u))) == f"w{k}" for u in got), k
    assert set().union(*queued.values()) == set(urls) | set(waiting)
    assert sum(len(v) for v in queued.values()) == len(urls) + len(waiting)  # nothing queued twice
    # A crash after the work but before the journal was removed: the next run redoes it harmlessly.
    (cfg.data_dir / JOURNAL).write_text(json.dumps({"from": 2, "to": 3, "ring": RING_VERSION}))
    again = resize(cfg, 3)
    assert again.queued == 0 and again.outbox_urls == 0
    assert _queued_by_worker(cfg, 3) == queued
    assert recorded_workers(cfg.data_dir) == 3 and not (cfg.data_dir / JOURNAL).exists()
