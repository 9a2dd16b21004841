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


class LoopTurns:
    """Counts the turns the event loop gives another task while ``async with`` it runs: a call that
    holds the loop throughout leaves it at 0."""

    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        self.turns = 0
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
