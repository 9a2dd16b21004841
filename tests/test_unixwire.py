"""The ``--workers`` unix socket transport's framing (polecat/cluster/unixwire.py): frames split or joined
by reads, replies cut or overlong, hostile lengths, the client's one timeout timer, frames answered at
once (rule 4) and the server closing with a request in flight (rule 3)."""

from __future__ import annotations

import asyncio
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polecat.cluster.batch import MAX_BATCH_BYTES
from polecat.cluster.receiver import Reply
from polecat.cluster.unixwire import STATUSES, UnixTransport, encode_reply, serve_unix


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pc-") as d:  # unix socket paths are short
        yield Path(d)


class Echo:
    """Answers a frame with its bytes in the detail: at once, or (``wait``) after an await."""

    def __init__(self, wait: bool = False) -> None:
        self.wait = wait
        self.answered: list[bytes] = []
        self.received: list[bytes] = []
        self.receiving = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()

    def answer(self, data: bytes) -> Reply | None:
        if self.wait:
            return None
        self.answered.append(data)
        return Reply("ok", detail=data.decode())

    async def receive(self, data: bytes) -> Reply:
        self.received.append(data)
        self.receiving.set()
        await self.gate.wait()
        return Reply("ok", detail=data.decode())


def _request(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _reply_of(raw: bytes) -> tuple[str, str, bytes]:
    """A reply's status and detail off ``raw``, and the bytes after it."""
    code, _, _, length = struct.unpack_from(">BdQH", raw)
    end = struct.calcsize(">BdQH") + length
    return STATUSES[code], raw[struct.calcsize(">BdQH") : end].decode(), raw[end:]


async def _read_replies(reader: asyncio.StreamReader, n: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for _ in range(n):
        head = await reader.readexactly(struct.calcsize(">BdQH"))
        detail = await reader.readexactly(struct.unpack(">BdQH", head)[3])
        out.append(_reply_of(head + detail)[:2])
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.binary(max_size=40).map(lambda b: b.hex().encode()), min_size=1, max_size=5),
       cuts=st.lists(st.integers(min_value=1, max_value=30), max_size=12), wait=st.booleans())
def test_server_reads_frames_however_the_reads_split_or_join_them(
        sock_dir: Path, frames: list[bytes], cuts: list[int], wait: bool) -> None:
    async def check() -> None:
        receiver = Echo(wait)
        address = sock_dir / "s.sock"
        server = await serve_unix(receiver, f"unix:{address}")
        reader, writer = await asyncio.open_unix_connection(str(address))
        try:
            wire = b"".join(_request(f) for f in frames)
            for piece in _pieces(wire, cuts):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
            async with asyncio.timeout(10):
                replies = await _read_replies(reader, len(frames))
            assert replies == [("ok", f.decode()) for f in frames]  # in order, each once
            assert (receiver.received if wait else receiver.answered) == frames
        finally:
            writer.close()
            await server.close()

    asyncio.run(check())


def _pieces(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    for n in cuts:
        if not data:
            return
        yield data[:n]
        data = data[n:]
    if data:
        yield data


async def _serve_raw(path: Path, handle: Any) -> asyncio.AbstractServer:
    return await asyncio.start_unix_server(handle, str(path))


@pytest.mark.parametrize("pieces", [1, 2, 5, 24])
async def test_client_reads_a_reply_split_over_reads(sock_dir: Path, pieces: int) -> None:
    raw = encode_reply(Reply("busy", 0.25, "try later", 9))

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(5)
        step = -(-len(raw) // pieces)
        for i in range(0, len(raw), step):
            writer.write(raw[i : i + step])
            await writer.drain()
            await asyncio.sleep(0.001)
        await reader.read()

    server = await _serve_raw(sock_dir / "r.sock", slow)
    transport = UnixTransport()
    try:
        assert await transport.post(f"unix:{sock_dir}/r.sock", b"x") == Reply("busy", 0.25, "try later", 9)
    finally:
        await transport.close()
        server.close()


async def test_client_drops_a_connection_that_sends_past_its_reply(sock_dir: Path) -> None:
    accepted = 0

    async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        while await reader.readexactly(5):
            writer.write(encode_reply(Reply("ok")) + b"junk")

    server = await _serve_raw(sock_dir / "c.sock", chatty)
    transport = UnixTransport()
    try:
        first = await transport.post(f"unix:{sock_dir}/c.sock", b"x")
        assert first.status == "error" and "4 bytes past a reply" in first.detail
        assert (await transport.post(f"unix:{sock_dir}/c.sock", b"x")).status == "error"
        assert accepted == 2  # the second post did not reuse the first one's connection
    finally:
        await transport.close()
        server.close()


async def test_server_answers_hostile_lengths_bad_and_takes_an_empty_frame(sock_dir: Path) -> None:
    receiver = Echo()
    server = await serve_unix(receiver, f"unix:{sock_dir}/h.sock")
    try:
        reader, writer = await asyncio.open_unix_connection(str(sock_dir / "h.sock"))
        writer.write(_request(b""))  # a length of 0 is a frame (its receiver judges it)
        writer.write(struct.pack(">I", 0xFFFFFFFF) + b"more bytes that are never read")
        async with asyncio.timeout(10):
            assert await _read_replies(reader, 1) == [("ok", "")]
            status, detail, rest = _reply_of(await reader.read())  # then the server hangs up
        assert status == "bad" and f"exceeds {MAX_BATCH_BYTES}" in detail and rest == b""
        assert receiver.answered == [b""]
        writer.close()
    finally:
        await server.close()


async def test_a_frame_answered_at_once_gets_no_task_and_one_that_waits_does(sock_dir: Path) -> None:
    # Rule 4: the tasks the server makes are counted by wrapping the loop's create_task.
    loop = asyncio.get_running_loop()
    made: list[object] = []
    original = loop.create_task

    def counting(coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return original(coro, **kwargs)

    for wait, tasks in ((False, 0), (True, 20)):
        receiver = Echo(wait)
        address = f"unix:{sock_dir}/t{wait}.sock"
        server = await serve_unix(receiver, address)
        transport = UnixTransport()
        try:
            await transport.post(address, b"open")
            made.clear()
            loop.create_task = counting  # type: ignore[method-assign]
            replies = [await transport.post(address, b"%d" % i) for i in range(20)]
        finally:
            loop.create_task = original  # type: ignore[method-assign]
            await transport.close()
            await server.close()
        assert [r.detail for r in replies] == [str(i) for i in range(20)]
        assert len(made) == tasks
        assert len(receiver.received if wait else receiver.answered) == 20 + 1
        assert not (receiver.answered if wait else receiver.received)


async def test_the_client_timeout_is_one_timer_and_fails_every_post_in_flight(sock_dir: Path) -> None:
    # Rule 2: posts in flight share one sweep, not a timer each; each late post is an error, its
    # connection dropped, and the next post opens a new one.
    receiver = Echo(wait=True)
    receiver.gate.clear()
    address = f"unix:{sock_dir}/slow.sock"
    server = await serve_unix(receiver, address)
    transport = UnixTransport(timeout=0.2)
    loop = asyncio.get_running_loop()
    timers = 0
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        nonlocal timers
        timers += 1
        return call_at(when, callback, *args, **kwargs)

    try:
        receiver.gate.set()  # ten connections made, then reused
        await asyncio.gather(*(transport.post(address, b"open") for _ in range(10)))
        receiver.gate.clear()
        loop.call_at = counting  # type: ignore[method-assign]
        try:
            replies = await asyncio.gather(*(transport.post(address, b"%d" % i) for i in range(10)))
        finally:
            loop.call_at = call_at  # type: ignore[method-assign]
        # The sweep, not a timer a post (10): one, or a few more on a loaded machine, where the posts' sends
        # fall some hundred us apart and the sweep at the first deadline finds the later ones not due yet.
        assert timers <= 3
        assert all(r.status == "error" and "TimeoutError: no reply in 0.2 s" in r.detail for r in replies)
        receiver.gate.set()
        assert (await transport.post(address, b"after")).detail == "after"
    finally:
        receiver.gate.set()
        await transport.close()
        await server.close()


async def test_server_close_lets_a_request_half_received_finish_then_hangs_up(sock_dir: Path) -> None:
    # Rule 3: a request whose bytes are still arriving when close() begins is read and answered, and no
    # request after it (not even one in the same read); an idle connection is closed at once.
    receiver = Echo()
    server = await serve_unix(receiver, f"unix:{sock_dir}/h.sock")
    reader, writer = await asyncio.open_unix_connection(str(sock_dir / "h.sock"))
    idle_reader, idle_writer = await asyncio.open_unix_connection(str(sock_dir / "h.sock"))
    wire = _request(b"late frame")
    writer.write(wire[:7])
    await writer.drain()
    await asyncio.sleep(0.05)  # the server holds the first bytes
    closing = asyncio.create_task(server.close())
    async with asyncio.timeout(10):
        assert await idle_reader.read() == b""  # the idle one: hung up, unanswered
        writer.write(wire[7:] + _request(b"one too many"))
        assert await _read_replies(reader, 1) == [("ok", "late frame")]
        assert await reader.read() == b""
        await closing
    assert receiver.answered == [b"late frame"]
    writer.close()
    idle_writer.close()


async def test_server_close_cancels_a_receive_past_the_shutdown_timeout(sock_dir: Path,
                                                                        monkeypatch: pytest.MonkeyPatch
                                                                        ) -> None:
    monkeypatch.setattr("polecat.cluster.unixwire.SHUTDOWN_TIMEOUT", 0.05)
    receiver = Echo(wait=True)
    receiver.gate.clear()  # never answers
    address = f"unix:{sock_dir}/stuck.sock"
    server = await serve_unix(receiver, address)
    transport = UnixTransport()
    try:
        posting = asyncio.create_task(transport.post(address, b"stuck"))
        async with asyncio.timeout(10):
            await receiver.receiving.wait()
            await server.close()
            reply = await posting
        assert reply.status == "error" and "mid-reply" in reply.detail
    finally:
        await transport.close()
