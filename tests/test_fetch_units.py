"""Sans-IO pieces of the fetch layer: bounded decoders, charset sniffing, Retry-After parsing."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.errors import ProtocolError
from polecat.fetch.decode import make_decoder
from polecat.fetch.http import parse_retry_after, request_parts, request_parts_yarl
from polecat.parse.charset import decode_html, sniff_charset, utf8_body

DATA = bytes(range(256)) * 400 + b"tail"
COMPRESS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "identity": lambda b: b,
}


def feed(encoding: str | None, wire: bytes, limit: int, step: int = 1000) -> bytes:
    """Feed ``wire`` in ``step``-byte chunks the way the client does, stopping at the limit."""
    d = make_decoder(encoding)
    out = b""
    for i in range(0, len(wire), step):
        out += d.decode(wire[i : i + step], limit - len(out) + 1)
        if len(out) > limit:
            break
    return out


@pytest.mark.parametrize("enc", sorted(COMPRESS))
@pytest.mark.parametrize("step", [1, 7, 4096, 10**6])
def test_round_trip_any_chunking(enc: str, step: int) -> None:
    assert feed(enc, COMPRESS[enc](DATA), 10**7, step) == DATA


@pytest.mark.parametrize("enc", ["gzip", "deflate", "br", "zstd"])
def test_output_bounded_by_limit(enc: str) -> None:
    wire = COMPRESS[enc](b"\0" * (64 * 2**20))
    out = feed(enc, wire, 100_000, step=len(wire))
    assert 100_000 < len(out) <= 100_000 + 2 * 2**20  # at most one internal buffer of slack


def test_raw_deflate_and_multi_member_gzip() -> None:
    assert feed("deflate", zlib.compress(DATA, wbits=-15), 10**7) == DATA
    assert feed("gzip", gzip.compress(b"one ") + gzip.compress(b"two"), 100) == b"one two"
    assert feed("gzip", gzip.compress(b"x") + b"\0\0trailing junk", 100) == b"x"


@pytest.mark.parametrize("enc", ["gzip", "deflate", "br", "zstd"])
def test_corrupt_input_is_protocol_error(enc: str) -> None:
    with pytest.raises(ProtocolError):
        feed(enc, b"\x1f\x8b\x08this is not compressed data at all" * 10, 10**6)


@pytest.mark.parametrize("value", ["compress", "gzip, br", "snappy"])
def test_unsupported_encodings(value: str) -> None:
    with pytest.raises(ProtocolError):
        make_decoder(value)


def test_identity_variants() -> None:
    for value in (None, "", "identity", " Identity "):
        assert make_decoder(value).decode(b"abc", 1) == b"abc"
    assert feed("GZIP", gzip.compress(b"case"), 100) == b"case"


@pytest.mark.parametrize(("body", "header", "codec"), [
    (b"\xef\xbb\xbf<p>x", "iso-8859-1", "utf-8"),  # BOM beats header
    (b"\xff\xfe<\x00p\x00", None, "utf-16-le"),
    (b"<p>x", "ISO-8859-1", "cp1252"),  # latin-1 label means windows-1252
    (b"<p>x", "utf8", "utf-8"),
    (b'<head><meta charset="shift_jis">', None, "shift_jis"),
    (b"<meta http-equiv='Content-Type' content='text/html; charset=koi8-r'>", None, "koi8-r"),
    (b'<meta charset="utf-16">', None, "utf-8"),  # a meta that says utf-16 cannot be true
    (b'<meta charset="no-such-charset">', None, "utf-8"),
    (b"<p>x", "base64", "utf-8"),  # not a text encoding
    (b"<p>x", "bogus", "utf-8"),
    (b" " * 3000 + b'<meta charset="koi8-r">', None, "utf-8"),  # beyond the first 2 KiB
])
def test_sniff_charset(body: bytes, header: str | None, codec: str) -> None:
    assert sniff_charset(body, header) == codec


def test_decode_html() -> None:
    assert decode_html("héllo".encode("cp1252"), "latin1") == "héllo"
    assert decode_html("\ufeffhi".encode(), None) == "hi"
    sjis = "日本".encode("shift_jis") + b'<meta charset="sjis">'
    assert decode_html(sjis, None) == '日本<meta charset="sjis">'
    assert decode_html(b"\x80\xfe broken", "utf-8") == "\ufffd\ufffd broken"


@given(st.binary(max_size=300), st.one_of(st.none(), st.text(max_size=20)))
def test_decode_html_never_raises(body: bytes, header: str | None) -> None:
    assert isinstance(decode_html(body, header), str)


@given(st.one_of(st.binary(max_size=300), st.text(max_size=100).map(str.encode),
                 st.text(max_size=100).map(lambda t: "\ufeff".encode() + t.encode())),
       st.sampled_from([None, "utf-8", "latin1", "shift_jis", "utf-16"]))
def test_utf8_body_is_what_decode_html_reads_as_utf8(body: bytes, header: str | None) -> None:
    utf8 = utf8_body(body, header)
    assert (utf8 is not None) == (sniff_charset(body, header) == "utf-8")
    if utf8 is not None:
        assert utf8 == body.removeprefix(b"\xef\xbb\xbf")
        assert utf8.decode("utf-8", "replace") == decode_html(body, header)


def test_utf8_body_examples() -> None:
    assert utf8_body("h\u00e9llo".encode(), None) == "h\u00e9llo".encode()
    assert utf8_body(b"\xef\xbb\xbfhi", None) == b"hi"
    assert utf8_body(b"\x80 broken", "utf-8") == b"\x80 broken"  # not checked: the guard kernel does
    assert utf8_body("h\u00e9".encode("cp1252"), "latin1") is None
    assert utf8_body(b'<meta charset="sjis">', None) is None


def test_parse_retry_after() -> None:
    now = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(" 0 ", now) == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:30:00 GMT", now) == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now) == 0.0  # in the past
    assert parse_retry_after("-5", now) is None
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("", now) is None


_URL_PIECES = ["a", "z", "0", "9", ".", "-", "/", "?", "=", "&", "%", "%2F", "#", "@", ":", ":80", ":443",
               ":8080", ":0", ":65535", ":65536", ":08", "A", "~", " ", "\u00e9", "..", "[::1]", "x.test"]


@settings(max_examples=800)
@given(st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "http:/", ""]),
       st.lists(st.sampled_from(_URL_PIECES), max_size=12).map("".join),
       st.lists(st.sampled_from(_URL_PIECES), max_size=12).map("".join))
def test_request_parts_read_plain_urls_as_yarl_does(scheme: str, host: str, rest: str) -> None:
    """The pattern for canonical URLs and yarl agree wherever the pattern answers (elsewhere it is yarl)."""
    url = scheme + host + rest
    try:
        expected: object = request_parts_yarl(url)
    except Exception as exc:  # yarl's own errors too: the fetcher translates them all
        expected = type(exc)
    try:
        got: object = request_parts(url)
    except Exception as exc:
        got = type(exc)
    assert got == expected, url


@pytest.mark.parametrize("url", [
    "http://a.test/", "http://a.test", "https://a.test:443/x?y=1&z", "http://a.test:80/", "http://a.test:8080/p",
    "http://127.0.0.1:8771/index.html", "http://a.test/?", "http://a.test/a/../b", "http://a.test/%7e x",
    "http://a.test/\u00e9", "http://u:p@a.test/", "http://[::1]:81/", "http://A.test/", "http://a.test/#f",
])
def test_request_parts_on_urls_the_crawler_meets(url: str) -> None:
    assert request_parts(url) == request_parts_yarl(url)
