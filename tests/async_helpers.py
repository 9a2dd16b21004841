"""Shared helpers for tests of asyncio loops."""

from __future__ import annotations

import asyncio


async def ends_when_cancelled(task: asyncio.Task[None], after: int, within: float = 2.0) -> bool:
    """Cancel ``task`` ``after`` event-loop iterations from now; whether it then ended within ``within``
    seconds (on Python 3.11 ``asyncio.wait_for`` swallows a cancel that lands as the awaited call
    completes, CPython gh-86296, and a loop built on it runs on)."""
    for _ in range(after):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=within)
    return bool(done)
