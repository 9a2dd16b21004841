"""The receiving end of the hand-off: a batch is answered "ok" only once its URLs are committed.

Rules:
1. A frame that does not decode is refused with "bad", one whose signature is missing or wrong (when
   the receiver verifies) with "unauthorized"; either changes nothing.
2. The inbox holds at most ``capacity`` URLs that are accepted but not yet committed. A batch that does
   not fit waits up to ``hold`` seconds for room (the sender's request simply takes longer), then is
   answered "busy" with a retry delay; it is never dropped: the sender keeps it and slows down
   (back-pressure). A batch larger than the whole capacity is let in when the inbox is empty, so no
   batch can be refused for ever.
3. The sink adds the URLs to this member's frontier and returns when a frontier commit holds them; only
   then is the batch acknowledged (at-least-once: a repeat is absorbed by the seen-set).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from polecat.cluster.batch import Batch, HandoffError, SignatureError, Verifier, decode_batch
from polecat.errors import PolecatError

BUSY_RETRY_AFTER = 0.25
"""Seconds a refused sender waits before offering again (about one frontier commit interval)."""
SHUTDOWN_TIMEOUT = 5.0
"""How long a stopping server lets a receive in progress finish (aiohttp's own default is 60 s): a receive
ends within a commit interval of its node's stop, so this only bounds a bug."""

DECODE_ON_LOOP = 64 * 1024
"""Bytes of a batch decoded on the event loop: decoding costs ~40 ms a MiB (10,000 URLs, 0.49 MB: 19 ms
of CPU), so a default batch of 1,024 URLs (~50 KB) stays on it and a bigger one goes to a thread."""
Status = Literal["ok", "busy", "bad", "unauthorized", "error"]


@dataclass(frozen=True, slots=True)
class Reply:
    """How a receiver answered one batch."""

    status: Status
    retry_after: float = 0.0
    detail: str = ""
    round: int = 0
    """With "ok" from a node with slice checkpoints: the checkpoint round that will hold the batch (the
    sender keeps it until then, outbox rule 3); 0: the batch may be dropped at once."""


class Inbox:
    """Capacity accounting of rule 2 (sans-IO)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0
        self.refused = 0

    def offer(self, urls: int) -> bool:
        """Reserve room for ``urls``; False when the batch must wait (rule 2)."""
        if self.in_use and self.in_use + urls > self.capacity:
            self.refused += 1
            return False
        self.in_use += urls
        return True

    def release(self, urls: int) -> None:
        self.in_use -= urls


Sink = Callable[[Batch], Awaitable[None]]


class HandoffReceiver:
    """Turns one request body into a :class:`Reply`, by the rules above."""

    def __init__(self, sink: Sink, *, capacity: int = 50_000, hold: float = 1.0,
                 retry_after: float = BUSY_RETRY_AFTER, verify: Verifier | None = None) -> None:
        self._sink = sink
        self._verify = verify
        self._hold = hold
        self._retry_after = retry_after
        self._room = asyncio.Event()
        self.inbox = Inbox(capacity)
        self.batches = self.urls = self.bad = self.unauthorized = 0

    def answer(self, data: bytes) -> Reply | None:
        """None: a batch waits for the inbox and the sink, so it is :meth:`receive` d (polecat/cluster/
        unixwire.py rule 4)."""
        return None

    async def receive(self, data: bytes) -> Reply:
        try:
            if len(data) > DECODE_ON_LOOP:  # up to MAX_BATCH_BYTES: decoded off the loop, which serves on
                batch = await asyncio.to_thread(decode_batch, data, self._verify)
            else:
                batch = decode_batch(data, self._verify)
        except SignatureError as exc:
            self.unauthorized += 1
            return Reply("unauthorized", detail=str(exc))
        except HandoffError as exc:
            self.bad += 1
            return Reply("bad", detail=str(exc))
        n = len(batch.urls)
        if not await self._admit(n):
            return Reply("busy", self._retry_after)
        try:
            await self._sink(batch)
        except PolecatError as exc:  # the member is stopping or cannot commit: the sender keeps the batch
            return Reply("error", detail=str(exc))
        finally:
            self.inbox.release(n)
            self._room.set()
        self.batches += 1
        self.urls += n
        return Reply("ok")

    async def _admit(self, n: int) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._hold):
                while not self.inbox.offer(n):
                    self._room.clear()
                    await self._room.wait()
                return True
        return False
