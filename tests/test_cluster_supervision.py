"""Sans-IO parts of --workers: termination detection, merged stats, routing, layout and the flag; the
supervisor's restart backoff and stop bound on a FakeClock, over stand-in worker processes."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, cast

import pytest

from polecat.cluster.layout import (
    needs_resize,
    node_dirs,
    record_layout,
    resolve_workers,
    share,
    uses_workers,
    worker_config,
    worker_dir,
)
from polecat.cluster.termination import Report, Termination
from polecat.config import config_from_mapping
from polecat.dedup.bloom import ScalableBloom
from polecat.errors import ConfigError, PolecatError
from polecat.node import verdict
from polecat.node.crawler import Crawler
from polecat.node.stats import CrawlStats
from polecat.processes import supervisor
from polecat.processes.aggregate import merge_stats, stats_from_dict
from polecat.processes.supervisor import (
    ABORT_AFTER,
    FAST_DEATH,
    KILL_AFTER,
    Supervisor,
    _Worker,
    crawl_with_workers,
)
from polecat.testing.fakes import FakeClock
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests


def test_termination_needs_two_fresh_quiet_rounds_with_unchanged_counters() -> None:
    t = Termination()
    quiet = {"w0": Report(1, True, (5, 0, 0, 3)), "w1": Report(1, True, (7, 3, 3, 0))}
    assert not t.observe(quiet)
    assert not t.observe(quiet)  # nobody reported since: a stale view proves nothing
    fresh = {k: dataclasses.replace(r, seq=2) for k, r in quiet.items()}
    assert t.observe(fresh)
    # A member that received URLs since (its counters moved) restarts the count, even if quiet again.
    t = Termination()
    assert not t.observe(quiet)
    moved = {"w0": Report(2, True, (5, 0, 0, 9)), "w1": Report(2, True, (7, 9, 9, 0))}
    assert not t.observe(moved)
    assert t.observe({k: dataclasses.replace(r, seq=3) for k, r in moved.items()})
    # Anyone busy or silent: not finished.
    t = Termination()
    assert not t.observe({"w0": Report(1, True, ()), "w1": None})
    assert not t.observe({"w0": Report(2, True, ()), "w1": Report(1, False, ())})
    assert not t.observe({"w0": Report(3, True, ()), "w1": Report(2, True, ())})
    t.reset()
    assert not t.observe({"w0": Report(4, True, ()), "w1": Report(3, True, ())})
    assert t.observe({"w0": Report(5, True, ()), "w1": Report(4, True, ())})


def _stats(**over: Any) -> CrawlStats:
    base: dict[str, Any] = {}
    for f in dataclasses.fields(CrawlStats):
        if f.default is not dataclasses.MISSING:
            continue
        base[f.name] = 0.0 if f.type == "float" else (() if f.type.startswith("tuple") else 0)
    return CrawlStats(**(base | over))


def test_merged_stats_add_counters_over_lives_and_gauges_over_live_workers() -> None:
    w0 = _stats(fetches=10, queued=4, errors=(("dns", 1),), urls_done=(("fetched", 10),), answered=10,
                parked=(("a.test", "dns"),), dns_hit_ratio=0.5, next_ready_in=2.0, freshness=(4, 1, 2, 3))
    w1 = _stats(fetches=20, queued=6, errors=(("dns", 2), ("timeout", 1)), urls_done=(("fetched", 20),),
                dns_hit_ratio=1.0, next_ready_in=0.5)
    dead = _stats(fetches=5, queued=100, errors=(("timeout", 1),))
    m = merge_stats([w0, w1], [dead], 10.0, ended="queue empty")
    assert m.fetches == 35 and m.fetches_per_s == 3.5
    assert m.queued == 10  # the dead life's queue is the restarted worker's queue now
    assert m.errors == (("dns", 3), ("timeout", 2))
    assert m.urls_done == (("fetched", 30),)
    assert m.parked == (("a.test", "dns"),)
    assert m.dns_hit_ratio == 0.75 and m.next_ready_in == 0.5
    assert m.ended == "queue empty" and m.cause == ""
    assert m.freshness == (4, 1, 2, 3)  # a vector of counts from the one worker that has it
    assert merge_stats([w0, w0], [], 1.0).freshness == (8, 2, 4, 6)
    assert stats_from_dict(m.as_dict()) == m


def test_layout_and_when_slices_must_move(tmp_path: Path) -> None:
    data = tmp_path / "d"
    assert node_dirs(data) == [data]
    assert not uses_workers(data, 1) and uses_workers(data, 2)
    assert not needs_resize(data, 2)  # a new crawl: nothing to move
    record_layout(data, 2)
    for k in (0, 1):
        worker_dir(data, k).mkdir(parents=True)
    assert node_dirs(data) == [data / "workers" / "0", data / "workers" / "1"]
    assert uses_workers(data, 1)  # the layout stays, also with one worker
    assert not needs_resize(data, 2) and needs_resize(data, 3) and needs_resize(data, 1)
    single = tmp_path / "s"
    (single / "frontier").mkdir(parents=True)
    assert not uses_workers(single, 1) and needs_resize(single, 2)


def test_workers_setting_auto_and_bounds() -> None:
    assert config_from_mapping({}).workers == 1
    auto = config_from_mapping({"workers": "auto"})
    assert auto.workers == 0 and resolve_workers(auto) >= 1
    assert resolve_workers(config_from_mapping({"workers": 3})) == 3
    with pytest.raises(ConfigError, match="workers"):
        config_from_mapping({"workers": -1})
    with pytest.raises(ConfigError, match="workers"):
        config_from_mapping({"workers": "many"})


def test_library_entry_point_runs_the_crawl_over_workers(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=6, pages_per_host=10, seed=8))
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 20.0}, workers=2,
                       dedup={"expected_urls": 100_000})
    with pytest.raises(PolecatError, match="crawl_with_workers"):
        Crawler(cfg)  # a Crawler is one process: it refuses to pretend otherwise
    result = asyncio.run(crawl_with_workers(cfg))
    truth = web.ground_truth("host")
    assert result.stats.ended == "queue empty" and not result.interrupted and result.restarts == 0
    assert result.stats.fetches == len(truth) == len(set(page_requests(web)))
    assert result.handoff.urls_routed_out == result.handoff.urls_acked
    # Each worker's seen-set filter is sized for its half of the crawl, not for all of it.
    for k in range(2):
        bloom, _ = ScalableBloom.load(worker_dir(cfg.data_dir, k) / "seen.bloom")
        assert bloom.memory_bytes == ScalableBloom(50_000, cfg.dedup.bloom_fp_rate).memory_bytes


def test_crawl_wide_bounds_are_split_over_the_workers() -> None:
    assert [share(10, 3, k) for k in range(3)] == [4, 3, 3]
    assert sum(share(1_000_003, 4, k) for k in range(4)) == 1_000_003
    assert [share(2, 3, k) for k in range(3)] == [1, 1, 1]  # never 0: that would mean no limit
    cfg = config_from_mapping({"dedup": {"expected_urls": 10_000_000}})
    assert [worker_config(cfg, k, 3).dedup.expected_urls for k in range(3)] == [3_333_334, 3_333_333,
                                                                                3_333_333]
    assert worker_config(config_from_mapping({"dedup": {"expected_urls": 1000}}), 1, 4).dedup.expected_urls \
        == 1000  # the least the configuration accepts


class _StdinLog:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)


class _Proc:
    """A stand-in worker process: the commands written to it, its exit, whether it was killed."""

    def __init__(self) -> None:
        self.stdin = _StdinLog()
        self.stdout = asyncio.StreamReader()
        self.stdout.feed_eof()  # reports nothing: the supervisor's reader ends at once
        self.returncode: int | None = None
        self.killed = False

    def kill(self) -> None:
        self.killed = True

    @property
    def commands(self) -> list[bytes]:
        return self.stdin.lines


def _supervisor(tmp_path: Path, clock: FakeClock, workers: int = 2) -> Supervisor:
    sup = Supervisor(config_from_mapping({"data_dir": str(tmp_path)}), workers, clock=clock)
    sup._workers = [_Worker(k, tmp_path / f"w{k}.json") for k in range(workers)]
    return sup


async def test_a_stop_escalates_to_abort_then_kill_on_the_supervisors_clock(tmp_path: Path) -> None:
    """Rule 4's bound is measured on the injected clock from the stop: "abort" once ABORT_AFTER past
    the grace, a kill KILL_AFTER later; nothing before, however often the monitor looks."""
    clock = FakeClock()
    sup = _supervisor(tmp_path, clock)
    procs = [_Proc() for _ in sup._workers]
    for w, proc in zip(sup._workers, procs, strict=True):
        w.proc = cast(asyncio.subprocess.Process, proc)
    grace = sup.config.fetch.stop_grace
    sup.stop()
    assert [p.commands for p in procs] == [[b"stop\n"]] * 2
    clock.advance(grace + ABORT_AFTER - 0.01)
    sup._escalate()
    assert [p.commands for p in procs] == [[b"stop\n"]] * 2  # within the bound: still waiting
    clock.advance(0.01)
    sup._escalate()
    sup._escalate()
    assert [p.commands for p in procs] == [[b"stop\n", b"abort\n"]] * 2  # once
    procs[0].returncode = 0  # this one stopped; the other is stuck
    clock.advance(KILL_AFTER - 0.01)
    sup._escalate()
    assert not any(p.killed for p in procs)
    clock.advance(0.01)
    sup._escalate()
    assert [p.killed for p in procs] == [False, True]


async def test_a_worker_is_a_fault_after_three_fast_deaths_in_a_row_as_the_clock_counts_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 3: a death within FAST_DEATH of the start counts, a slower one resets the count; the spans
    are the injected clock's, so a worker that lived FAST_DEATH on it is restarted, not a fault."""
    clock = FakeClock()
    spawned: list[_Proc] = []

    async def exec_(*args: object, **kwargs: object) -> _Proc:
        spawned.append(_Proc())
        return spawned[-1]

    monkeypatch.setattr(supervisor.asyncio, "create_subprocess_exec", exec_)
    sup = _supervisor(tmp_path, clock, workers=1)
    w = sup._workers[0]

    async def dies_after(seconds: float) -> None:
        clock.advance(seconds)
        spawned[-1].returncode = 1
        await sup._exited(w)

    await sup._spawn(w)
    await dies_after(FAST_DEATH - 0.5)
    await dies_after(FAST_DEATH - 0.5)
    assert (sup.restarts, w.fast_deaths, w.done) == (2, 2, False)
    await dies_after(FAST_DEATH)  # lived long enough: the count starts again
    assert (sup.restarts, w.fast_deaths, w.done) == (3, 0, False)
    for _ in range(2):
        await dies_after(0.1)
    assert (sup.restarts, w.fast_deaths, w.done) == (5, 2, False)
    await dies_after(0.1)
    assert (sup.restarts, w.fast_deaths, w.done) == (5, 3, True)
    assert sup._ended == verdict.FAILED and sup._fault is not None and "3 times" in sup._fault
    assert len(spawned) == 6
