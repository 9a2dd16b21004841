"""What one claim frame costs to carry between two nodes (issue 35): a signed ``POST /handoff`` against the
claims stream (polecat/cluster/claimstream.py), both ends in this process, CPU µs a frame.

    python -m benchmarks.bench_claim_stream [--frames 3000] [--items 11] [--window 1,4] [--rounds 3]

The receiver is a real :class:`~polecat.processes.machine.ClusterNode`'s internal API (its routes, its
request authentication and its content claims' receiver, books in memory; etcd is never called) on
loopback; the sender is the node's HTTP transport, or the stream transport over it. Each frame holds
``--items`` exact claims of new bodies (the 3-node crawl of benchmarks/README.md sends ~11 a frame), so
the receiver's claim book answers every one "first". ``--window`` frames are in flight at once. The
figure is the best of ``--rounds`` rounds: the whole process's CPU (both ends, the claims' books
included, the same for both) over the frames.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from aiohttp import web

from benchmarks.bench_politeness import ADDRESSES
from polecat.cluster.auth import hmac_signer, hmac_verifier
from polecat.cluster.claims import Claim
from polecat.cluster.claimstream import StreamTransport
from polecat.cluster.claimwire import ClaimFrame, encode_near
from polecat.cluster.transport import HttpTransport, Transport
from polecat.config import config_from_mapping
from polecat.processes.machine import ClusterNode
from polecat.runloop import run
from polecat.testing.fakes import MemoryPageStore
from polecat.testing.siteserve import reserve_port

SECRET = "the secret of the benchmark cluster"


async def _rate(transport: Transport, address: str, frames: list[bytes], window: int) -> float:
    """CPU µs a frame for sending ``frames`` to ``address``, ``window`` at a time."""
    t0 = time.process_time()
    for i in range(0, len(frames), window):
        replies = await asyncio.gather(*(transport.post(address, f) for f in frames[i : i + window]))
        assert all(r.status == "ok" for r in replies), replies[0]
    return (time.process_time() - t0) / len(frames) * 1e6


async def _bench(args: argparse.Namespace, data: Path) -> None:
    port = reserve_port(ADDRESSES)
    address = f"http://127.0.0.1:{port}"
    cfg = config_from_mapping({"data_dir": str(data), "cluster": {
        "etcd": "http://127.0.0.1:1", "name": "bench", "node_id": "b", "advertise": address,
        "secret": SECRET}})
    node = ClusterNode(cfg)
    assert node.claims is not None
    node.claims.bind(MemoryPageStore())
    app = web.Application()
    node.routes(app)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    sign = hmac_signer(SECRET)
    http = HttpTransport(sign=sign, verify=hmac_verifier(SECRET))
    stream = StreamTransport(http, sign=sign, verify=hmac_verifier(SECRET))
    counter = itertools.count()

    def frames() -> list[bytes]:
        out = []
        for _ in range(args.frames):
            claims = [Claim(n, hashlib.sha256(b"%d" % n).digest(), f"http://h{n % 97}.test/p{n}", 1.8e9)
                      for n in itertools.islice(counter, args.items)]
            out.append(encode_near(ClaimFrame("a", claims=tuple(claims)), sign))
        return out

    try:
        async with asyncio.timeout(60):  # the stream opens in the background (claimstream rule 5)
            while stream.streamed == 0:
                await stream.post(address, frames()[0])
                await asyncio.sleep(0.01)
        print("| window | frames | items a frame | HTTP, CPU us a frame | stream | ratio |")
        print("|---|---|---|---|---|---|")
        transports: tuple[tuple[str, Transport], ...] = (("http", http), ("stream", stream))
        for window in args.window:
            best = {"http": float("inf"), "stream": float("inf")}
            for _ in range(args.rounds):
                for name, transport in transports:
                    best[name] = min(best[name], await _rate(transport, address, frames(), window))
            http_us, stream_us = best["http"], best["stream"]
            print(f"| {window} | {args.frames:,} | {args.items} | {http_us:.0f} | {stream_us:.0f} | "
                  f"{http_us / stream_us:.1f}x |")
    finally:
        await stream.close()
        await http.close()
        await runner.cleanup()
        await node.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=3000)
    ap.add_argument("--items", type=int, default=11)
    ap.add_argument("--window", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    with TemporaryDirectory(prefix="bench-claim-stream-") as d:
        run(_bench(args, Path(d)))


if __name__ == "__main__":
    main()
