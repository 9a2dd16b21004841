"""The lazy per-request timer: which rule fires, re-arming on progress, outside cancellation intact."""

from __future__ import annotations

import asyncio

import pytest

from polecat.fetch.deadline import Deadline


async def guarded(deadline_args: tuple[float, float, float], body: object) -> str:
    """Run ``body(deadline)`` under a Deadline; the reason if it expired, else "done"."""
    loop = asyncio.get_running_loop()
    head, total, gap = deadline_args
    now = loop.time()
    d = Deadline(now + head, now + total, gap)
    try:
        await body(d)  # type: ignore[operator]
    except asyncio.CancelledError:
        if d.expired_here():
            return str(d.reason)
        raise
    finally:
        d.cancel()
    return "done"


async def test_head_deadline() -> None:
    async def never(d: Deadline) -> None:
        await asyncio.sleep(10)

    assert await guarded((0.05, 1.0, 0.01), never) == "first byte"


async def test_gap_restarts_on_progress_and_then_fires() -> None:
    async def trickle(d: Deadline) -> None:
        d.body()
        for _ in range(5):  # 5 x 30 ms, each under the 60 ms gap: no expiry
            await asyncio.sleep(0.03)
            d.progress()
        await asyncio.sleep(1)

    loop = asyncio.get_running_loop()
    t = loop.time()
    assert await guarded((1.0, 5.0, 0.06), trickle) == "read gap"
    assert 0.2 < loop.time() - t < 0.5


async def test_total_deadline_beats_steady_progress() -> None:
    async def steady(d: Deadline) -> None:
        d.body()
        while True:
            await asyncio.sleep(0.01)
            d.progress()

    assert await guarded((1.0, 0.15, 0.05), steady) == "total deadline"


async def test_quick_body_completes() -> None:
    async def quick(d: Deadline) -> None:
        d.body()
        await asyncio.sleep(0.01)

    assert await guarded((1.0, 1.0, 0.5), quick) == "done"


async def test_outside_cancellation_propagates() -> None:
    async def never(d: Deadline) -> None:
        await asyncio.sleep(10)

    task = asyncio.create_task(guarded((5.0, 5.0, 5.0), never))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
