"""Incremental Content-Encoding decoders whose output is bounded while decoding.

The HTTP client (polecat/fetch/http.py) feeds the body bytes here as they arrive, with the room left
under the body cap. Each decoder stops producing output once that room is used (plus at most one
internal buffer of slack), so a 10 MB gzip bomb that would inflate to 10 GB costs no more than the cap in
memory and time. Supported: identity, gzip / x-gzip (multi-member), deflate (zlib-wrapped or raw, as
servers send both), br and zstd. Stacked encodings (``gzip, br``) are refused as unsupported: no real
server sends them, and bounding the middle stage is not worth the code.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli
import zstandard

from polecat.errors import ProtocolError

__all__ = ["Decoder", "make_decoder"]


class Decoder(Protocol):
    def decode(self, data: bytes | memoryview, limit: int) -> bytes | memoryview:
        """Decode the next input chunk, returning roughly at most ``limit`` bytes (may overshoot by one
        internal buffer); raises ProtocolError on corrupt input. Once a call returned ``limit`` bytes
        or more the caller stops: the rest of the input may be dropped."""
        ...


class _Identity:
    __slots__ = ()

    def decode(self, data: bytes | memoryview, limit: int) -> bytes | memoryview:
        return data


_IDENTITY = _Identity()


class _Zlib:
    __slots__ = ("_d", "_gzip", "_head")

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._d: zlib._Decompress | None = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None
        self._head = b""

    def decode(self, data: bytes | memoryview, limit: int) -> bytes:
        d = self._d
        if d is None:
            # "deflate" is zlib-wrapped by the spec but raw deflate in the wild: sniff the zlib header,
            # which takes two bytes (a first read may bring one).
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return b""
            zlib_header = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            d = self._d = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        out: list[bytes] = []
        n = 0
        buf = data
        try:
            while buf and n < limit:
                chunk = d.decompress(buf, limit - n)
                out.append(chunk)
                n += len(chunk)
                if d.eof:
                    buf = d.unused_data
                    if not (self._gzip and buf[:2] == b"\x1f\x8b"):
                        break  # trailing bytes after the stream are ignored, as browsers do
                    d = self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # next gzip member
                else:
                    buf = d.unconsumed_tail
        except zlib.error as exc:
            raise ProtocolError(f"corrupt {'gzip' if self._gzip else 'deflate'} body: {exc}") from exc
        return b"".join(out)


class _Brotli:
    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d = brotli.Decompressor()

    def decode(self, data: bytes | memoryview, limit: int) -> bytes:
        d = self._d
        try:
            out = [d.process(data, output_buffer_limit=limit)]
            n = len(out[0])
            # Output held back by the limit must be drained with empty input before more is accepted.
            while n < limit and not d.can_accept_more_data():
                chunk = d.process(b"", output_buffer_limit=limit - n)
                if not chunk:
                    break
                out.append(chunk)
                n += len(chunk)
        except brotli.error as exc:
            raise ProtocolError(f"corrupt br body: {exc}") from exc
        return b"".join(out)


class _Full(Exception):
    """Raised from inside zstd's writer callback to stop decoding once the limit is reached."""


class _Sink:
    __slots__ = ("limit", "n", "parts")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.n = 0
        self.limit = 0

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        self.n += len(data)
        if self.n >= self.limit:
            raise _Full
        return len(data)


class _Zstd:
    """zstd offers no output limit per call, but its stream writer hands output over in 64 KiB pieces:
    the sink aborts decoding from inside the callback when the limit is reached."""

    __slots__ = ("_sink", "_writer")

    def __init__(self) -> None:
        self._sink = _Sink()
        self._writer = zstandard.ZstdDecompressor().stream_writer(
            self._sink,  # type: ignore[arg-type]  # only write() is called
            write_size=65536,
        )

    def decode(self, data: bytes | memoryview, limit: int) -> bytes:
        sink = self._sink
        sink.parts, sink.n, sink.limit = [], 0, limit
        try:
            self._writer.write(data)
        except _Full:
            pass
        except zstandard.ZstdError as exc:
            raise ProtocolError(f"corrupt zstd body: {exc}") from exc
        return b"".join(sink.parts)


def _one(token: str) -> Decoder:
    if token in ("gzip", "x-gzip"):
        return _Zlib(gzip=True)
    if token == "deflate":
        return _Zlib(gzip=False)
    if token == "br":
        return _Brotli()
    if token == "zstd":
        return _Zstd()
    raise ProtocolError(f"unsupported content-encoding {token!r}")


def make_decoder(content_encoding: str | None) -> Decoder:
    """A fresh decoder for a Content-Encoding header value (None or empty: identity)."""
    if not content_encoding:
        return _IDENTITY
    tokens = [t.strip().lower() for t in content_encoding.split(",")]
    tokens = [t for t in tokens if t not in ("identity", "")]
    if len(tokens) > 1:
        raise ProtocolError(f"unsupported stacked content-encoding {content_encoding!r}")
    return _one(tokens[0]) if tokens else _IDENTITY
