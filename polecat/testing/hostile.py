"""A hostile HTTP server on loopback, for testing that the fetch layer survives servers that misbehave.

It is a raw asyncio TCP server (not aiohttp's), so it can break the protocol at will: it reads one
request head, looks the path up in its routes and runs that behaviour on the raw stream::

    async with HostileServer({"/bomb": gzip_bomb(10 * 2**30), "/slow": drip(b"abc", interval=1.0)}) as srv:
        await fetcher.fetch(srv.url("/bomb"))
        srv.requests[-1].headers["user-agent"]

Well-formed responses (``respond``) keep the connection alive for the next request; every other
behaviour closes it. Unknown paths answer 404. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType

import brotli
import zstandard

__all__ = [
    "Behaviour",
    "HostileServer",
    "Request",
    "brotli_bomb",
    "drip",
    "gzip_bomb",
    "raw",
    "reset_mid_body",
    "respond",
    "silent",
    "zstd_bomb",
]

_MAX_HEAD = 65536


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    """Lowercased names."""
    arrived: float
    """time.monotonic() when the request head was complete."""


Behaviour = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]
"""Writes a reply; returns True if the connection may serve another request."""


@dataclass(slots=True)
class HostileServer:
    routes: Mapping[str, Behaviour] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _port: int = 0
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self._port}{path}"

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> HostileServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=_MAX_HEAD)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> HostileServer:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                req = _parse(head)
                self.requests.append(req)
                behaviour = self.routes.get(req.path, _NOT_FOUND)
                if not await behaviour(req, writer):
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            writer.transport.abort()


def _parse(head: bytes) -> Request:
    lines = head.decode("latin-1").split("\r\n")
    method, path, *_ = [*lines[0].split(" "), "", ""]
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Request(method, path, headers, time.monotonic())


def _head(status: int, headers: Iterable[tuple[str, str]], length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} X"]
    lines += [f"{k}: {v}" for k, v in headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# --- behaviours ------------------------------------------------------------------------------------


def respond(status: int = 200, body: bytes = b"", headers: Iterable[tuple[str, str]] = ()) -> Behaviour:
    """A well-formed response with Content-Length; the connection stays open. Large bodies go out in
    64 KiB pieces, each drained, so the server never holds a copy of a bomb in its buffers."""
    hdrs = tuple(headers)
    view = memoryview(body)

    async def run(req: Request, w: asyncio.StreamWriter) -> bool:
        w.write(_head(status, hdrs, len(body)))
        for i in range(0, len(view), 65536):
            w.write(view[i : i + 65536])
            await w.drain()
        await w.drain()
        return True

    return run


_NOT_FOUND = respond(404, b"not found")


def raw(data: bytes) -> Behaviour:
    """Write these exact bytes (a broken status line, endless headers...) and close."""

    async def run(req: Request, w: asyncio.StreamWriter) -> bool:
        w.write(data)
        await w.drain()
        return False

    return run


def silent() -> Behaviour:
    """Accept the request and never answer (until the client gives up or the server closes)."""

    async def run(req: Request, w: asyncio.StreamWriter) -> bool:
        await asyncio.Event().wait()
        return False

    return run


def drip(body: bytes, interval: float = 1.0, headers: Iterable[tuple[str, str]] = ()) -> Behaviour:
    """Send the head at once, then the body one byte every ``interval`` seconds."""
    hdrs = tuple(headers)

    async def run(req: Request, w: asyncio.StreamWriter) -> bool:
        w.write(_head(200, hdrs, len(body)))
        await w.drain()
        for i in range(len(body)):
            await asyncio.sleep(interval)
            w.write(body[i : i + 1])
            await w.drain()
        return False

    return run


def reset_mid_body(length: int = 10_000, sent: int = 1_000) -> Behaviour:
    """Promise ``length`` bytes, send ``sent`` of them, then reset the connection (RST, not FIN)."""

    async def run(req: Request, w: asyncio.StreamWriter) -> bool:
        w.write(_head(200, (("Content-Type", "text/html"),), length) + b"x" * sent)
        await w.drain()
        await asyncio.sleep(0.05)
        w.transport.abort()
        return False

    return run


def _compressed(encoding: str, body: bytes) -> Behaviour:
    return respond(200, body, (("Content-Type", "text/html"), ("Content-Encoding", encoding)))


_ZEROS = 64 * 2**20


@functools.lru_cache(maxsize=4)
def _gzip_member() -> bytes:
    return gzip.compress(b"\0" * _ZEROS, 9)


def gzip_bomb(decoded: int = 10 * 2**30) -> Behaviour:
    """A gzip body of concatenated members: ``decoded`` bytes of zeros from ~1/1000 on the wire."""
    return _compressed("gzip", _gzip_member() * max(1, decoded // _ZEROS))


@functools.lru_cache(maxsize=4)
def _zstd_frame() -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(b"\0" * _ZEROS)


def zstd_bomb(decoded: int = 10 * 2**30) -> Behaviour:
    """A zstd body of concatenated frames decoding to ``decoded`` zero bytes."""
    return _compressed("zstd", _zstd_frame() * max(1, decoded // _ZEROS))


@functools.lru_cache(maxsize=4)
def _brotli_stream(decoded: int) -> bytes:
    comp = brotli.Compressor(quality=5)
    chunk = b"\0" * (8 * 2**20)
    out = [comp.process(chunk) for _ in range(max(1, decoded // len(chunk)))]
    out.append(comp.finish())
    return b"".join(out)


def brotli_bomb(decoded: int = 512 * 2**20) -> Behaviour:
    """One brotli stream of ``decoded`` zero bytes (brotli streams cannot be concatenated)."""
    return _compressed("br", _brotli_stream(decoded))
