"""An event loop whose clock is virtual: when nothing is ready, time jumps to the next timer instead of
waiting for it. Code that reads ``loop.time()`` and arms ``loop.call_at`` timers (the fetcher's
:class:`~polecat.fetch.deadline.Deadline`) runs under it exactly as written, in no real time, and a loaded
machine cannot reorder its timers: what a test asserts about elapsed time holds on any machine.

Only for code without real I/O waits: a socket that would become readable later is never waited for.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; a wait the loop asks for becomes a jump of the virtual clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self.now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector loop on virtual time (module docstring); ``time()`` starts at 0."""

    def __init__(self) -> None:
        self._jumps = _JumpingSelector()
        super().__init__(self._jumps)

    def time(self) -> float:
        return self._jumps.now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to its end on a fresh :class:`VirtualTimeLoop`."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
