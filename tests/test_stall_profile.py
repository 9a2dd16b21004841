"""The stall profiler of bench_scale (benchmarks/stall_profile.py): a step that uses 30 ms of the loop
thread's CPU is kept under its task's name, with where its stack was; steps of less are not. The steps
are made of CPU time (spun on ``time.thread_time``), so a loaded machine cannot shorten them."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from benchmarks.stall_profile import STEP, StallProfile, report


def spin(cpu: float) -> None:
    until = time.thread_time() + cpu
    while time.thread_time() < until:
        pass


async def long_step() -> None:
    spin(STEP + 0.01)


async def short_steps() -> None:
    for _ in range(5):
        spin(STEP / 10)
        await asyncio.sleep(0)


async def crawl() -> None:
    await asyncio.gather(long_step(), short_steps())


def test_a_long_step_is_kept_by_its_task_and_short_ones_are_not(tmp_path: Path) -> None:
    profile = StallProfile()
    profile.install()
    try:
        asyncio.run(crawl())
    finally:
        profile.uninstall()
    found = profile.as_dict()
    assert list(found["steps"]) == ["task long_step"]
    step = found["steps"]["task long_step"]
    assert step["count"] == 1 and step["over_50ms"] == 0 and step["max_ms"] >= STEP * 1000
    assert any("spin" in where for where, _ in step["where"])  # sampled while it ran
    assert found["iterations_over_30ms"] >= 1
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(found))
    assert any("task long_step: 1 " in line for line in report(path))
