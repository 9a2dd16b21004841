"""WARC header values computed without the standard library's slow paths equal what it computes."""

from __future__ import annotations

import base64
import http
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.store import warc
from polecat.store.base import FetchRecord


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
    assert warc._http_block(record, None).split(b"\r\n")[0] == b"HTTP/1.1 %d %s" % (status, reason.encode())
