"""WARC header values computed without the standard library's slow paths equal what it computes."""

from __future__ import annotations

import base64
import dataclasses
import http
import re
import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.store import warc
from polecat.store.base import OWN_HASH_HEADER, FetchRecord


@given(st.binary(min_size=32, max_size=32))
def test_payload_digest_is_rfc4648_base32_of_the_sha256(digest: bytes) -> None:
    assert warc.payload_digest_from(digest) == "sha256:" + base64.b32encode(digest).decode("ascii")


def test_payload_digest_refuses_a_digest_of_another_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        warc.payload_digest_from(bytes(20))


def test_record_ids_are_distinct_version_4_uuid_urns() -> None:
    ids = {warc.new_record_id() for _ in range(2000)}
    assert len(ids) == 2000
    for record_id in list(ids)[:200]:
        m = re.fullmatch(r"<urn:uuid:([0-9a-f-]{36})>", record_id)
        assert m is not None
        parsed = uuid.UUID(m.group(1))
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == m.group(1)


@given(st.integers(min_value=0, max_value=999))
def test_status_line_reason_is_the_http_phrase_or_unknown(status: int) -> None:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    record = FetchRecord("http://a.test/", 0.0, status, (), bytes(32), 0)
    assert _http_block(record, None).split(b"\r\n")[0] == b"HTTP/1.1 %d %s" % (status, reason.encode())


# Times around now, whole seconds, and halves of a microsecond (where rounding could go either way).
_TIMES = (st.floats(min_value=0, max_value=2**34, allow_nan=False)
          | st.integers(0, 2**34).map(float)
          | st.tuples(st.integers(0, 2**34), st.sampled_from([0.5e-6, 0.9999995, 0.4999995, 1.5e-6]))
          .map(sum))


@given(_TIMES)
def test_warc_date_is_datetimes_strftime(ts: float) -> None:
    assert warc.warc_date.__wrapped__(ts) == datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_URL_CHARS = st.sampled_from(["a", "/", "?", "#", ":", "@", "[", "]", "%", " ", "\t", "\r", "\n", "\x00", "é",
                              "\u2100", "=", "&", "."])
_PIECES = st.lists(_URL_CHARS, max_size=8).map("".join)
_URLS = (st.tuples(st.sampled_from(["http://", "https://", "HTTP://", "http:", "ftp://", ""]),
                   st.lists(_URL_CHARS, max_size=20).map("".join)).map("".join)
         | st.tuples(st.sampled_from(["http://", "https://"]), _PIECES, st.sampled_from(["", "/", "/p"]),
                     _PIECES, st.sampled_from(["", "?", "?q=1&r", "#", "#f?x"]), _PIECES).map("".join)
         | st.text(max_size=30))


@given(_URLS)
def test_request_target_splits_as_urlsplit_does(url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError:  # an IPv6 host without its brackets, a host that NFKC breaks up
        with pytest.raises(ValueError):
            warc.request_target(url)
        return
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    assert warc.request_target(url) == (parts.netloc, target)


def _http_block(record: FetchRecord, body_len: int | None) -> bytes:
    """The HTTP head of the response record of ``record`` (the block up to the body), as stored."""
    head = warc.encode_revisit(record, None, None) if body_len is None else \
        warc.encode_response_parts(record, bytes(body_len), bytes(32))[0]
    block = head[head.index(b"\r\n\r\n") + 4 :]
    return block[:-4] if body_len is None else block  # a revisit ends with the record's end


def _clean(value: str) -> bytes:
    """The specification of a header value: CR and LF become spaces, lone surrogates stay as escapes."""
    return warc.clean_text(value).encode("utf-8", "backslashreplace")


def _field(name: str, value: str) -> bytes:
    return _clean(name) + b": " + _clean(value)


@given(st.lists(st.tuples(st.text(max_size=12), st.text(max_size=20)), max_size=5),
       st.text(max_size=30).map(lambda t: "http://h.test/" + t), st.integers(0, 10**6))
def test_header_blocks_clean_each_field_alone(headers: list[tuple[str, str]], url: str,
                                              body_len: int) -> None:
    record = FetchRecord(url, 0.0, 200, tuple(headers), bytes(32), 0)
    kept_as = {"content-length", "content-encoding", "transfer-encoding"}
    renamed = [("X-Archive-Orig-" + n if n.lower() in kept_as else n, v) for n, v in headers]
    lines = [b"HTTP/1.1 200 OK", *(_field(n, v) for n, v in renamed), b"Content-Length: %d" % body_len]
    assert _http_block(record, body_len) == b"\r\n".join(lines) + b"\r\n\r\n"

    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [b"GET " + _clean(target) + b" HTTP/1.1", _field("Host", parts.netloc),
             *(_field(n, v) for n, v in headers)]
    request = warc.encode_request(record, tuple(headers), "<urn:x>")
    assert request.endswith(b"\r\n\r\n" + b"\r\n".join(lines) + b"\r\n\r\n\r\n\r\n")
    assert _field("WARC-Target-URI", url) in request.split(b"\r\n")

    head = warc.encode_revisit(record, (url, 0.0), None, "<urn:x>").split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert head[4:7] == [_field("WARC-Target-URI", url),
                         b"WARC-Polecat-Content-Hash: sha256:" + b"00" * 32,
                         b"WARC-Profile: " + warc.IDENTICAL_PROFILE.encode()]
    assert _field("WARC-Refers-To-Target-URI", url) in head


def test_an_exact_copy_is_an_identical_payload_revisit_and_a_near_duplicate_is_not() -> None:
    # An exact copy of another URL's page (same payload digest) replays that payload: the standard profile.
    # A near-duplicate received another body (its own hash recorded): never the identical profile, also
    # when it near-duplicates its own previous fetch.
    original = bytes(range(32))
    copy = FetchRecord("http://b.test/copy", 0.0, 200, (), original, 10, duplicate_of="http://a.test/")
    near = FetchRecord("http://b.test/near", 0.0, 200, ((OWN_HASH_HEADER, "ab" * 32),), original, 10,
                       duplicate_of="http://a.test/")
    near_self = dataclasses.replace(near, url="http://a.test/", duplicate_of="http://a.test/")

    def profile(record: FetchRecord) -> bytes:
        head = warc.encode_revisit(record, ("http://a.test/", 0.0), None, "<urn:x>").split(b"\r\n\r\n")[0]
        return next(line for line in head.split(b"\r\n") if line.startswith(b"WARC-Profile: "))

    assert profile(copy) == b"WARC-Profile: " + warc.IDENTICAL_PROFILE.encode()
    assert profile(near) == profile(near_self) == b"WARC-Profile: " + warc.NEAR_DUP_PROFILE.encode()
