"""The lazy per-request timer: which rule fires, re-arming on progress, outside cancellation intact.

Every test runs on a virtual-time loop (polecat/testing/virtual_time.py): the timers fire in the order and
at the times written, on a loaded machine too, so a deadline's time is asserted exactly."""

from __future__ import annotations

import asyncio

import pytest

from polecat.fetch.deadline import Deadline
from polecat.testing.virtual_time import run_virtual


async def guarded(deadline_args: tuple[float, float, float], body: object) -> tuple[str, float]:
    """Run ``body(deadline)`` under a Deadline: the reason if it expired, else "done", and the (virtual)
    time it took."""
    loop = asyncio.get_running_loop()
    head, total, gap = deadline_args
    now = loop.time()
    d = Deadline(now + head, now + total, gap)
    try:
        await body(d)  # type: ignore[operator]
    except asyncio.CancelledError:
        if d.expired_here():
            return str(d.reason), loop.time() - now
        raise
    finally:
        d.cancel()
    return "done", loop.time() - now


def test_head_deadline() -> None:
    async def never(d: Deadline) -> None:
        await asyncio.sleep(10)

    assert run_virtual(guarded((0.05, 1.0, 0.01), never)) == ("first byte", pytest.approx(0.05))


def test_gap_restarts_on_progress_and_then_fires() -> None:
    async def trickle(d: Deadline) -> None:
        d.body()
        for _ in range(5):  # 5 x 30 ms, each under the 60 ms gap: no expiry
            await asyncio.sleep(0.03)
            d.progress()
        await asyncio.sleep(1)

    # Five restarts, then the gap runs out 60 ms after the last progress.
    assert run_virtual(guarded((1.0, 5.0, 0.06), trickle)) == ("read gap", pytest.approx(5 * 0.03 + 0.06))


def test_total_deadline_beats_steady_progress() -> None:
    async def steady(d: Deadline) -> None:
        d.body()
        while True:
            await asyncio.sleep(0.01)
            d.progress()

    assert run_virtual(guarded((1.0, 0.15, 0.05), steady)) == ("total deadline", pytest.approx(0.15))


def test_quick_body_completes() -> None:
    async def quick(d: Deadline) -> None:
        d.body()
        await asyncio.sleep(0.01)

    assert run_virtual(guarded((1.0, 1.0, 0.5), quick)) == ("done", pytest.approx(0.01))


def test_outside_cancellation_propagates() -> None:
    async def never(d: Deadline) -> None:
        await asyncio.sleep(10)

    async def main() -> None:
        task = asyncio.create_task(guarded((5.0, 5.0, 5.0), never))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(main())
