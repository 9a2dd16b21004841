"""What an open connection costs in anonymous memory, TCP against TLS, under uvloop or asyncio's loop
(benchmarks/README.md "HTTPS breadth crawl, and TLS session resumption"; fetch/pool.py rule 12).

    python -m benchmarks.bench_conn_memory --loop uvloop --tls --open 2000 --total 12000

A local server (a child process, so its memory is not counted) answers keep-alive GETs with a 1.5 KB page
over TCP and over TLS (a certificate from a local CA, trustme). This process opens ``--total``
connections, 50 at a time, each with two requests, and keeps ``--open`` of them, closing one at random for
each one past that (the churn of a crawl: glibc reuses the freed memory of closed connections). Reported:
RssAnon per open connection at the end, malloc's bytes in use (``mallinfo2``) per connection, what
remains once every connection is closed, and the CPU per connection. ``--mmap-threshold N`` fixes glibc's
mmap threshold at N bytes first (``mallopt``; glibc raises it past each freed mmapped chunk otherwise);
``--trim-every N`` calls ``malloc_trim(0)`` after every N connections closed and reports its CPU a call.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import random
import resource
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = """
import asyncio, ssl, sys
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(sys.argv[1])
body = b"<html>" + b"x" * 1500 + b"</html>"
answer = b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body
async def serve(reader, writer):
    try:
        while True:
            await reader.readuntil(b"\\r\\n\\r\\n")
            writer.write(answer)
            await writer.drain()
    except Exception:
        pass
    writer.close()
async def main():
    plain = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
    tls = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx, backlog=4096)
    print(plain.sockets[0].getsockname()[1], tls.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.mallinfo2.restype = _MallInfo2


def _anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def _malloc_in_use() -> int:
    info = _LIBC.mallinfo2()
    return int(info.uordblks + info.hblkhd)


class _Client(asyncio.Protocol):
    def __init__(self) -> None:
        self.done: asyncio.Future[None] | None = None
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.buf.endswith(b"</html>") and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def _one(port: int, context: ssl.SSLContext | None, n: int) -> asyncio.Transport:
    loop = asyncio.get_running_loop()
    transport, client = await loop.create_connection(
        _Client, "127.0.0.1", port, ssl=context, server_hostname=f"h{n}.bench.test" if context else None)
    for _ in range(2):
        client.done, client.buf = loop.create_future(), b""
        transport.write(b"GET / HTTP/1.1\r\nHost: h.bench.test\r\n\r\n")
        await client.done
    return transport


async def _run(args: argparse.Namespace, ports: tuple[int, int], ca: Path) -> None:
    context = None
    if args.tls:
        from polecat.fetch.pool import ResumingContext  # the crawl's context (pool rule 10)

        context = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(str(ca))
    port = ports[1] if args.tls else ports[0]
    for transport in [await _one(port, context, n) for n in range(50)]:  # the loop's first allocations
        transport.close()
    await asyncio.sleep(0.2)
    gc.collect()
    anon0, malloc0, cpu0 = _anon(), _malloc_in_use(), time.process_time()
    kept: list[asyncio.Transport] = []
    made = closed = trims = 0
    trim_cpu = 0.0
    while made < args.total:
        kept += await asyncio.gather(*(_one(port, context, made + i) for i in range(50)))
        made += 50
        while len(kept) > args.open:
            kept.pop(random.randrange(len(kept))).close()
            closed += 1
        await asyncio.sleep(0)
        if args.trim_every and closed >= args.trim_every:
            closed, t0 = 0, time.process_time()
            _LIBC.malloc_trim(0)
            trim_cpu += time.process_time() - t0
            trims += 1
    cpu = time.process_time() - cpu0
    await asyncio.sleep(0.5)
    gc.collect()
    anon1, malloc1 = _anon(), _malloc_in_use()
    for transport in kept:
        transport.close()
    await asyncio.sleep(1.0)
    gc.collect()
    anon2 = _anon()
    kind = "TLS" if args.tls else "TCP"
    threshold = args.mmap_threshold or "glibc default"
    print(f"{kind} on {args.loop}, mmap threshold {threshold}: {made} connections made, {len(kept)} open: "
          f"RssAnon {(anon1 - anon0) / len(kept) / 1024:.1f} KiB a connection "
          f"(+{(anon1 - anon0) / 2**20:.0f} MiB), malloc in use {(malloc1 - malloc0) / len(kept) / 1024:.1f} "
          f"KiB a connection; all closed: RssAnon +{(anon2 - anon0) / 2**20:.0f} MiB; CPU "
          f"{1000 * cpu / made:.2f} ms a connection")
    if trims:
        print(f"malloc_trim(0): {trims} calls, {1000 * trim_cpu / trims:.2f} ms CPU a call")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--open", type=int, default=2000, help="connections kept open")
    p.add_argument("--total", type=int, default=12000, help="connections made in all")
    p.add_argument("--mmap-threshold", type=int, default=0, metavar="BYTES")
    p.add_argument("--trim-every", type=int, default=0, metavar="N",
                   help="malloc_trim(0) after every N connections closed (0: never)")
    args = p.parse_args()
    if args.mmap_threshold:
        _LIBC.mallopt(-3, args.mmap_threshold)  # M_MMAP_THRESHOLD
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import trustme  # a test dependency: only this benchmark needs it

    with tempfile.TemporaryDirectory(prefix="bench-conn-") as tmp:
        ca = trustme.CA()
        ca.cert_pem.write_to_path(os.path.join(tmp, "ca.pem"))
        key = os.path.join(tmp, "key.pem")
        ca.issue_cert("*.bench.test").private_key_and_cert_chain_pem.write_to_path(key)
        server = subprocess.Popen([sys.executable, "-c", SERVER, key],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            plain, tls = (int(port) for port in server.stdout.readline().split())
            coro = _run(args, (plain, tls), Path(tmp) / "ca.pem")
            if args.loop == "uvloop":
                import uvloop

                uvloop.run(coro)
            else:
                asyncio.run(coro)
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
