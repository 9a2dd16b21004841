"""What a frame costs to carry between the ``--workers`` of one machine (issue 35): a request and its reply
on the unix socket transport (polecat/cluster/unixwire.py), both ends in this process, CPU µs a frame.

    python -m benchmarks.bench_unixwire [--frames 5000] [--bytes 1500] [--window 1,4] [--rounds 3]

Each figure is taken twice: with the server in this process, and with it in a process of its own (each
request then wakes the server's loop, each reply the client's, as between workers), where the figure is
the CPU of both processes (the server's read off its answer to a frame that asks for it). The receiver
does no work of its own: a frame is answered "ok" at once, as the claims' receiver answers a
claim frame (unixwire rule 4), or after an await, as the hand-off receiver answers a batch. Each post is
a task of its own, as the claims' runner (polecat/cluster/claimlink.py) sends its frames; ``--window``
frames are in flight at once. The figure is the best of ``--rounds`` rounds: the whole process's CPU
(both ends and the event loop, uvloop as in a worker) over the frames. It runs against any tree whose
unixwire has ``UnixTransport`` and ``serve_unix`` (a server without rule 4 awaits every frame).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from polecat.cluster.receiver import Reply
from polecat.cluster.unixwire import UnixTransport, serve_unix
from polecat.runloop import run

OK = Reply("ok")
CPU = b"cpu?"
"""A frame answered with the CPU seconds of the server's process, in its detail."""


def _reply(data: bytes) -> Reply:
    return Reply("ok", detail=repr(time.process_time())) if data == CPU else OK


class _AtOnce:
    """Answers every frame "ok" without waiting."""

    def answer(self, data: bytes) -> Reply | None:
        return _reply(data)

    async def receive(self, data: bytes) -> Reply:
        return _reply(data)


class _Awaited(_AtOnce):
    """Answers every frame "ok" after an await, as a hand-off batch is."""

    def answer(self, data: bytes) -> Reply | None:
        return None

    async def receive(self, data: bytes) -> Reply:
        await asyncio.sleep(0)
        return _reply(data)


RECEIVERS = {"at-once": _AtOnce, "awaited": _Awaited}


async def _server_cpu(transport: UnixTransport, address: str) -> float:
    reply = await transport.post(address, CPU)
    return float(reply.detail)


async def _rate(transport: UnixTransport, address: str, frame: bytes, frames: int, window: int,
                apart: bool) -> float:
    """CPU µs a frame for posting ``frames`` copies of ``frame``, ``window`` at a time (with the server's
    CPU where it runs ``apart``)."""
    server0 = await _server_cpu(transport, address) if apart else 0.0
    t0 = time.process_time()
    for _ in range(0, frames, window):
        posts = [asyncio.ensure_future(transport.post(address, frame)) for _ in range(window)]
        replies = await asyncio.gather(*posts)
        assert all(r.status == "ok" for r in replies), replies[0]
    cpu = time.process_time() - t0
    if apart:
        cpu += await _server_cpu(transport, address) - server0
    return cpu / (frames // window * window) * 1e6


async def _serve(name: str, address: str) -> None:
    """The server of ``--serve``: answers until its stdin closes."""
    server = await serve_unix(RECEIVERS[name](), address)
    print("listening", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.close()


async def _bench(args: argparse.Namespace, sockets: Path) -> None:
    frame = bytes(args.bytes)
    print("| receiver | window | frames | bytes a frame | CPU us a frame, one process | two processes |")
    print("|---|---|---|---|---|---|")
    for name in RECEIVERS:
        here, apart = f"unix:{sockets}/{name}.sock", f"unix:{sockets}/{name}-apart.sock"
        server = await serve_unix(RECEIVERS[name](), here)
        child = await asyncio.create_subprocess_exec(sys.executable, __file__, "--serve", name, apart,
                                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        transport = UnixTransport()
        try:
            assert child.stdout is not None
            async with asyncio.timeout(60):
                await child.stdout.readline()  # it listens
            for window in args.window:
                one, two = [min([await _rate(transport, address, frame, args.frames, window, address == apart)
                                 for _ in range(args.rounds)]) for address in (here, apart)]
                print(f"| {name} | {window} | {args.frames:,} | {args.bytes:,} | {one:.1f} | {two:.1f} |")
        finally:
            await transport.close()
            await server.close()
            assert child.stdin is not None
            child.stdin.close()
            await child.wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=5000)
    ap.add_argument("--bytes", type=int, default=1500)
    ap.add_argument("--window", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", nargs=2, metavar=("RECEIVER", "ADDRESS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        run(_serve(*args.serve))
        return
    with TemporaryDirectory(prefix="bu-") as d:
        run(_bench(args, Path(d)))


if __name__ == "__main__":
    main()
