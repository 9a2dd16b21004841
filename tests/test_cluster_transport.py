"""The hand-off over real sockets: unix and loopback TCP, acknowledgements, back-pressure, failures."""

from __future__ import annotations

import asyncio
import socket
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from polecat.cluster.batch import Batch, HandoffUrl
from polecat.cluster.handoff import Handoff
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.sender import HandoffSender
from polecat.cluster.transport import HttpTransport, serve


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


async def _deliver(address: str, tmp: Path, n_urls: int, *, capacity: int, commit_s: float,
                   senders: int = 1, hold: float = 1.0
                   ) -> tuple[SlowFrontier, HandoffReceiver, list[Handoff]]:
    frontier = SlowFrontier(commit_s)
    receiver = HandoffReceiver(frontier.sink, capacity=capacity, hold=hold,
                               retry_after=0.02)
    runner = await serve(receiver, address)
    transport = HttpTransport()
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
        await runner.cleanup()
        for box in boxes:
            box.close()
    return frontier, receiver, handoffs


async def test_unix_socket_hand_off_delivers_every_url_and_empties_the_outbox(sock_dir: Path,
                                                                            tmp_path: Path) -> None:
    frontier, _, (h,) = await _deliver(f"unix:{sock_dir}/r.sock", tmp_path, 1000, capacity=10_000,
                                              commit_s=0.0)
    assert sum(frontier.received.values()) == 1000 and len(frontier.received) == 1000
    assert h.urls_acked == 1000 and h.backlog() == 0
    box = Outbox(tmp_path / "ob0")  # the acks were committed: nothing is left to resend
    assert box.pending() == {}
    box.close()


async def test_full_receiver_slows_senders_and_loses_nothing(sock_dir: Path, tmp_path: Path) -> None:
    # Capacity for one batch at a time, a slow commit and a short hold: senders wait, then are told
    # "busy" and retry later.
    frontier, receiver, handoffs = await _deliver(f"unix:{sock_dir}/r.sock", tmp_path, 600, capacity=50,
                                                  commit_s=0.02, senders=3, hold=0.01)
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


async def test_a_dead_receiver_keeps_batches_until_it_comes_back(sock_dir: Path, tmp_path: Path) -> None:
    address = f"unix:{sock_dir}/late.sock"
    transport = HttpTransport()
    box = Outbox(tmp_path / "ob", batch_urls=10)
    h = Handoff("s0", box, transport, {"r": address},
                sender=HandoffSender(base_backoff=0.02, max_backoff=0.1))
    task = asyncio.create_task(h.run())
    frontier = SlowFrontier(0.0)
    runner = None
    try:
        h.stage("r", [HandoffUrl(f"http://h.test/{i}", 0, 1.0) for i in range(35)])
        h.commit()
        await asyncio.sleep(0.3)
        assert h.sender.failures >= 2 and h.backlog() == 35  # nobody listening yet: kept, retried
        runner = await serve(HandoffReceiver(frontier.sink), address)
        async with asyncio.timeout(10):
            await h.drain()
        assert len(frontier.received) == 35 and h.backlog() == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await transport.close()
        if runner is not None:
            await runner.cleanup()
        box.close()
