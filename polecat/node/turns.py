"""Turns of page work: how much of one event-loop iteration the responses' CPU steps may take.

Each lease is its own task, and every response read in one poll of the loop makes its task ready in the
same iteration: the loop then ran all of their pipeline steps back to back, ~100 of ~0.3 ms in an
iteration of a 1M-host breadth crawl (30-50 ms, and more with a collection inside;
benchmarks/README.md, "Issue 39: the loop in the 1M-host breadth crawl"). The CPU is the bottleneck
either way: a turn changes the order of the work, not its amount.

Rules:

1. A step of page work (polecat/node/lease_runner.py rule 10 says which) takes a turn before it runs.
   Turns are granted in windows: a window opens at the first turn granted after a tick (rule 3), and a
   turn is granted while less than the window's budget of seconds (:data:`TURN_SECONDS` on the node's
   clock) has passed since it opened; the first turn of a window always is. So a window runs at most
   its budget of work, and one step more, whatever else ran between its turns counted in it.
2. Turns are granted first come, first served: while any step waits, or was woken and has not run yet,
   a new one waits behind it. A woken step that finds its window spent goes back to the front, ahead of
   those behind it, in its order.
3. A tick ends the window: a callback the loop runs in its next iteration (asyncio and uvloop run only
   the handles ready when an iteration begins; what they schedule runs in the next one). One is
   scheduled whenever none is and a window is open or a step waits, so a window ends in the iteration
   it opened in or early in the next, and no waiter waits for a tick that does not come. A tick wakes
   the waiters at the front, then schedules the next tick: the steps it woke run first in the next
   iteration, in one window, which that next tick ends. So while steps wait, each iteration has one
   window; an iteration has two (one ending, one opening) at most, as the queue runs dry. A tick wakes
   as many as the last window that ended on its budget granted (more, if a window granted more without
   ending), a quarter more and one more: for the windows to keep ending on their budget, and so measure
   again, as the steps' cost moves; at most :data:`MOST_WOKEN` woken at once; at least one, so a waiter
   is woken within as many ticks as there are waiters ahead of it, and none starves.
4. A step that waits and is cancelled (the node stops, an abort) leaves the queue, or gives back the
   turn it was woken for.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["MOST_WOKEN", "TURN_SECONDS", "PageTurns", "TurnPolicy"]

T = TypeVar("T")

TURN_SECONDS = 0.01
"""Seconds of page work a window grants turns for (rule 1): ~30 page steps of a breadth crawl, a fifth
of the issue's 50 ms bound on a loop iteration, for the rest of it (reads, timers, leases, a commit's
step, a young collection)."""
MOST_WOKEN = 256
"""Waiters one tick wakes at most (rule 3)."""
FIRST_WOKEN = 8
"""Waiters a tick wakes before any window has ended on its budget (rule 3)."""


class TurnPolicy(Generic[T]):
    """Rules 1-4's decisions, sans I/O: ``now`` comes in, the waiters to wake go out. A waiter is any
    hashable token (the node's hold the future their task waits on)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._opened: float | None = None
        """When the open window opened; None: the next turn granted opens one (rule 1)."""
        self._granted = 0
        """Turns granted in the open window."""
        self._ended = False
        """Whether the open window refused a turn (ended on its budget)."""
        self._fit = FIRST_WOKEN
        self._queue: deque[T] = deque()
        self._back: list[T] = []
        """Woken waiters that found their window spent, in order: the front of the queue at the next
        tick (rule 2)."""
        self._woken: set[T] = set()
        self.tick_pending = False
        """Set by the caller when it schedules a tick; :meth:`tick` clears it."""

    @property
    def waiting(self) -> int:
        """Steps waiting for a turn, woken or not."""
        return len(self._queue) + len(self._back) + len(self._woken)

    def wants_tick(self) -> bool:
        """Whether a tick must be scheduled now (rule 3): none is, and a window is open or a step waits."""
        return not self.tick_pending and (self._opened is not None or self.waiting > 0)

    def _grant(self, now: float) -> bool:
        if self._opened is None:
            self._opened, self._granted, self._ended = now, 1, False
            return True
        if now - self._opened < self.seconds:
            self._granted += 1
            return True
        self._ended = True
        return False

    def ask(self, now: float) -> bool:
        """A step asks for a turn at ``now``: True, it runs now; False, it must wait (:meth:`enqueue`)."""
        return not self.waiting and self._grant(now)

    def enqueue(self, waiter: T) -> None:
        """``waiter`` waits for a tick to wake it, behind those that wait already (rule 2)."""
        self._queue.append(waiter)

    def resumed(self, waiter: T, now: float) -> bool:
        """A woken ``waiter`` runs at ``now``: True, it has its turn; False, it waits at the front again
        (rule 2)."""
        self._woken.discard(waiter)
        if self._grant(now):
            return True
        self._back.append(waiter)
        return False

    def tick(self) -> list[T]:
        """The tick (rule 3): the open window ends; returns the waiters to wake, in order."""
        self.tick_pending = False
        if self._opened is not None and (self._ended or self._granted > self._fit):
            self._fit = self._granted
        self._opened = None
        if self._back:
            self._queue.extendleft(reversed(self._back))
            self._back.clear()
        n = min(len(self._queue), MOST_WOKEN - len(self._woken), self._fit + self._fit // 4 + 1)
        woken = [self._queue.popleft() for _ in range(n)]
        self._woken.update(woken)
        return woken

    def cancelled(self, waiter: T) -> None:
        """``waiter`` will not run (rule 4)."""
        if waiter in self._woken:
            self._woken.discard(waiter)
        elif waiter in self._back:
            self._back.remove(waiter)
        else:
            self._queue.remove(waiter)


class _Waiter:
    """A step waiting for its turn: the future its task waits on, made anew each time it waits."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future


class PageTurns:
    """The node's turns of page work (the rules above) on the running loop: :meth:`take` before a step."""

    def __init__(self, monotonic: Callable[[], float], seconds: float = TURN_SECONDS) -> None:
        self._now = monotonic
        self.policy: TurnPolicy[_Waiter] = TurnPolicy(seconds)

    async def take(self) -> None:
        """Return once the calling step has its turn (rules 1-2); at once while the window has room."""
        policy = self.policy
        loop = asyncio.get_running_loop()
        if not policy.ask(self._now()):
            waiter = _Waiter(loop.create_future())
            policy.enqueue(waiter)
            while True:
                self._schedule(loop)
                try:
                    await waiter.future
                except asyncio.CancelledError:
                    policy.cancelled(waiter)  # rule 4
                    raise
                if policy.resumed(waiter, self._now()):
                    break
                waiter.future = loop.create_future()
        self._schedule(loop)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.policy.wants_tick():
            self.policy.tick_pending = True
            loop.call_soon(self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        for waiter in self.policy.tick():
            if not waiter.future.done():  # else its task was cancelled and will say so (rule 4)
                waiter.future.set_result(None)
        # After the wakes: the steps woken run in the next iteration ahead of the next tick, which ends
        # the window they open (rule 3).
        self._schedule(loop)
