"""Bounded input before trust (issue 33): a cluster node reads no body of ``/handoff`` or
``/internal/adopt``, nor opens a claims stream (``/internal/claims``, a GET), until the request's head
proves the cluster secret (polecat/cluster/auth.py rule 1),
and bounds each route's body. Each refusal comes back while the body is still unsent: the server never
waited for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from polecat.cluster import receiver as receiver_module
from polecat.cluster.auth import AUTH_HEADER, MAX_SKEW, hmac_signer, hmac_verifier, request_proof
from polecat.cluster.batch import Batch, HandoffUrl, decode_batch, encode_batch, encode_urls
from polecat.cluster.claimstream import STREAM_PATH
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.wire import THIS, WIRE_HEADER
from polecat.config import config_from_mapping
from polecat.processes.machine import (
    ADOPT_PATH,
    INTERNAL_PATHS,
    MAX_BUNDLE_BYTES,
    SIGNATURE_HEADER,
    ClusterNode,
)
from polecat.testing.fakes import FakeClock
from tests.test_cluster_transport import _free_port

SECRET = "a shared secret of the test cluster"

ADVERTISE = "http://127.0.0.1:2"


async def _status(port: int, head: bytes, body: bytes = b"") -> int:
    """Send ``head`` (and ``body``, however short of its Content-Length) and read the answer's status,
    within a bound: a server that waits for the rest of the body fails the test, it does not hang it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body)
        await writer.drain()
        async with asyncio.timeout(20):
            line = await reader.readline()
        return int(line.split()[1])
    finally:
        writer.close()


def _post(path: str, length: int, *extra: str) -> bytes:
    method = "GET" if path == STREAM_PATH else "POST"  # a claims stream opens with a GET
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}",
             f"{WIRE_HEADER}: {THIS.header}", *extra, "", ""]
    return "\r\n".join(lines).encode()


@pytest.fixture
async def machine(tmp_path: Path) -> AsyncIterator[tuple[ClusterNode, int, FakeClock]]:
    """A cluster node's internal routes on loopback (etcd is never called)."""
    cfg = config_from_mapping({"data_dir": str(tmp_path), "cluster": {
        "etcd": "http://127.0.0.1:1", "name": "t", "node_id": "a", "advertise": ADVERTISE,
        "secret": SECRET}})
    clock = FakeClock()
    node = ClusterNode(cfg, clock=clock)
    app = web.Application()
    node.routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield node, port, clock
    finally:
        await runner.cleanup()
        await node.close()


@pytest.mark.parametrize("path", sorted(INTERNAL_PATHS))
async def test_no_body_is_read_without_the_secret_in_the_head(
        machine: tuple[ClusterNode, int, FakeClock], path: str) -> None:
    node, port, clock = machine
    sign = hmac_signer(SECRET)
    big = 10_000_000  # within both routes' bounds: only the proof decides
    assert await _status(port, _post(path, big), b"x" * 1000) == 401  # no proof
    wrong = request_proof(hmac_signer("another secret of the same length!"), path, ADVERTISE, big,
                          clock.wall())
    assert await _status(port, _post(path, big, f"{AUTH_HEADER}: {wrong}"), b"x") == 401
    stale = request_proof(sign, path, ADVERTISE, big, clock.wall() - MAX_SKEW - 1)
    assert await _status(port, _post(path, big, f"{AUTH_HEADER}: {stale}"), b"x") == 401
    other_route = request_proof(sign, "/elsewhere", ADVERTISE, big, clock.wall())
    assert await _status(port, _post(path, big, f"{AUTH_HEADER}: {other_route}"), b"x") == 401
    shorter = request_proof(sign, path, ADVERTISE, 10, clock.wall())
    assert await _status(port, _post(path, big, f"{AUTH_HEADER}: {shorter}"), b"x") == 401
    assert node.receiver.unauthorized == 5


async def test_each_route_bounds_its_body_before_reading_it(machine: tuple[ClusterNode, int, FakeClock]
                                                            ) -> None:
    _, port, clock = machine
    sign = hmac_signer(SECRET)
    for path, bound in (("/handoff", 16 * 1024 * 1024), (ADOPT_PATH, MAX_BUNDLE_BYTES)):
        proof = request_proof(sign, path, ADVERTISE, bound + 1, clock.wall())
        assert await _status(port, _post(path, bound + 1, f"{AUTH_HEADER}: {proof}"), b"x") == 413
    head = f"POST {ADOPT_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    assert await _status(port, head, b"5\r\nabcde\r\n") == 411


async def test_a_proven_head_lets_the_body_be_read_and_its_signature_still_counts(
        machine: tuple[ClusterNode, int, FakeClock]) -> None:
    _, port, clock = machine
    body = b"not a bundle"
    proof = request_proof(hmac_signer(SECRET), ADOPT_PATH, ADVERTISE, len(body), clock.wall())
    # The head is proven, the body read; the body's own signature (X-Polecat-Signature) is missing.
    assert await _status(port, _post(ADOPT_PATH, len(body), f"{AUTH_HEADER}: {proof}"), body) == 401


async def test_a_big_batch_is_decoded_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Up to 16 MiB of msgpack is ~0.6 s of CPU: in a thread, the loop serves on meanwhile.
    threads: list[object] = []
    real = asyncio.to_thread

    async def spy(func: Callable[..., object], /, *args: object) -> object:
        threads.append(func)
        return await real(func, *args)

    monkeypatch.setattr(receiver_module.asyncio, "to_thread", spy)
    got: list[Batch] = []

    async def sink(batch: Batch) -> None:
        got.append(batch)

    receiver = HandoffReceiver(sink, verify=hmac_verifier(SECRET))
    small = [HandoffUrl("http://a.test/", 1, 0.5)]
    big = [HandoffUrl(f"http://a.test/{i}/{'x' * 100}", 1, 0.5) for i in range(1000)]
    for seq, urls in enumerate((small, big)):
        reply = await receiver.receive(encode_batch("n1", seq, encode_urls(urls), hmac_signer(SECRET)))
        assert reply.status == "ok"
    assert [len(b.urls) for b in got] == [1, 1000] and threads == [decode_batch]


async def test_a_replayed_head_is_refused_counted_and_logged_and_no_other_node_takes_it(
        machine: tuple[ClusterNode, int, FakeClock], caplog: pytest.LogCaptureFixture) -> None:
    node, port, clock = machine
    sign = hmac_signer(SECRET)
    body = b"not a bundle"
    proof = request_proof(sign, ADOPT_PATH, ADVERTISE, len(body), clock.wall())
    head = _post(ADOPT_PATH, len(body), f"{AUTH_HEADER}: {proof}", f"{SIGNATURE_HEADER}: {sign(body).hex()}")
    assert await _status(port, head, body) == 503  # read and verified; this node has no crawler open
    with caplog.at_level("WARNING", logger="polecat.processes.machine"):
        assert await _status(port, head, body) == 401  # the same head again: a replay
    assert node.stats().replays_refused == 1
    assert any("is a replay" in r.getMessage() for r in caplog.records)
    # Captured on its way to another node, it does not verify here.
    elsewhere = request_proof(sign, ADOPT_PATH, "http://127.0.0.1:3", len(body), clock.wall())
    assert await _status(port, _post(ADOPT_PATH, len(body), f"{AUTH_HEADER}: {elsewhere}"), body) == 401
    # A node of the previous release: its head has no receiver and no nonce, and is refused as such.
    seconds = int(clock.wall())
    old = f"{seconds}.{len(body)}.{sign(f'{ADOPT_PATH} {len(body)} {seconds}'.encode()).hex()}"
    with caplog.at_level("WARNING", logger="polecat.processes.machine"):
        assert await _status(port, _post(ADOPT_PATH, len(body), f"{AUTH_HEADER}: {old}"), body) == 401
    assert any("previous release" in r.getMessage() for r in caplog.records)
    assert node.stats().replays_refused == 1
