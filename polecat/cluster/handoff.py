"""The hand-off driver: runs the sender's decisions (:mod:`.sender`) over the outbox and a transport.

The node stages URLs for other owners here (:meth:`Handoff.stage`) and commits the outbox in its
own commit (:meth:`Handoff.commit`, outbox rule 2); this task sends sealed batches, and deletes each one
from the outbox when its receiver acknowledges it. ``backlog()`` is what the node uses to slow its own
fetching while a peer is slow to accept (back-pressure reaches the pages that discover the URLs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.batch import HandoffUrl, Signer, decode_urls, encode_batch
from polecat.cluster.outbox import Outbox
from polecat.cluster.sender import HandoffSender, Send

if TYPE_CHECKING:
    from polecat.cluster.transport import Transport

log = logging.getLogger("polecat.handoff")


class Handoff:
    """Sends one member's outbox to its peers; see the module docstring."""

    def __init__(self, self_id: str, outbox: Outbox, transport: Transport, addresses: Mapping[str, str], *,
                 sender: HandoffSender | None = None, sign: Signer | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._self_id = self_id
        self._outbox = outbox
        self._transport = transport
        self._addresses = dict(addresses)
        self._withheld: frozenset[str] = frozenset()
        self._sign = sign
        self._clock = clock
        self.sender = sender or HandoffSender()
        for peer, seqs in outbox.pending().items():
            for seq in seqs:
                self.sender.queued(peer, seq)
        self._wake = asyncio.Event()
        self._acked = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.urls_acked = 0
        self.bytes_sent = 0

    def set_addresses(self, addresses: Mapping[str, str], withheld: frozenset[str] = frozenset()) -> None:
        """Peers' addresses from a new member list (batches for a peer not in it wait in the outbox), and
        the peers sent nothing (their batches wait in the outbox too: polecat/cluster/wire.py rule 4)."""
        self._addresses = dict(addresses)
        self._withheld = withheld
        self._wake.set()

    def reroute(self, peer: str, route: Callable[[list[HandoffUrl]], None]) -> int:
        """``peer`` left the cluster: its URLs (staged, and sealed batches not in flight) go to
        ``route``, which stages them for their new owners, and its batches are dropped, in the same
        outbox transaction (durable at the next :meth:`commit`). Returns the URLs moved."""
        urls = self._outbox.take_staged(peer)
        for seq in self._outbox.pending().get(peer, []):
            if self.sender.forget(peer, seq):
                urls += decode_urls(self._outbox.read(peer, seq))
                self._outbox.ack(peer, seq)
        if urls:
            route(urls)
        self._acked.set()  # their batches are gone: a wait in settled() looks again
        return len(urls)

    def release(self, peer: str, round_: int) -> int:
        """``peer``'s checkpoint reached ``round_``: the held batches it holds are dropped (durable at
        the next :meth:`commit`); returns how many."""
        return self._outbox.release(peer, round_)

    def reroute_held(self, peer: str, route: Callable[[list[HandoffUrl]], None]) -> int:
        """``peer`` died: the batches held for it (its checkpoint never held them) go to ``route``
        (durable at the next :meth:`commit`). Returns the URLs moved."""
        urls = self._outbox.take_held(peer)
        if urls:
            route(urls)
        return len(urls)

    async def settled(self, within: float) -> bool:
        """Wait until every batch sealed by the last :meth:`commit` is acknowledged (held or dropped);
        False if some are not after ``within`` seconds."""
        waiting = {(peer, seq) for peer, seqs in self._outbox.pending().items() for seq in seqs}
        try:
            async with asyncio.timeout(within):
                while waiting:
                    self._acked.clear()
                    pending = self._outbox.pending()
                    waiting = {(p, s) for p, s in waiting if s in pending.get(p, ())}
                    if waiting:
                        await self._acked.wait()
        except TimeoutError:
            return False
        return True

    def stage(self, peer: str, urls: list[HandoffUrl]) -> None:
        """Queue ``urls`` for their owner ``peer`` (durable at the next :meth:`commit`)."""
        for seq in self._outbox.put(peer, urls):
            self.sender.queued(peer, seq)
        self._wake.set()

    def commit(self) -> None:
        """Seal and persist the outbox; the node calls it after the store flush, before the frontier
        commit."""
        self.start_commit()
        self.finish_commit()

    def start_commit(self) -> Future[Any]:
        """:meth:`commit` with its fsync on the outbox's writer thread; :meth:`finish_commit` ends it."""
        return self._outbox.start_commit()

    def finish_commit(self) -> None:
        """Wait for the commit :meth:`start_commit` started, then send what it sealed."""
        for peer, seq in self._outbox.finish_commit():
            self.sender.queued(peer, seq)
        self._wake.set()

    def backlog(self) -> int:
        """URLs staged or sent but not yet acknowledged."""
        return self._outbox.backlog()

    def sendable_backlog(self) -> int:
        """:meth:`backlog` without the withheld peers': what is kept for a peer this node does not send
        to (one it shares no wire version with, polecat/cluster/wire.py rule 4) waits for it without
        slowing the node's own fetching (link rule 3)."""
        withheld = self._withheld
        return self._outbox.backlog(lambda peer: peer not in withheld)

    async def run(self) -> None:
        """Send until cancelled."""
        try:
            while True:
                plan = self.sender.next(self._clock.monotonic())
                for send in plan.sends:
                    task = asyncio.create_task(self._send(send))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                self._wake.clear()
                timeout = None if plan.wake_at is None else max(0.0, plan.wake_at - self._clock.monotonic())
                # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that arrives while the event
                # it waits on is being set (CPython gh-86296), and this loop then ran on after its
                # worker's stop, waiting for a wake-up that never came (the rare worker shutdown hang).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Commit, then wait until every batch is acknowledged (a clean stop; bound it with
        ``asyncio.timeout``: what is left stays in the outbox for the next run)."""
        self.commit()
        try:
            while self.sender.backlog():
                self._acked.clear()
                await self._acked.wait()
        finally:
            self.commit()  # persist the acks

    async def _send(self, send: Send) -> None:
        address = self._addresses.get(send.peer)
        if send.peer in self._withheld:  # kept for it, named once by the node (wire rule 4)
            self.sender.failed(send.peer, send.seq, self._clock.monotonic())
            return
        if address is None:
            log.warning("hand-off: no address for member %s; keeping its batches", send.peer)
            self.sender.failed(send.peer, send.seq, self._clock.monotonic())
            return
        data = encode_batch(self._self_id, send.seq, self._outbox.read(send.peer, send.seq), self._sign)
        self.bytes_sent += len(data)
        reply = await self._transport.post(address, data)
        now = self._clock.monotonic()
        if reply.status == "ok":
            self.sender.acked(send.peer, send.seq)
            if reply.round:  # kept until the receiver's checkpoint holds it (outbox rule 3)
                self.urls_acked += self._outbox.hold(send.peer, send.seq, reply.round)
            else:
                self.urls_acked += self._outbox.ack(send.peer, send.seq)
            self._acked.set()
        elif reply.status == "busy":
            self.sender.busy(send.peer, send.seq, now, reply.retry_after)
        else:
            # The first failure of a streak is worth a warning; the retries that follow are not.
            level = logging.WARNING if not self.sender.failing(send.peer) else logging.DEBUG
            log.log(level, "hand-off to %s failed (%s): %s; keeping the batch, retrying", send.peer,
                    reply.status, reply.detail)
            self.sender.failed(send.peer, send.seq, now)
        self._wake.set()
