"""Smoke test of benchmarks/bench_claims.py: one process and two workers crawl a tiny mirrored web; what
becomes of every page URL after a stop (``account_pages``); the steady window's arithmetic and the CPU of
a process tree it samples."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.bench_claims import (
    PageAccount,
    Sample,
    SteadyWindow,
    account_pages,
    main,
    repeated,
    tree_cpu_seconds,
    worker_runs,
)
from polecat import Crawler
from polecat.config import Config
from polecat.frontier.opener import open_frontier
from polecat.frontier.status import read_queued
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests, stored_records
from tests.frontier_helpers import queued_urls_in


async def crawl(cfg: Config) -> None:
    async with Crawler(cfg) as crawler:
        await crawler.run()


def test_bench_claims_measures_the_collapse_of_one_process_and_of_workers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # rate 20: each host's 10 pages take 0.5 s, so the 50 ms polls see the steady window's two marks apart
    assert main(["--hosts", "4", "--pages-per-host", "10", "--rate", "20", "--workers", "2",
                 "--out", str(tmp_path), "--timeout", "120"]) == 0
    rows = [[c.strip().replace(",", "") for c in line.split("|")[1:-1]]
            for line in capsys.readouterr().out.splitlines()
            if line.startswith("| 1 process") or line.startswith("| 2 workers")]
    assert len(rows) == 2
    assert rows[0][1] == rows[1][1] and int(rows[0][1]) > 0  # the same pages
    assert all(0 < float(r[4]) < 1.5 and int(r[6]) > 0 for r in rows)  # mirrors became revisits
    for r in rows:
        pages, cpu_s, pages_s, steady_s, steady_ms, steady_pages_s = (
            int(r[1]), float(r[8]), float(r[10]), float(r[11]), float(r[12]), float(r[13]))
        # the window: some pages, some CPU, inside the whole crawl's span and CPU (0.05: their rounding)
        assert 0 < steady_s <= pages / pages_s + 0.05 and steady_ms > 0 and steady_pages_s > 0
        assert steady_ms * steady_pages_s * steady_s / 1000 <= cpu_s + 0.05


def test_repeated_crawls_give_medians_and_each_repetition_s_change_against_claims_off() -> None:
    """``--repeat``: a run's medians over its windows, its changes paired repetition by repetition with
    the same count's claims-off crawls; a window not reached is left out of both."""
    table = repeated({
        "4 workers": [(10.0, 0.90, 1000.0), (10.0, 0.60, 1500.0), None],
        "4 workers, claims off": [(10.0, 0.75, 1250.0), (10.0, 0.50, 2000.0), (10.0, 0.40, 3000.0)],
        "3 nodes": [None],
    }).splitlines()
    assert table[2] == "| 4 workers | 2 of 3 | 0.75 | 1,250 | +20%, +20% (+20%) | -20%, -25% (-22%) |"
    assert table[3] == "| 4 workers, claims off | 3 of 3 | 0.50 | 2,000 | - | - |"
    assert table[4] == "| 3 nodes | 0 of 1 | - | - | - | - |"


def test_each_pair_of_crawls_runs_back_to_back_and_turns_round_each_repetition() -> None:
    args = argparse.Namespace(workers=[2, 4], without=True)
    assert [name for rep in range(2) for name, _, _ in worker_runs(args, rep)] == [
        "1 process", "2 workers", "2 workers, claims off", "4 workers", "4 workers, claims off",
        "1 process", "2 workers, claims off", "2 workers", "4 workers, claims off", "4 workers"]
    assert worker_runs(argparse.Namespace(workers=[2], without=False), 1) == [
        ("1 process", 0, True), ("2 workers", 2, True)]


def test_steady_window_samples_at_its_marks_and_divides_what_lies_between() -> None:
    window = SteadyWindow(100, (0.2, 0.8), (0.2, 0.8))
    clock = iter(range(1, 100))
    reads: list[int] = []

    def read() -> tuple[float, float]:
        """A fake crawl: 0.5 CPU seconds and 2 s of time a read."""
        t = next(clock)
        reads.append(t)
        return t * 0.5, t * 2.0

    for served in (0, 5, 19):
        window.observe(served, read)
    assert reads == [] and window.figures() is None
    window.observe(23, read)  # past the 20 % mark: the start sample, with the count as read, not the mark
    window.observe(60, read)
    assert window.samples == [Sample(23, 0.5, 2.0)] and window.figures() is None
    window.observe(83, read)
    window.observe(100, read)  # past the end: no more samples
    assert window.samples == [Sample(23, 0.5, 2.0), Sample(83, 1.0, 4.0)]
    assert window.figures() == pytest.approx((2.0, 0.5 * 1000 / 60, 60 / 2.0))


def test_steady_window_takes_one_mark_a_poll_and_has_no_figures_for_an_empty_window() -> None:
    window = SteadyWindow(10, (0.2, 0.8), (0.2, 0.8))
    window.observe(10, lambda: (1.0, 5.0))  # past both marks at once: the start sample only
    window.observe(10, lambda: (2.0, 6.0))  # the end, no page between them
    assert window.samples == [Sample(10, 1.0, 5.0), Sample(10, 2.0, 6.0)]
    assert window.figures() is None


def test_steady_window_of_the_middle_marks_and_the_cpu_of_each_step() -> None:
    window = SteadyWindow(100, (0.1, 0.2, 0.5, 0.9), (0.2, 0.5))
    for served, cpu_s, at in ((10, 1.0, 1.0), (20, 2.0, 2.0), (50, 2.6, 4.0), (80, 3.0, 5.0)):
        window.observe(served, lambda cpu_s=cpu_s, at=at: (cpu_s, at))
    assert window.marks == (10, 20, 50, 90)
    assert window.figures() == pytest.approx((2.0, 0.6 * 1000 / 30, 15.0))  # from 20 to 50, not 10 or 80
    assert window.steps() == [pytest.approx(100.0), pytest.approx(20.0), None]  # 90 not reached


def test_tree_cpu_seconds_counts_the_children_of_a_process() -> None:
    """A parent that only waits and its child that burns 0.3 s of CPU: the tree holds the child's time.
    Each waits on its stdin, so the child ends with its parent."""
    child = "import sys, time\nwhile time.process_time() < 0.3: pass\nprint(flush=True)\nsys.stdin.read()\n"
    parent = ("import subprocess, sys\n"
              f"child = subprocess.Popen([sys.executable, '-c', {child!r}], stdin=subprocess.PIPE,"
              " stdout=subprocess.PIPE)\n"
              "child.stdout.readline()\nprint(flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdout.readline()
        assert tree_cpu_seconds(proc.pid) >= 0.3
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_account_pages_tells_a_request_cut_at_the_stop_from_a_lost_page(
        test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=3, pages_per_host=12, seed=5))
    cfg = crawl_config(web, tmp_path / "d", politeness={"rate": 50.0}, scope={"max_pages": 10})
    asyncio.run(crawl(cfg))
    asked = page_requests(web)
    stored = {r.url for r in stored_records(tmp_path / "d")}
    frontier = open_frontier(cfg, time.time())
    queued = set(queued_urls_in(frontier.db.txn.cursor(db=frontier.db.hosts),
                                frontier.db.txn.cursor(db=frontier.db.queue)))
    frontier.close()
    assert set(read_queued(tmp_path / "d" / "frontier")) == queued and len(queued) > 2
    assert set(asked) == stored and len(stored) == 10
    cut, *unasked = sorted(queued)
    gone = f"http://{web.site.hosts[0]}:{web.port}/never-stored.html"
    pages = account_pages([*asked, cut, gone], [tmp_path / "d"])
    assert pages == PageAccount(stored=10, cut=(cut,), unasked=tuple(unasked), failed=(), lost=(gone,))
