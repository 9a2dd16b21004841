"""The hand-off between the ``--workers`` of one machine: length-prefixed frames on a unix socket.

The workers of one machine trust each other's socket (a directory of the parent's, polecat/cluster/
supervisor.py), speak to no proxy and need none of HTTP, so they use this instead of
:mod:`polecat.cluster.transport`: a worker then does not load aiohttp (~0.13 s of CPU and ~12 MB a worker,
benchmarks/README.md, "Issue 17, ninth pass"). A batch is still signed inside its bytes when the crawl
has a secret (polecat/cluster/batch.py); the receiver's answer is the same :class:`Reply`.

Both ends are :class:`asyncio.Protocol` s that parse frames out of whatever each read brings: a frame
costs no stream reader, no ``readexactly`` pair and no timer of its own (benchmarks/README.md, "Claim
cost: the workers' transport"). The wire is 0.3.0's; the workers of one machine run one release, so no
end needs a path for an older peer.

Wire (all integers big-endian):

- request: u32 length, then that many bytes of batch. A length over :data:`MAX_BATCH_BYTES` is answered
  "bad" and the connection closed unread.
- reply: u8 status (index into :data:`STATUSES`), f64 retry-after seconds, u64 checkpoint round, u16
  detail length, then the detail in UTF-8 (cut to :data:`MAX_DETAIL` bytes).

Rules:
1. A connection carries one request at a time; the client keeps idle connections per address for reuse
   and opens another when all are busy, so a sender's window of concurrent posts stays concurrent. An
   idle connection the server closed is dropped, not reused.
2. Every failure of the client (nobody listening, a reset, a short reply, bytes past a reply, the
   timeout) is a ``Reply("error")`` that names it: the sender's state machine decides what follows (it
   keeps the batch). The timeout is one timer of the client's, a sweep of the deadlines of its posts in
   flight, not a timer a post.
3. Closing the server stops accepting at once, lets a request being received finish for up to
   :data:`~polecat.cluster.receiver.SHUTDOWN_TIMEOUT` seconds, then cancels what is left.
4. A frame its receiver answers at once (:meth:`FrameReceiver.answer`: a claim frame,
   polecat/cluster/claimlink.py) is answered from the read that completes it; only a frame that waits
   (a hand-off batch, polecat/cluster/receiver.py) gets a task, and its connection reads nothing more
   until it is answered.
"""

from __future__ import annotations

import asyncio
import logging
import math
import struct
from typing import Protocol, cast

from polecat.cluster.batch import MAX_BATCH_BYTES
from polecat.cluster.receiver import SHUTDOWN_TIMEOUT, Reply, Status

__all__ = ["MAX_DETAIL", "STATUSES", "FrameReceiver", "UnixServer", "UnixTransport", "serve_unix"]

log = logging.getLogger("polecat.cluster")
STATUSES: tuple[Status, ...] = ("ok", "busy", "bad", "unauthorized", "error")
"""Reply statuses by their code on the wire."""
MAX_DETAIL = 500
"""Bytes of a reply's detail sent (the HTTP transport keeps as many)."""
_LENGTH = struct.Struct(">I")
_REPLY = struct.Struct(">BdQH")
_PREFIX = "unix:"


def _path(address: str) -> str:
    if not address.startswith(_PREFIX):
        raise ValueError(f"not a unix socket address: {address!r} (unix:/path/to.sock)")
    return address[len(_PREFIX) :]


def detail_bytes(reply: Reply) -> bytes:
    """The detail of ``reply`` as sent on a stream: UTF-8, at most :data:`MAX_DETAIL` bytes."""
    return reply.detail.encode("utf-8", "replace")[:MAX_DETAIL]


def received_retry_after(value: float) -> float:
    """A retry-after read off a stream as a sender may wait it: finite and not below 0, else 0."""
    return max(0.0, value) if math.isfinite(value) else 0.0


def encode_reply(reply: Reply) -> bytes:
    """The reply frame of ``reply``."""
    detail = detail_bytes(reply)
    return _REPLY.pack(STATUSES.index(reply.status), reply.retry_after, max(0, reply.round),
                       len(detail)) + detail


def _error(what: str, exc: BaseException) -> Reply:
    return Reply("error", detail=f"{type(exc).__name__}: {what}")


class _Connection(asyncio.Protocol):
    """One connection of the client: its request in flight and the reply read for it (rules 1, 2)."""

    def __init__(self, client: UnixTransport, address: str) -> None:
        self._client = client
        self.address = address
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.waiter: asyncio.Future[Reply] | None = None
        self.deadline = 0.0
        self.lost = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, data: bytes, waiter: asyncio.Future[Reply], deadline: float) -> None:
        assert self.transport is not None
        self.waiter, self.deadline = waiter, deadline
        # One write, one system call: a second write() of the body is a second send() when the first left
        # the transport's buffer empty.
        self.transport.writelines((_LENGTH.pack(len(data)), data))

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes on an idle connection: nothing they say can be trusted
            self.fail(Reply("error", detail="ProtocolError: bytes with no request"))
            return
        self._buffer += data
        if len(self._buffer) < _REPLY.size:
            return
        code, retry_after, round_, length = _REPLY.unpack_from(self._buffer)
        end = _REPLY.size + length
        if len(self._buffer) < end:
            return
        if len(self._buffer) > end:
            self.fail(Reply("error", detail=f"ProtocolError: {len(self._buffer) - end} bytes past a reply"))
            return
        detail = self._buffer[_REPLY.size : end].decode("utf-8", "replace")
        self._buffer.clear()
        self._settle(Reply("error", detail=f"reply with unknown status {code}: {detail}")
                     if code >= len(STATUSES) else
                     Reply(STATUSES[code], received_retry_after(retry_after), detail, round_))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._client._lost(self)
        self.closed.set_result(None)
        self._settle(_error(f"the receiver closed the connection mid-reply ({len(self._buffer)} bytes read)",
                            exc or EOFError()))

    def fail(self, reply: Reply) -> None:
        """Answer the request in flight with ``reply`` and drop the connection (rule 2)."""
        self.lost = True
        self._settle(reply)
        if self.transport is not None:
            self.transport.abort()

    def _settle(self, reply: Reply) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)


class UnixTransport:
    """The client: a :class:`~polecat.cluster.transport.Transport` for ``unix:`` addresses (rules 1, 2)."""

    def __init__(self, *, timeout: float = 30.0) -> None:
        self._timeout = timeout
        self._idle: dict[str, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._waiting: set[_Connection] = set()
        self._sweep_timer: asyncio.TimerHandle | None = None

    async def post(self, address: str, data: bytes) -> Reply:
        loop = asyncio.get_running_loop()
        idle = self._idle.get(address)
        conn = idle.pop() if idle else None
        if conn is None:
            try:
                async with asyncio.timeout(self._timeout):  # a connect only: a reused connection has none
                    _, conn = await loop.create_unix_connection(lambda: _Connection(self, address),
                                                                _path(address))
            except (TimeoutError, OSError, ValueError) as exc:
                return _error(str(exc) or f"no connection in {self._timeout:g} s", exc)
            self._open.add(conn)
        waiter: asyncio.Future[Reply] = loop.create_future()
        conn.send(data, waiter, loop.time() + self._timeout)
        self._waiting.add(conn)
        if self._sweep_timer is None:
            self._sweep_timer = loop.call_at(conn.deadline, self._sweep)
        try:
            reply = await waiter
        except asyncio.CancelledError:  # the reply would arrive with nobody to take it
            conn.fail(Reply("error", detail="cancelled"))
            raise
        finally:
            self._waiting.discard(conn)
        if not conn.lost:
            self._idle.setdefault(address, []).append(conn)
        return reply

    def _sweep(self) -> None:
        """Rule 2's timeout: fail the posts past their deadline, then wait for the next deadline."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn in [c for c in self._waiting if c.deadline <= now]:
            conn.fail(_error(f"no reply in {self._timeout:g} s", TimeoutError()))
        self._sweep_timer = loop.call_at(min(c.deadline for c in self._waiting), self._sweep) \
            if self._waiting else None

    def _lost(self, conn: _Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.address, [])
        if conn in idle:
            idle.remove(conn)

    async def close(self) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        conns = list(self._open)
        self._idle.clear()
        for conn in conns:
            conn.fail(Reply("error", detail="the transport is closed"))
        await asyncio.gather(*(conn.closed for conn in conns))


class FrameReceiver(Protocol):
    """What answers the frames of one socket: the hand-off receiver, or one that also takes claim frames
    (polecat/cluster/claimlink.py ``Receivers``)."""

    def answer(self, data: bytes) -> Reply | None:
        """The reply to a frame that needs no waiting, given at once (rule 4); None: :meth:`receive` it."""

    async def receive(self, data: bytes) -> Reply: ...


class _Served(asyncio.Protocol):
    """One connection of the server: the request being received and its answer (rules 3, 4)."""

    def __init__(self, server: UnixServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.task: asyncio.Task[None] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def busy(self) -> bool:
        """Whether a request is being received or answered (rule 3 lets it finish)."""
        return self.task is not None or bool(self._buffer)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._server._conns.add(self)
        if self._server.closing:  # accepted as close() began: rule 3 takes no new request
            self.end()

    def connection_lost(self, exc: Exception | None) -> None:
        # The client went away, mid-request or not: it keeps its batch (rule 2 on its side). A receive in
        # progress still finishes: its sink may have taken the batch already.
        self._server._conns.discard(self)
        self._buffer.clear()
        self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._next()

    def _next(self) -> None:
        assert self._transport is not None
        while self.task is None and len(self._buffer) >= _LENGTH.size and not self._transport.is_closing():
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > MAX_BATCH_BYTES:
                self._transport.write(encode_reply(Reply(
                    "bad", detail=f"batch of {length} bytes exceeds {MAX_BATCH_BYTES}")))
                self.end()
                return
            end = _LENGTH.size + length
            if len(self._buffer) < end:
                return
            data = bytes(self._buffer[_LENGTH.size : end])
            del self._buffer[:end]
            reply = self._server.receiver.answer(data)
            if reply is None:  # rule 4: it waits, and the connection with it
                self._transport.pause_reading()
                self.task = asyncio.get_running_loop().create_task(self._answer(data))
                return
            self._reply(reply)

    async def _answer(self, data: bytes) -> None:
        assert self._transport is not None
        try:
            reply = await self._server.receiver.receive(data)
        except Exception:
            log.exception("unix server: the receiver failed; the sender keeps its batch")
            self._transport.abort()
            return
        finally:
            self.task = None
        self._reply(reply)
        if not self._transport.is_closing():
            self._transport.resume_reading()
            self._next()

    def _reply(self, reply: Reply) -> None:
        assert self._transport is not None
        if self._transport.is_closing():  # the client left while its batch was received
            return
        self._transport.write(encode_reply(reply))
        if self._server.closing:  # rule 3: the request it let finish was the last
            self.end()

    def end(self) -> None:
        """Close the connection once its last reply is written."""
        assert self._transport is not None
        self._transport.close()

    def cancel(self) -> None:
        """Rule 3, past the shutdown timeout: drop the request and the connection."""
        assert self._transport is not None
        if self.task is not None:
            self.task.cancel()
        self._transport.abort()


class UnixServer:
    """The receiving end at one socket path (rule 3 on :meth:`close`)."""

    def __init__(self, receiver: FrameReceiver) -> None:
        self.receiver = receiver
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[_Served] = set()
        self.closing = False

    async def start(self, address: str) -> None:
        self._server = await asyncio.get_running_loop().create_unix_server(lambda: _Served(self),
                                                                           _path(address))

    async def close(self) -> None:
        """Rule 3."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        conns = list(self._conns)
        tasks = [conn.task for conn in conns if conn.task is not None]
        for conn in conns:
            if not conn.busy:
                conn.end()
        busy = [conn.closed for conn in conns if conn.busy]
        if busy:
            await asyncio.wait(busy, timeout=SHUTDOWN_TIMEOUT)
        for conn in conns:
            if not conn.closed.done():
                conn.cancel()
        await asyncio.gather(*tasks, *(conn.closed for conn in conns), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


async def serve_unix(receiver: FrameReceiver, address: str) -> UnixServer:
    """Start answering hand-offs at the unix socket ``address`` (``unix:/path``); stop with
    ``await server.close()``."""
    server = UnixServer(receiver)
    await server.start(address)
    return server
