"""Parse speed of polecat's HTTP/1.1 response parser (polecat/fetch/h1.py) against llhttp (httptools).

    python -m benchmarks.bench_h1 [--rounds 5]

Three responses, each fed whole and in pieces, ``--rounds`` times alternating the two parsers, the best
round's CPU µs a response printed: a typical page (a 12-header head, 30 KB body by Content-Length), the
same page chunked in 4 KB chunks, and the hostile case of issue 33 (a ~1 MB head, 125 lines of 8 KB,
dripped in 50-byte pieces). llhttp gets the leniencies aiohttp uses for responses and the same pieces;
its callbacks collect what h1 returns (the head's fields and the body), so both do the same work.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import httptools

from polecat.fetch.h1 import MAX_HEADERS, ResponseParser

_HEAD = (b"HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 12:00:00 GMT\r\nServer: nginx/1.24\r\n"
         b"Content-Type: text/html; charset=utf-8\r\nCache-Control: max-age=600\r\nVary: Accept-Encoding\r\n"
         b"ETag: \"5f3e-1a2b3c\"\r\nLast-Modified: Fri, 04 Dec 2026 10:00:00 GMT\r\nX-Frame-Options: DENY\r\n"
         b"Strict-Transport-Security: max-age=31536000\r\nAccept-Ranges: bytes\r\nConnection: keep-alive\r\n")
_BODY = b"<p>" + b"x" * 30_000 + b"</p>"


def _chunked(body: bytes, size: int) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def _cut(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


_PAGE = _HEAD + b"Content-Length: %d\r\n\r\n" % len(_BODY) + _BODY
_CHUNKED_PAGE = _HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(_BODY, 4096)
_BIG_HEAD = (b"HTTP/1.1 200 OK\r\n" + (b"X-Big: " + b"v" * 8000 + b"\r\n") * (MAX_HEADERS - 3)
             + b"Content-Length: 2\r\n\r\nok")
CASES: dict[str, list[bytes]] = {
    "page, whole": [_PAGE],
    "page, 1460-byte pieces": _cut(_PAGE, 1460),
    "chunked page, 1460-byte pieces": _cut(_CHUNKED_PAGE, 1460),
    "1 MB head, 50-byte pieces": _cut(_BIG_HEAD, 50),
}


def parse_h1(pieces: list[bytes]) -> int:
    """h1's parse; the body bytes."""
    parser = ResponseParser()
    n = 0
    for piece in pieces:
        n += len(parser.feed(piece))
    assert parser.done and parser.head is not None
    return n


class _Collect:
    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.n = 0
        self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.n += len(body)

    def on_message_complete(self) -> None:
        self.done = True


def parse_llhttp(pieces: list[bytes]) -> int:
    """llhttp's parse; the body bytes."""
    collect = _Collect()
    parser = httptools.HttpResponseParser(collect)
    parser.set_dangerous_leniencies(
        lenient_headers=True, lenient_optional_cr_before_lf=True, lenient_spaces_after_chunk_size=True)
    for piece in pieces:
        parser.feed_data(piece)
    assert collect.done
    return collect.n


def best_us(parse: Callable[[list[bytes]], int], pieces: list[bytes], budget_s: float) -> float:
    """The best CPU µs of one parse among as many as fit ``budget_s`` of CPU (at least one)."""
    best = float("inf")
    spent = 0.0
    while spent < budget_s or best == float("inf"):
        t0 = time.process_time()
        parse(pieces)
        took = time.process_time() - t0
        best, spent = min(best, took), spent + took
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"{'case':34} {'h1 µs':>10} {'llhttp µs':>10} {'h1/llhttp':>10}")
    for name, pieces in CASES.items():
        assert parse_h1(pieces) == parse_llhttp(pieces)
        ours = theirs = float("inf")
        for _ in range(args.rounds):
            ours = min(ours, best_us(parse_h1, pieces, 0.2))
            theirs = min(theirs, best_us(parse_llhttp, pieces, 0.2))
        print(f"{name:34} {ours:10.1f} {theirs:10.1f} {ours / theirs:10.2f}")


if __name__ == "__main__":
    main()
