"""The hand-off over real sockets: HTTP on unix sockets and loopback TCP, and the ``--workers`` framed
unix transport (polecat/cluster/unixwire.py): acknowledgements, back-pressure, failures."""

from __future__ import annotations

import asyncio
import socket
import struct
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from polecat.cluster.batch import MAX_BATCH_BYTES, Batch, HandoffUrl, encode_batch, encode_urls
from polecat.cluster.handoff import Handoff
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver, Reply
from polecat.cluster.sender import HandoffSender
from polecat.cluster.transport import HttpTransport, Transport, serve
from polecat.cluster.unixwire import MAX_DETAIL, STATUSES, UnixTransport, serve_unix


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="pc-") as d:
        yield Path(d)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlowFrontier:
    """A sink that 'commits' every ``commit_s`` seconds, as a node's checkpoint does."""

    def __init__(self, commit_s: float) -> None:
        self.commit_s = commit_s
        self.received: Counter[str] = Counter()
        self.concurrent = self.max_concurrent = 0

    async def sink(self, batch: Batch) -> None:
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await asyncio.sleep(self.commit_s)
            self.received.update(u.url for u in batch.urls)
        finally:
            self.concurrent -= 1


class _Wire:
    """One transport with its server: ``framed`` (unixwire) or HTTP (aiohttp)."""

    def __init__(self, framed: bool) -> None:
        self.framed = framed

    def client(self) -> Transport:
        return UnixTransport() if self.framed else HttpTransport()

    async def serve(self, receiver: HandoffReceiver, address: str) -> Callable[[], Awaitable[None]]:
        """Start a server; returns what stops it."""
        if self.framed:
            return (await serve_unix(receiver, address)).close
        return (await serve(receiver, address)).cleanup


HTTP = _Wire(False)
WIRES = [pytest.param(HTTP, id="http"), pytest.param(_Wire(True), id="framed")]


async def _deliver(address: str, tmp: Path, n_urls: int, *, capacity: int, commit_s: float,
                   senders: int = 1, hold: float = 1.0, wire: _Wire = HTTP
                   ) -> tuple[SlowFrontier, HandoffReceiver, list[Handoff]]:
    frontier = SlowFrontier(commit_s)
    receiver = HandoffReceiver(frontier.sink, capacity=capacity, hold=hold,
                               retry_after=0.02)
    stop = await wire.serve(receiver, address)
    transport = wire.client()
    boxes = [Outbox(tmp / f"ob{k}", batch_urls=50) for k in range(senders)]
    handoffs = [Handoff(f"s{k}", box, transport, {"r": address},
                        sender=HandoffSender(window=4, min_busy_wait=0.01)) for k, box in enumerate(boxes)]
    tasks = [asyncio.create_task(h.run()) for h in handoffs]
    try:
        for k, h in enumerate(handoffs):
            h.stage("r", [HandoffUrl(f"http://h.test/{k}/{i}", 1, 1.0) for i in range(n_urls)])
        async with asyncio.timeout(60):
            await asyncio.gather(*(h.drain() for h in handoffs))
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await transport.close()
        await stop()
        for box in boxes:
            box.close()
    return frontier, receiver, handoffs


@pytest.mark.parametrize("wire", WIRES)
async def test_unix_socket_hand_off_delivers_every_url_and_empties_the_outbox(sock_dir: Path, tmp_path: Path,
                                                                            wire: _Wire) -> None:
    frontier, _, (h,) = await _deliver(f"unix:{sock_dir}/r.sock", tmp_path, 1000, capacity=10_000,
                                       commit_s=0.0, wire=wire)
    assert sum(frontier.received.values()) == 1000 and len(frontier.received) == 1000
    assert h.urls_acked == 1000 and h.backlog() == 0
    box = Outbox(tmp_path / "ob0")  # the acks were committed: nothing is left to resend
    assert box.pending() == {}
    box.close()


@pytest.mark.parametrize("wire", WIRES)
async def test_full_receiver_slows_senders_and_loses_nothing(sock_dir: Path, tmp_path: Path,
                                                             wire: _Wire) -> None:
    # Capacity for one batch at a time, a slow commit and a short hold: senders wait, then are told
    # "busy" and retry later.
    frontier, receiver, handoffs = await _deliver(f"unix:{sock_dir}/r.sock", tmp_path, 600, capacity=50,
                                                  commit_s=0.02, senders=3, hold=0.01, wire=wire)
    assert receiver.inbox.refused > 0 and sum(h.sender.busy_replies for h in handoffs) > 0
    assert frontier.max_concurrent == 1  # the inbox bound held
    assert sum(frontier.received.values()) == 1800 and len(frontier.received) == 1800
    assert all(h.backlog() == 0 for h in handoffs)


async def test_tcp_loopback_and_bad_frames(tmp_path: Path) -> None:
    address = f"http://127.0.0.1:{_free_port()}"
    frontier, _, _ = await _deliver(address, tmp_path, 120, capacity=1000, commit_s=0.0)
    assert len(frontier.received) == 120
    receiver = HandoffReceiver(frontier.sink)
    runner = await serve(receiver, address)
    transport = HttpTransport()
    try:
        reply = await transport.post(address, b"garbage that is not a batch")
        assert reply.status == "bad" and "magic" in reply.detail
        assert receiver.bad == 1 and receiver.batches == 0
    finally:
        await transport.close()
        await runner.cleanup()


@pytest.mark.parametrize("wire", WIRES)
async def test_a_dead_receiver_keeps_batches_until_it_comes_back(sock_dir: Path, tmp_path: Path,
                                                                 wire: _Wire) -> None:
    address = f"unix:{sock_dir}/late.sock"
    transport = wire.client()
    box = Outbox(tmp_path / "ob", batch_urls=10)
    h = Handoff("s0", box, transport, {"r": address},
                sender=HandoffSender(base_backoff=0.02, max_backoff=0.1))
    task = asyncio.create_task(h.run())
    frontier = SlowFrontier(0.0)
    stop = None
    try:
        h.stage("r", [HandoffUrl(f"http://h.test/{i}", 0, 1.0) for i in range(35)])
        h.commit()
        await asyncio.sleep(0.3)
        assert h.sender.failures >= 2 and h.backlog() == 35  # nobody listening yet: kept, retried
        stop = await wire.serve(HandoffReceiver(frontier.sink), address)
        async with asyncio.timeout(10):
            await h.drain()
        assert len(frontier.received) == 35 and h.backlog() == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await transport.close()
        if stop is not None:
            await stop()
        box.close()


async def test_framed_wire_answers_every_status_and_refuses_bad_frames(sock_dir: Path) -> None:
    address = f"unix:{sock_dir}/f.sock"
    replies = [Reply("ok", round=7), Reply("busy", 0.5), Reply("unauthorized", detail="no secret"),
               Reply("error", detail="stopping " + "x" * 2000)]
    given = iter(replies)

    class Canned(HandoffReceiver):
        async def receive(self, data: bytes) -> Reply:
            return next(given)

    frontier = SlowFrontier(0.0)
    server = await serve_unix(Canned(frontier.sink), address)
    transport = UnixTransport()
    try:
        got = [await transport.post(address, b"batch") for _ in replies]
        assert got[:3] == replies[:3]
        assert got[3].status == "error" and len(got[3].detail.encode()) == MAX_DETAIL
        # A new server: the idle connection the old one closed is dropped (rule 1), a new connection
        # carries the next post, and garbage is "bad".
        real = HandoffReceiver(frontier.sink)
        await server.close()
        server = await serve_unix(real, address)
        reply = await transport.post(address, b"garbage that is not a batch")
        assert reply.status == "bad" and "magic" in reply.detail and real.bad == 1
        # An oversize length is answered "bad" without being read, and the connection closed.
        reader, writer = await asyncio.open_unix_connection(str(sock_dir / "f.sock"))
        writer.write(struct.pack(">I", MAX_BATCH_BYTES + 1))
        await writer.drain()
        head = await asyncio.wait_for(reader.read(), 5)
        assert STATUSES[head[0]] == "bad" and b"exceeds" in head
        writer.close()
    finally:
        await transport.close()
        await server.close()


async def test_framed_wire_failures_are_error_replies(sock_dir: Path) -> None:
    transport = UnixTransport(timeout=0.3)
    servers: list[asyncio.AbstractServer] = []
    try:
        nobody = await transport.post(f"unix:{sock_dir}/none.sock", b"x")
        assert nobody.status == "error" and "FileNotFoundError" in nobody.detail
        wrong = await transport.post("http://127.0.0.1:1", b"x")
        assert wrong.status == "error" and "not a unix socket address" in wrong.detail

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers

        servers.append(await asyncio.start_unix_server(silent, str(sock_dir / "quiet.sock")))
        slow = await transport.post(f"unix:{sock_dir}/quiet.sock", b"x")
        assert slow.status == "error" and "TimeoutError" in slow.detail

        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(5)
            writer.write(b"\x00")  # a reply cut short
            writer.close()

        servers.append(await asyncio.start_unix_server(hang_up, str(sock_dir / "cut.sock")))
        short = await transport.post(f"unix:{sock_dir}/cut.sock", b"x")
        assert short.status == "error" and "mid-reply" in short.detail

        async def odd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(5)
            writer.write(struct.pack(">BdQH", 9, float("nan"), 0, 2) + b"hi")

        servers.append(await asyncio.start_unix_server(odd, str(sock_dir / "odd.sock")))
        unknown = await transport.post(f"unix:{sock_dir}/odd.sock", b"x")
        assert unknown.status == "error" and "unknown status 9: hi" in unknown.detail
    finally:
        await transport.close()
        for server in servers:
            server.close()


async def test_framed_server_close_lets_a_receive_in_progress_finish(sock_dir: Path) -> None:
    address = f"unix:{sock_dir}/c.sock"
    frontier = SlowFrontier(0.3)
    server = await serve_unix(HandoffReceiver(frontier.sink), address)
    transport, idle = UnixTransport(), UnixTransport()
    errors: list[dict[str, object]] = []  # Python 3.11's streams log a cancelled handler as an error
    asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
    try:
        batch = encode_batch("s0", 1, encode_urls([HandoffUrl("http://h.test/a", 0, 1.0)]))
        assert (await idle.post(address, batch)).status == "ok"  # leaves an idle connection open
        posting = asyncio.create_task(transport.post(address, batch))
        await asyncio.sleep(0.1)  # the receive is in its commit
        async with asyncio.timeout(5):
            await server.close()  # the idle connection does not hold the close up
        assert (await posting).status == "ok" and frontier.received["http://h.test/a"] == 2
        assert (await idle.post(address, batch)).status == "error"  # nobody listens any more
        await asyncio.sleep(0.05)  # the server's done callbacks run
        assert errors == []
    finally:
        asyncio.get_running_loop().set_exception_handler(None)
        await transport.close()
        await idle.close()
