"""One lazy timer per request for the first-byte, read-gap and total deadlines.

``asyncio.timeout`` plus a ``reschedule`` before every read costs a new timer handle per read. Here the
reader only records progress (``deadline.progress()``, a float store); the single timer is armed at the
earliest moment any rule could expire and, when it fires, re-arms itself if progress moved the true
deadline forward. A request that completes quickly creates exactly one timer handle.

Rules: before the response head, the request must get it by ``head_deadline``; after it, the gap
since the last progress must stay under ``gap``; always, ``total_deadline`` ends it. On expiry the
task is cancelled, and :meth:`Deadline.expired_here` tells the caller that this cancellation was ours
(so it becomes a timeout) and not a cancellation from outside (which must propagate).
"""

from __future__ import annotations

import asyncio

__all__ = ["Deadline"]


class Deadline:
    __slots__ = (
        "_body", "_cancelling", "_gap", "_handle", "_head", "_loop", "_task", "_total", "last", "reason",
    )

    def __init__(self, head_deadline: float, total_deadline: float, gap: float,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Arm for the current task; deadlines are ``loop.time()`` values. ``loop``: the running loop,
        from a caller that has it at hand (asking for it costs a ``getpid`` system call)."""
        loop = loop or asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("Deadline needs a running task")
        self._loop = loop
        self._task = task
        self._cancelling = task.cancelling()
        self._head = min(head_deadline, total_deadline)
        self._total = total_deadline
        self._gap = gap
        self._body = False
        self.last = loop.time()
        self.reason: str | None = None
        # gap is the earliest any rule can expire once the head arrives; before that, the head deadline.
        self._handle = loop.call_at(min(self._head, self.last + gap), self._fire)

    def body(self) -> None:
        """The response head is in: from now on the gap and total rules apply."""
        self._body = True
        self.last = self._loop.time()

    def progress(self) -> None:
        """Bytes arrived: restart the gap."""
        self.last = self._loop.time()

    def _fire(self) -> None:
        now = self._loop.time()
        if self._body:
            due = min(self.last + self._gap, self._total)
            reason = "total deadline" if due >= self._total else "read gap"
        else:
            due = self._head
            reason = "total deadline" if due >= self._total else "first byte"
        if due > now:
            self._handle = self._loop.call_at(due, self._fire)
            return
        self.reason = reason
        self._task.cancel()

    def cancel(self) -> None:
        """Disarm (always call, in a ``finally``)."""
        self._handle.cancel()

    def expired_here(self) -> bool:
        """After catching CancelledError: was it this deadline's (then swallow it as a timeout)?"""
        return self.reason is not None and self._task.uncancel() <= self._cancelling
