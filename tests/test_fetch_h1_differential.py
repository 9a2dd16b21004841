"""polecat's HTTP/1.1 response parser (polecat/fetch/h1.py) held to llhttp, the parser aiohttp and uvicorn
run (through httptools): generated and mutated responses must give the same status, head, body and end,
or be refused by both. llhttp runs with the leniencies aiohttp turns on for responses (bare LF line ends,
spaces after a chunk size, lenient header values), the client polecat replaced. Where h1 differs on
purpose, the difference is a named case below with the rule of h1.py that decides it.

The examples are derandomized, so the suite is repeatable; ``POLECAT_FUZZ=1 pytest
tests/test_fetch_h1_differential.py --hypothesis-seed=N`` explores others (what turns up goes into h1.py
or into the named differences)."""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.fetch.h1 import MalformedResponse, ResponseParser


@dataclass(frozen=True)
class Outcome:
    """What a parser made of the bytes: refused, nothing final yet, or a final response."""

    kind: str
    """``refused``, ``waiting`` or ``response``."""
    status: int = 0
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    complete: bool = False


REFUSED = Outcome("refused")
WAITING = Outcome("waiting")


class _LLHTTP:
    """httptools callbacks: the first final (>= 200) response and its head's fields."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.parser.set_dangerous_leniencies(
            lenient_headers=True, lenient_optional_cr_before_lf=True, lenient_spaces_after_chunk_size=True)
        self.headers: list[tuple[bytes, bytes]] = []
        self.in_head = True
        self.status = 0
        self.body = b""
        self.final: Outcome | None = None

    def on_message_begin(self) -> None:
        self.headers, self.in_head, self.status, self.body = [], True, 0, b""

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.in_head:  # trailers are dropped by h1 (rule 4)
            # h1 keeps values without surrounding spaces and tabs (rule 2); llhttp leaves the trailing ones.
            self.headers.append((name, _spaces(value.strip(b" \t"))))

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        if self.final is None and self.status >= 200:
            self.final = Outcome("response", self.status, tuple(self.headers), self.body, True)


def llhttp(data: bytes) -> Outcome:
    """llhttp's reading of ``data``; a response followed by bytes it refuses is still that response."""
    cb = _LLHTTP()
    try:
        cb.parser.feed_data(data)
    except httptools.HttpParserError:
        return cb.final or REFUSED
    if cb.final is not None:
        return cb.final
    if not cb.in_head and cb.status >= 200:
        return Outcome("response", cb.status, tuple(cb.headers), cb.body, False)
    return WAITING


def h1(data: bytes, cuts: list[int]) -> Outcome:
    """h1's reading of ``data`` fed in the pieces ``cuts`` makes."""
    parser = ResponseParser()
    body = b""
    try:
        for a, b in itertools.pairwise([0, *sorted(c for c in cuts if c < len(data)), len(data)]):
            body += parser.feed(data[a:b])
    except MalformedResponse:
        return REFUSED
    if parser.head is None:
        return WAITING
    headers = tuple((n.encode("utf-8", "surrogateescape"), _spaces(v.encode("utf-8", "surrogateescape")))
                    for n, v in parser.head.headers)
    return Outcome("response", parser.head.status, headers, body, parser.done)


def _spaces(value: bytes) -> bytes:
    """A folded value with its runs of spaces and tabs as one space: h1 replaces a fold with one space
    (rule 1), llhttp drops the line end and keeps the spaces and tabs after it; RFC 9112 5.2 allows both."""
    return re.sub(rb"[ \t]+", b" ", value)


def agree(ours: Outcome, theirs: Outcome) -> bool:
    # Refused and waiting both hand on no response: h1 checks a head's lines once the head is complete
    # (only the limits and the start of the status line before, rule 7), llhttp byte by byte; and a head h1
    # refuses for a limit or a status starting with 0 is one llhttp waits on.
    return ours == theirs or {ours.kind, theirs.kind} == {"refused", "waiting"}


# --- generated responses ---------------------------------------------------------------------------

_EOL = st.sampled_from([b"\r\n", b"\n"])
_STATUS = st.builds(
    lambda version, code, reason: b"HTTP/%s %d%s" % (version, code, reason),
    st.sampled_from([b"1.1", b"1.0"]),
    st.sampled_from([100, 103, 200, 204, 206, 301, 304, 404, 500, 999]),
    st.sampled_from([b" OK", b"", b" ", b" Not Found", b" \xc3\xa9t\xe9"]))
_VALUE = st.binary(max_size=24).map(lambda v: bytes(c for c in v if c >= 0x20 and c != 0x7F))
_HEADER = st.one_of(
    st.builds(lambda n: b"Content-Length: %d" % n, st.integers(0, 40)),
    st.sampled_from([
        b"Content-Length: 3, 3", b"Content-Length: +3", b"Content-Length: 3 ", b"Content-Length: 0x3",
        b"Content-Length:", b"Content-Length: 99999999999999999999", b"content-length: 2",
        b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip, chunked",
        b"Transfer-Encoding: chunked, gzip",
        b"Transfer-Encoding: gzip", b"transfer-encoding: CHUNKED", b"Connection: close",
        b"Connection: keep-alive", b"Connection: Upgrade, close", b"X-Fold: a\r\n b", b"X-Fold: a\r\n\tb  c",
        b"X-Empty:", b"X-Colon: a:b", b"Bad Name: x", b":no-name", b"no-colon",
    ]),
    st.builds(lambda name, value: name + b": " + value,
              st.sampled_from([b"Server", b"Set-Cookie", b"X-\xc3\xa9"]), _VALUE))


@st.composite
def _chunked(draw: st.DrawFn) -> bytes:
    out = b""
    for chunk in draw(st.lists(st.binary(min_size=1, max_size=30), max_size=4)):
        size = draw(st.sampled_from([b"%x", b"%X", b"%x ", b"%x;ext=1", b'%x ; a="b"', b"0%x"])) % len(chunk)
        out += size + draw(_EOL) + chunk + b"\r\n"
    trailers = draw(st.lists(st.sampled_from([b"T: x\r\n", b"Expires: 0\r\n"]), max_size=2))
    return out + b"0" + draw(_EOL) + b"".join(trailers) + b"\r\n"


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    """A response built from the parts servers send, some of them wrong."""
    head = draw(_STATUS) + draw(_EOL)
    for header in draw(st.lists(_HEADER, max_size=6)):
        head += header + draw(_EOL)
    head += draw(_EOL)
    body = draw(st.one_of(_chunked(), st.binary(max_size=50)))
    return head + body


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A generated response with a few bytes deleted, replaced or inserted, or cut short."""
    data = bytearray(draw(responses()))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["delete", "replace", "insert", "cut"]))
        byte = draw(st.sampled_from(b"\r\n \t0a:;,\xff"))
        if op == "delete" and at < len(data):
            del data[at]
        elif op == "replace" and at < len(data):
            data[at] = byte
        elif op == "insert":
            data.insert(at, byte)
        elif op == "cut":
            del data[at:]
    return bytes(data)


_HEAD_END = re.compile(rb"\n\r?\n")


def documented_difference(data: bytes, ours: Outcome, theirs: Outcome) -> bool:
    """The differences h1.py's rules choose; each has its own test below."""
    head, body = [*_HEAD_END.split(data, maxsplit=1), b""][:2]
    lines = head.replace(b"\r\n", b"\n").split(b"\n")
    if ours.kind != "response" and len(lines) > 1 and lines[1][:1] in (b" ", b"\t"):
        return True  # a folded line straight after the status line (test_whitespace_after_the_status_line)
    framing = (b"content-length", b"transfer-encoding")
    if ours.kind == "refused" and any(a.split(b":")[0].lower() in framing and b[:1] in (b" ", b"\t")
                                      for a, b in itertools.pairwise(lines[1:])):
        return True  # a folded framing header (test_folded_framing_headers)
    if ours.kind == "refused" and any(re.match(rb"[^:]*[ \t]:", line) for line in lines[1:]):
        return True  # whitespace before a colon (test_whitespace_before_the_colon)
    text = head.replace(b"\r\n", b"").replace(b"\n", b"")
    if ours.kind != "response" and any(c < 0x20 and c != 0x09 for c in text):
        return True  # a control character in the head (test_control_characters_in_the_head)
    chunked = any(b"chunked" in line.lower() for line in lines) and ours.kind == "response"
    if chunked and theirs.kind == "refused" and b";" in body:
        return True  # a chunk extension (test_chunk_extensions_are_dropped_unread)
    # a bare LF in a chunked body's lines (test_bare_lf_in_chunk_lines)
    return chunked and b"\n" in body.replace(b"\r\n", b"")


_FUZZ = settings(max_examples=400, deadline=None, derandomize=not os.environ.get("POLECAT_FUZZ"))


@given(data=responses(), cuts=st.lists(st.integers(0, 400), max_size=6))
@_FUZZ
def test_generated_responses_read_as_llhttp_reads_them(data: bytes, cuts: list[int]) -> None:
    ours, theirs = h1(data, cuts), llhttp(data)
    assert agree(ours, theirs) or documented_difference(data, ours, theirs), (data, ours, theirs)


@given(data=mutated(), cuts=st.lists(st.integers(0, 400), max_size=6))
@_FUZZ
def test_mutated_responses_read_as_llhttp_reads_them(data: bytes, cuts: list[int]) -> None:
    ours, theirs = h1(data, cuts), llhttp(data)
    assert agree(ours, theirs) or documented_difference(data, ours, theirs), (data, ours, theirs)


# --- where h1 differs on purpose -------------------------------------------------------------------

def test_whitespace_after_the_status_line() -> None:
    # RFC 9112 2.2: a recipient MUST reject such a message or drop the line; lenient llhttp reads it as a
    # header. h1 refuses (rule 1: a continuation line continues a previous header, and there is none).
    data = b"HTTP/1.1 200 OK\r\n X: a\r\nContent-Length: 0\r\n\r\n"
    assert (h1(data, []), llhttp(data).kind) == (REFUSED, "response")


@pytest.mark.parametrize("value", [b"a\x00b", b"a\x01b", b"a\x7fb"])
def test_control_characters_in_the_head(value: bytes) -> None:
    # RFC 9110 5.5 forbids NUL in a field value; aiohttp's lenient llhttp passes it and other controls
    # (and takes "\r\r\n" after a value as the end of the head). h1 refuses every control other than a
    # tab (rule 1), as llhttp does when strict.
    data = b"HTTP/1.1 200 OK\r\nX: " + value + b"\r\nContent-Length: 0\r\n\r\n"
    assert (h1(data, []), llhttp(data).kind) == (REFUSED, "response")
    strict = httptools.HttpResponseParser(_LLHTTP())
    with pytest.raises(httptools.HttpParserError):
        strict.feed_data(data)


def test_bare_lf_in_chunk_lines() -> None:
    # Rule 1 takes a bare LF as a line end everywhere (RFC 9112 2.2); llhttp takes it in the head only
    # (in a chunked body it refuses it, or reads the line after it as chunk data).
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\r\n0\n\r\n"
    assert (h1(data, []), llhttp(data).kind) == (
        Outcome("response", 200, ((b"Transfer-Encoding", b"chunked"),), b"ok", True), "refused")


def test_only_http_1_x() -> None:
    # A GET sent as HTTP/1.1 is answered in HTTP/1.x (rule 1); llhttp also takes "HTTP/2.0" as a version.
    data = b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"
    assert (h1(data, []), llhttp(data).kind) == (REFUSED, "response")


@pytest.mark.parametrize("extension", [b"; a=b", b" ; a", b' ; a="b"'])
def test_chunk_extensions_are_dropped_unread(extension: bytes) -> None:
    # Rule 4 drops chunk extensions without reading them (RFC 9112 7.1.1 lets a recipient ignore them).
    # llhttp parses them and refuses forms the RFC allows (a space after ";", a name without a value)
    # and, after a quoted value, a chunk that is a NUL.
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1" + extension + b"\r\n\x00\r\n0\r\n\r\n"
    assert (h1(data, []), llhttp(data).kind) == (
        Outcome("response", 200, ((b"Transfer-Encoding", b"chunked"),), b"\x00", True), "refused")


def test_whitespace_before_the_colon() -> None:
    # RFC 9112 5.1: no whitespace between a field name and its colon; h1 refuses it (rule 2: a name is a
    # token), as llhttp does when strict; aiohttp's lenient llhttp takes some.
    data = b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n"
    assert (h1(data, []), llhttp(data).kind) == (REFUSED, "response")
    strict = httptools.HttpResponseParser(_LLHTTP())
    with pytest.raises(httptools.HttpParserError):
        strict.feed_data(data)


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\r\nContent-Length:\r\n 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
])
def test_folded_framing_headers(data: bytes) -> None:
    # Rule 1: a Content-Length or Transfer-Encoding is one line (h1 read "Content-Length: 0" folded onto
    # " ontent-Length: 0" as a length of 0 and a value of "0 ontent-Length: 0"); lenient llhttp joins
    # a fold onto an empty value.
    assert (h1(data, []), llhttp(data).kind) == (REFUSED, "response")

