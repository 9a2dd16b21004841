"""The hand-off between the ``--workers`` of one machine: length-prefixed frames on a unix socket.

The workers of one machine trust each other's socket (a directory of the parent's, polecat/cluster/
supervisor.py), speak to no proxy and need none of HTTP, so they use this instead of
:mod:`polecat.cluster.transport`: a worker then does not load aiohttp (~0.13 s of CPU and ~12 MB a worker,
benchmarks/README.md, "Issue 17, ninth pass"). A batch is still signed inside its bytes when the crawl
has a secret (polecat/cluster/batch.py); the receiver's answer is the same :class:`Reply`.

Wire (all integers big-endian):

- request: u32 length, then that many bytes of batch. A length over :data:`MAX_BATCH_BYTES` is answered
  "bad" and the connection closed unread.
- reply: u8 status (index into :data:`STATUSES`), f64 retry-after seconds, u64 checkpoint round, u16
  detail length, then the detail in UTF-8 (cut to :data:`MAX_DETAIL` bytes).

Rules:
1. A connection carries one request at a time; the client keeps idle connections per address for reuse
   and opens another when all are busy, so a sender's window of concurrent posts stays concurrent.
2. Every failure of the client (nobody listening, a reset, a short reply, the timeout) is a
   ``Reply("error")`` that names it: the sender's state machine decides what follows (it keeps the batch).
3. Closing the server stops accepting at once, lets a request being received finish for up to
   :data:`~polecat.cluster.receiver.SHUTDOWN_TIMEOUT` seconds, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import struct
from typing import Protocol

from polecat.cluster.batch import MAX_BATCH_BYTES
from polecat.cluster.receiver import SHUTDOWN_TIMEOUT, Reply, Status

__all__ = ["MAX_DETAIL", "STATUSES", "UnixServer", "UnixTransport", "serve_unix"]

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


async def _read_reply(reader: asyncio.StreamReader) -> Reply:
    code, retry_after, round_, length = _REPLY.unpack(await reader.readexactly(_REPLY.size))
    detail = (await reader.readexactly(length)).decode("utf-8", "replace")
    if code >= len(STATUSES):
        return Reply("error", detail=f"reply with unknown status {code}: {detail}")
    return Reply(STATUSES[code], received_retry_after(retry_after), detail, round_)


class UnixTransport:
    """The client: a :class:`~polecat.cluster.transport.Transport` for ``unix:`` addresses (rules 1, 2)."""

    def __init__(self, *, timeout: float = 30.0) -> None:
        self._timeout = timeout
        self._idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._open: set[asyncio.StreamWriter] = set()

    async def post(self, address: str, data: bytes) -> Reply:
        idle = self._idle.setdefault(address, [])
        conn = idle.pop() if idle else None
        try:
            async with asyncio.timeout(self._timeout):
                if conn is None:
                    conn = await asyncio.open_unix_connection(_path(address))
                    self._open.add(conn[1])
                reader, writer = conn
                writer.write(_LENGTH.pack(len(data)))
                writer.write(data)
                await writer.drain()
                reply = await _read_reply(reader)
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as exc:
            if conn is not None:
                self._discard(conn[1])
            what = "the receiver closed the connection mid-reply" if isinstance(
                exc, asyncio.IncompleteReadError) else str(exc)
            return Reply("error", detail=f"{type(exc).__name__}: {what}")
        idle.append(conn)
        return reply

    def _discard(self, writer: asyncio.StreamWriter) -> None:
        self._open.discard(writer)
        writer.close()

    async def close(self) -> None:
        writers = list(self._open)
        self._idle.clear()
        for writer in writers:
            self._discard(writer)
        for writer in writers:
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class FrameReceiver(Protocol):
    """What answers the frames of one socket: the hand-off receiver, or one that also takes claim frames
    (polecat/cluster/claimlink.py ``Receivers``)."""

    async def receive(self, data: bytes) -> Reply: ...


class UnixServer:
    """The receiving end at one socket path (rule 3 on :meth:`close`)."""

    def __init__(self, receiver: FrameReceiver) -> None:
        self._receiver = receiver
        self._server: asyncio.AbstractServer | None = None
        self._idle: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self, address: str) -> None:
        self._server = await asyncio.start_unix_server(self._serve, _path(address))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            while True:
                self._idle.add(task)
                try:
                    head = await reader.readexactly(_LENGTH.size)
                except (asyncio.IncompleteReadError, OSError):
                    return  # the client closed between requests
                self._idle.discard(task)
                self._busy.add(task)
                (length,) = _LENGTH.unpack(head)
                if length > MAX_BATCH_BYTES:
                    writer.write(encode_reply(Reply(
                        "bad", detail=f"batch of {length} bytes exceeds {MAX_BATCH_BYTES}")))
                    await writer.drain()
                    return
                reply = await self._receiver.receive(await reader.readexactly(length))
                writer.write(encode_reply(reply))
                await writer.drain()
                self._busy.discard(task)
                if self._closing:
                    return
        except (asyncio.IncompleteReadError, OSError):
            return  # the client went away mid-request: it keeps its batch (rule 2 on its side)
        except asyncio.CancelledError:
            # close() cancelled this handler: end it normally, because Python 3.11's streams call
            # task.exception() on the handler's task, which raises on a cancelled one and prints
            # "Exception in callback ... CancelledError" at the end of every --workers run.
            return
        finally:
            self._idle.discard(task)
            self._busy.discard(task)
            writer.close()

    async def close(self) -> None:
        """Rule 3."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        idle, busy = list(self._idle), list(self._busy)
        for task in idle:
            task.cancel()
        late: set[asyncio.Task[None]] = set()
        if busy:
            _, late = await asyncio.wait(busy, timeout=SHUTDOWN_TIMEOUT)
        for task in late:
            task.cancel()
        await asyncio.gather(*idle, *busy, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


async def serve_unix(receiver: FrameReceiver, address: str) -> UnixServer:
    """Start answering hand-offs at the unix socket ``address`` (``unix:/path``); stop with
    ``await server.close()``."""
    server = UnixServer(receiver)
    await server.start(address)
    return server
