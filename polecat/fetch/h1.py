"""HTTP/1.1 for a crawler, sans-IO: the request bytes of a GET, and a parser of the response to it.

No sockets here (as h11 keeps them out): :func:`encode_get` returns bytes to write, and
:class:`ResponseParser` takes the bytes that arrive and says what they were. The connection that runs
both is :mod:`polecat.fetch.pool`.

Rules (RFC 9112, with the limits aiohttp, the client before this one, used; so what is fetched and
refused does not change with the client):

1. The head: empty lines (skipped), a status line ``HTTP/1.x NNN reason`` and at most :data:`MAX_HEADERS`
   header lines, each line at most :data:`MAX_LINE` bytes. Lines end in CRLF or a bare LF (RFC 9112 2.2
   lets a recipient accept LF). A line that starts with a space or tab continues the previous value
   (obsolete folding, replaced by one space, RFC 9112 5.2; never a Content-Length or Transfer-Encoding,
   whose framing must be one line). Anything else, a control character other than
   a tab included, is a :class:`MalformedResponse`. ``tests/test_fetch_h1_differential.py`` holds these
   rules to llhttp (aiohttp's parser) and names where they differ: h1 refuses controls in the head and
   the trailers, whitespace before a colon, a whitespace line straight after the status line and any
   folded framing header, takes only HTTP/1.0 and 1.1, takes a bare LF in chunk lines too, and drops
   chunk extensions unread (rule 4).
2. Names are tokens (RFC 9110 5.1), kept as sent. Values are decoded as UTF-8 with ``surrogateescape``
   (no byte is lost; the WARC writer shows the undecodable ones as escapes), without surrounding spaces
   and tabs.
3. Interim responses (1xx other than 101) are skipped: the next head is the response. 101 is refused: a
   GET never asks to switch protocols.
4. Body framing (RFC 9112 6.3), in this order: 1xx, 204 and 304 have no body; ``Transfer-Encoding``
   ending in ``chunked`` is chunked (chunk extensions and trailers are read and dropped; a chunk size may
   be followed by spaces, not preceded); any other ``Transfer-Encoding`` is delimited by the close;
   ``Content-Length`` (exactly one header with one value) is exact; no framing header: delimited by the
   close. A ``Transfer-Encoding`` next to a ``Content-Length``, or a second ``Content-Length`` even with
   the same value, is malformed: llhttp (aiohttp's parser) refuses both, and two framings are what
   smuggling is made of.
5. Keep-alive: HTTP/1.1 unless ``Connection: close``; HTTP/1.0 only with ``Connection: keep-alive`` and a
   length or chunked framing. A close-delimited body, or bytes past the end of the message (no request was
   pipelined) end the connection too.
6. A connection that closes before the message ends (``feed_eof``) raises :class:`IncompleteResponse`,
   unless the body is close-delimited.
7. Work is linear in the bytes received, however they are cut: a head that arrives in pieces is appended
   to one buffer and only the new bytes are searched for its end and checked against the limits (a
   server dripping a 1 MB head 50 bytes at a time must not cost a copy and a search of the whole head
   per piece).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "MAX_HEADERS", "MAX_LINE", "Head", "IncompleteResponse", "MalformedResponse", "ResponseParser",
    "encode_get",
]

MAX_LINE = 8190
"""Bytes in the status line and in each header line (aiohttp's ``max_line_size``/``max_field_size``)."""
MAX_HEADERS = 128
"""Header lines in one head (aiohttp's ``max_headers``)."""
_MAX_CHUNK_LINE = 4096
"""Bytes in a chunk-size line with its extensions."""


class MalformedResponse(Exception):
    """The bytes received are not an HTTP/1.x response (rules 1, 3 and 4 say what is)."""


class IncompleteResponse(Exception):
    """The connection closed before the response ended (before its head, or mid-body)."""


@dataclass(frozen=True, slots=True)
class Head:
    """A parsed response head (rules 1-5)."""

    status: int
    reason: str
    version: int
    """11 for HTTP/1.1, 10 for HTTP/1.0."""
    headers: tuple[tuple[str, str], ...]
    """In the order received."""
    keep_alive: bool
    """The response, as sent, lets the connection carry another request (rule 5)."""
    first: dict[str, str]
    """Lowercased name -> its first value."""

    def get(self, name: str) -> str | None:
        """The first value of ``name`` (given in lower case), or None."""
        return self.first.get(name)


def encode_get(target: str, host: str, headers: tuple[tuple[str, str], ...]) -> bytes:
    """The bytes of ``GET target`` to ``host`` (the Host header value) with ``headers`` after Host.
    ``target`` and the header values must not hold CR, LF or NUL: the caller builds them from a parsed URL
    and from configuration (both checked there)."""
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    lines.append("\r\n")
    return "\r\n".join(lines).encode("utf-8", "surrogateescape")


# Parser states.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _CLOSE, _DONE = range(8)


class ResponseParser:
    """Parses one response to one GET. :meth:`feed` the bytes as they arrive; it returns the body bytes
    they carry. :attr:`head` is set once the head is complete, :attr:`done` once the message is; bytes
    after the message are dropped (and make the connection not reusable, rule 5)."""

    __slots__ = ("_buf", "_head_lines", "_head_part", "_left", "_line_start", "_state", "done", "head",
                 "reusable")

    def __init__(self) -> None:
        self._buf = b""
        """The unparsed end of a chunked body (at most one chunk-size or trailer line)."""
        self._head_part = bytearray()
        """The head received so far, while it is incomplete (rule 7)."""
        self._line_start = 0
        """Where the last line of ``_head_part`` starts."""
        self._head_lines = 0
        """Line ends in ``_head_part``."""
        self._state = _HEAD
        self._left = 0
        self.head: Head | None = None
        self.done = False
        self.reusable = False
        """Once ``done``: the connection may carry the next request."""

    def feed(self, data: bytes) -> bytes | memoryview:
        """Take the next bytes received; return the body bytes among them (``b""`` for none; a view of
        ``data`` where it holds more than body). Raises MalformedResponse."""
        state = self._state
        if state == _LENGTH:  # the hot path: a body of known length arriving in pieces
            left = self._left
            if len(data) < left:
                self._left = left - len(data)
                return data
            return self._finish_length(data, left)
        if state == _CLOSE:
            return data
        if state == _DONE:
            if data:  # nothing was asked for: the connection cannot be trusted with a next request
                self.reusable = False
            return b""
        if state == _HEAD:
            return self._feed_head(data)
        if self._buf:
            data = self._buf + data
            self._buf = b""
        return self._feed_chunked(data)

    def feed_eof(self) -> None:
        """The connection closed. Ends a close-delimited body; raises IncompleteResponse if the message
        was not complete."""
        if self._state == _CLOSE:
            self._state = _DONE
            self.done = True
            self.reusable = False
        elif self._state != _DONE:
            where = "before the response head" if self._state == _HEAD else "mid-body"
            raise IncompleteResponse(f"connection closed {where}")

    # --- head --------------------------------------------------------------------------------------

    def _feed_head(self, data: bytes) -> bytes | memoryview:
        part = self._head_part
        if part:
            # Only a head end that takes in the new bytes can be new: the old ones were searched (rule 7).
            searched = len(part)
            part += data
            end = _head_end(part, max(searched - 3, 0))
            if end < 0:
                self._check_partial_head(searched)
                return b""
            data = bytes(part)  # one copy per head, not per piece
            self._head_part = bytearray()
            start = 0
        else:
            start = _skip_blank_lines(data, 0)
            end = _head_end(data, start)
        while True:
            if end < 0:
                if start < len(data):
                    self._head_part = bytearray(memoryview(data)[start:])
                    self._line_start = self._head_lines = 0
                    self._check_partial_head(0)
                return b""
            head, framing = _parse_head(data[start:end])
            start = end
            if head.status >= 200:
                break
            if head.status == 101:
                raise MalformedResponse("unexpected 101 Switching Protocols")
            # 1xx interim response: the real one follows (rule 3)
            start = _skip_blank_lines(data, start)
            end = _head_end(data, start)
        self.head = head
        if head.status in (204, 304):
            framing = 0
        if framing == _CHUNKED:
            self._state = _CHUNK_SIZE
            return self._feed_chunked(data[start:]) if start < len(data) else b""
        # The body that came with the head is handed on as a view: a copy of it cost a page's fetch more
        # than the rest of its parsing.
        rest = memoryview(data)[start:]
        if framing == _TO_CLOSE:
            self._state = _CLOSE
            return rest
        if len(rest) < framing:
            self._state, self._left = _LENGTH, framing - len(rest)
            return rest
        return self._finish_length(rest, framing)

    def _check_partial_head(self, new: int) -> None:
        """An incomplete head may not already break a limit: a server that sends one endless header, or
        endless headers, must not make the client buffer them; a head that does not start as a status
        line is refused before the rest arrives. Reads ``_head_part`` from ``new`` only."""
        part = self._head_part
        if new < 7 and not b"HTTP/1.".startswith(part[:7]):
            raise MalformedResponse(f"bad status line {bytes(part[:40])!r}")
        last = part.rfind(b"\n", new)
        if last >= 0:
            self._line_start = last + 1
        if len(part) - self._line_start > MAX_LINE:
            raise MalformedResponse("response header line too long")
        self._head_lines += part.count(b"\n", new)
        if len(part) > 65536 and self._head_lines > MAX_HEADERS + 1:
            raise MalformedResponse(f"more than {MAX_HEADERS} response headers")

    def _finish_length(self, data: bytes | memoryview, left: int) -> bytes | memoryview:
        self._state, self._left, self.done = _DONE, 0, True
        assert self.head is not None
        self.reusable = self.head.keep_alive and len(data) == left
        return data[:left] if len(data) > left else data

    # --- chunked -----------------------------------------------------------------------------------

    def _feed_chunked(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos, n = 0, len(data)
        state, left = self._state, self._left
        while pos < n:
            if state == _CHUNK_DATA:
                take = min(left, n - pos)
                out.append(data[pos:pos + take])
                pos += take
                left -= take
                if left == 0:
                    state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if data[pos:pos + 2] == b"\r\n":
                    pos += 2
                elif data[pos:pos + 1] == b"\n":
                    pos += 1
                elif n - pos < 2 and data[pos:pos + 1] == b"\r":
                    break  # the LF is in the next piece
                else:
                    raise MalformedResponse("malformed chunked body: no line end after a chunk")
                state = _CHUNK_SIZE
            else:  # _CHUNK_SIZE or _TRAILERS: one line
                if state == _CHUNK_SIZE and (m := _CHUNK_HEAD.match(data, pos)) is not None:
                    # The usual chunk-size line in one C call, and its chunk at once where it is all
                    # here: a hostile stream of one-byte chunks costs ~0.5 us a chunk, not ~1.1.
                    left, pos = int(m.group(1), 16), m.end()
                    end = pos + left
                    if not left:
                        state = _TRAILERS
                    elif data[end:end + 2] == b"\r\n":
                        out.append(data[pos:end])
                        pos, left = end + 2, 0
                    else:
                        state = _CHUNK_DATA
                    continue
                eol = data.find(b"\n", pos)
                if eol < 0:
                    if state == _CHUNK_SIZE and not _CHUNK_SIZE_START.match(data, pos):  # as llhttp
                        bad = data[pos:pos + 20]
                        raise MalformedResponse(f"malformed chunked body: bad chunk size {bad!r}")
                    if n - pos > (_MAX_CHUNK_LINE if state == _CHUNK_SIZE else MAX_LINE):
                        raise MalformedResponse("malformed chunked body: line too long")
                    break
                line = data[pos:eol - 1] if data[eol - 1:eol] == b"\r" else data[pos:eol]
                pos = eol + 1
                if state == _TRAILERS:
                    if not line:
                        self._state, self.done = _DONE, True
                        assert self.head is not None
                        self.reusable = self.head.keep_alive and pos == n
                        return b"".join(out)
                    if _CONTROL.search(line):  # as in the head (rule 1)
                        raise MalformedResponse(f"malformed chunked body: bad trailer line {line[:40]!r}")
                    continue  # trailer fields are dropped
                size = line.split(b";", 1)[0].rstrip(b" \t")
                if not size or len(size) > 16 or not _is_hex(size):
                    raise MalformedResponse(f"malformed chunked body: bad chunk size {size[:20]!r}")
                left = int(size, 16)
                state = _CHUNK_DATA if left else _TRAILERS
        self._buf = data[pos:]
        self._state, self._left = state, left
        return b"".join(out)


_CHUNK_HEAD = re.compile(rb"([0-9A-Fa-f]{1,16})(?:[ \t]*;[^\r\n]{0,4000})?\r?\n")
"""A chunk-size line as servers send it (the size, extensions dropped); anything else takes the slow path,
which accepts what this does not (spaces after the size) and refuses what is malformed."""
_CHUNK_SIZE_START = re.compile(rb"(?:[0-9A-Fa-f]+[ \t;\r]?)?\Z|[0-9A-Fa-f]+[ \t;\r]")
"""What an incomplete chunk-size line may start with: a bad byte is refused before the line ends."""
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""A control character other than a tab."""
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_CHUNKED = -1
_TO_CLOSE = -2
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _is_hex(value: bytes) -> bool:
    return all(c in _HEX for c in value)


def _skip_blank_lines(data: bytes, start: int) -> int:
    """Past the empty lines before a head (rule 1), as llhttp skips them."""
    while start < len(data) and data[start] in (10, 13):
        start += 1
    return start


def _head_end(data: bytes | bytearray, start: int) -> int:
    """The index just past the blank line that ends the head starting at ``start``, or -1. Only the
    head is searched for a bare-LF blank line: the body after it may hold any bytes."""
    # The blank line is a line end followed by CRLF or LF; a bare-LF line then a CRLF blank one counts.
    crlf = data.find(b"\n\r\n", start)
    lf = data.find(b"\n\n", start, crlf + 2 if crlf >= 0 else len(data))
    if lf >= 0:
        return lf + 2
    return crlf + 3 if crlf >= 0 else -1


def _parse_head(raw: bytes) -> tuple[Head, int]:
    """The head, and its body framing: a length >= 0, _CHUNKED or _TO_CLOSE (rule 4)."""
    if len(raw) > MAX_LINE and any(len(line.rstrip(b"\r")) > MAX_LINE for line in raw.split(b"\n")):
        raise MalformedResponse("response header line too long")
    # Decoded once: UTF-8 never puts an ASCII byte inside a character, so splitting the text at CR, LF,
    # colons and spaces gives what decoding each piece would.
    lines = raw.decode("utf-8", "surrogateescape").split("\n")
    status_line = lines[0][:-1] if lines[0].endswith("\r") else lines[0]  # one CR: a second is refused
    if status_line.startswith("HTTP/1.1 "):
        version = 11
    elif status_line.startswith("HTTP/1.0 "):
        version = 10
    else:
        raise MalformedResponse(f"bad status line {status_line[:40]!r}")
    code, _, reason = status_line[9:].partition(" ")
    bad_reason = not reason.isprintable() and _bad_line(reason)  # a lone CR in it, say, as llhttp refuses
    if len(code) != 3 or not code.isdigit() or not code.isascii() or code[0] == "0" or bad_reason:
        raise MalformedResponse(f"bad status line {status_line[:40]!r}")
    headers: list[tuple[str, str]] = []
    first: dict[str, str] = {}
    length: int | None = None
    transfer: str | None = None
    connection = ""
    for line in lines[1:]:
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            continue  # the blank line(s) at the end of the head
        if line[0] in " \t":
            if not headers:
                raise MalformedResponse("response head starts with a continuation line")
            if not line.isprintable() and _bad_line(line):  # a lone CR in a folded value, say
                raise MalformedResponse(f"bad response header line {line[:40]!r}")
            name, value = headers[-1]
            if name.lower() in ("content-length", "transfer-encoding"):  # its framing was read already
                raise MalformedResponse(f"a folded {name} header")
            more = line.strip(" \t")
            headers[-1] = (name, f"{value} {more}" if value and more else value or more)
            continue
        if len(headers) >= MAX_HEADERS:
            raise MalformedResponse(f"more than {MAX_HEADERS} response headers")
        name, colon, value = line.partition(":")
        # A name is a token (RFC 9110 5.1): no spaces, tabs, controls or non-ASCII, as llhttp says.
        bad = not colon or _TOKEN.fullmatch(name) is None
        if bad or (not line.isprintable() and _bad_line(line)):
            raise MalformedResponse(f"bad response header line {line[:40]!r}")
        value = value.strip(" \t")
        headers.append((name, value))
        lower = name.lower()
        if lower not in first:
            first[lower] = value
        if lower == "content-length":
            length = _content_length(value, length)
        elif lower == "transfer-encoding":
            transfer = value if transfer is None else f"{transfer}, {value}"
        elif lower == "connection":
            connection = f"{connection},{value.lower()}"
    tokens = {t.strip() for t in connection.split(",")}
    keep_alive = "close" not in tokens if version == 11 else "keep-alive" in tokens
    if transfer is not None:
        if length is not None:
            raise MalformedResponse("both Transfer-Encoding and Content-Length")
        framing = _CHUNKED if transfer.rsplit(",", 1)[-1].strip().lower() == "chunked" else _TO_CLOSE
        if framing == _TO_CLOSE:
            keep_alive = False
    elif length is not None:
        framing = length
    else:
        framing = _TO_CLOSE
        keep_alive = False
    return Head(int(code), reason, version, tuple(headers), keep_alive, first), framing


def _bad_line(line: str) -> bool:
    """A header line with a control character other than a tab (in a value), e.g. NUL or a lone CR.
    Text that is merely not printable (an undecodable byte, a non-ASCII space) is allowed."""
    return any((c < " " and c != "\t") or c == "\x7f" for c in line)


def _content_length(value: str, previous: int | None) -> int:
    if previous is not None:
        raise MalformedResponse("more than one Content-Length")
    if not value.isdigit() or not value.isascii() or len(value) > 18:
        raise MalformedResponse(f"bad Content-Length {value[:40]!r}")
    return int(value)
