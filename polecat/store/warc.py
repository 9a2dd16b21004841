"""WARC/1.1 record encoding and decoding for the segment files.

Each stored record is one WARC/1.1 record (``response`` with the body, or ``revisit`` without), so
``zstd -dc segment.warc.zst`` is a WARC file that standard tools read.

Digests. ``WARC-Payload-Digest`` is ``sha256:`` + base32 (RFC 3548), which tools such as
``warcio check`` verify with hashlib; polecat's own address, BLAKE2b-256, goes in
``WARC-Polecat-Content-Hash: blake2b-256:<hex>``. (``blake2b:`` would not do as the payload digest:
tools read that label as the 512-bit variant.)

Bodies are stored decoded. The HTTP header block therefore carries a ``Content-Length`` of the stored
body, and the received ``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length`` are kept
renamed as ``X-Archive-Orig-*`` so that replay tools do not try to decode the body again.

Revisit profiles: an unchanged refetch (``duplicate_of`` absent or the same URL) uses the standard
``identical-payload-digest`` profile; a near-duplicate of another URL uses :data:`NEAR_DUP_PROFILE`.
"""

from __future__ import annotations

import hashlib
import http
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import urlsplit

from polecat.errors import CorruptRecord
from polecat.store.base import HASH_NAME, FetchRecord

IDENTICAL_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NEAR_DUP_PROFILE = "urn:polecat:revisit/near-duplicate"
_HTTP_TYPE = b"application/http;msgtype=response"
_REQUEST_TYPE = b"application/http;msgtype=request"
_RENAMED = frozenset({"content-encoding", "transfer-encoding", "content-length"})
_REASONS = {status.value: status.phrase.encode("ascii") for status in http.HTTPStatus}
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [a + b for a in _B32 for b in _B32]
"""Every 10-bit value as its two RFC 4648 base32 characters (the stdlib's b32encode is a Python loop)."""


def payload_digest(body: bytes) -> str:
    """The WARC-Payload-Digest value of a body."""
    return payload_digest_from(hashlib.sha256(body).digest())


def payload_digest_from(sha256: bytes) -> str:
    """The WARC-Payload-Digest value for a body whose SHA-256 is ``sha256`` (``base64.b32encode``'s
    output, computed 10 bits at a time)."""
    if len(sha256) != 32:
        raise ValueError(f"a SHA-256 digest has 32 bytes, not {len(sha256)}")
    # 256 bits padded to 260 (52 characters), then the padding RFC 4648 adds after 32 bytes.
    n = int.from_bytes(sha256, "big") << 4
    pairs = _B32_PAIRS
    return "sha256:" + "".join([pairs[(n >> shift) & 0x3FF] for shift in range(250, -1, -10)]) + "===="


@lru_cache(maxsize=8)
def warc_date(ts: float) -> str:
    """WARC 1.1 date with microseconds (the standard allows fractional seconds). Cached: a response and
    its request record carry the same date."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_warc_date(value: str) -> float:
    """Inverse of :func:`warc_date`; also accepts whole seconds."""
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in value else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.strptime(value, fmt).replace(tzinfo=UTC).timestamp()


def clean_text(value: str) -> str:
    """A header value as written: a CR or LF inside a field would end the header early."""
    return value.replace("\r", " ").replace("\n", " ")


def _clean(value: str) -> bytes:
    # Characters that are not text (lone surrogates) stay visible as escapes.
    return clean_text(value).encode("utf-8", "backslashreplace")


def _http_block(record: FetchRecord, body_len: int | None) -> bytes:
    lines = [b"HTTP/1.1 %d %s" % (record.status, _REASONS.get(record.status, b"Unknown"))]
    for name, value in record.headers:
        if name.lower() in _RENAMED:
            name = "X-Archive-Orig-" + name
        lines.append(_clean(name) + b": " + _clean(value))
    if body_len is not None:
        lines.append(b"Content-Length: %d" % body_len)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _record(fields: list[tuple[str, str]], block: bytes, content_type: bytes = _HTTP_TYPE) -> bytes:
    return b"".join(_record_parts(fields, block, content_type=content_type))


def _record_parts(fields: list[tuple[str, str]], *block: bytes,
                  content_type: bytes = _HTTP_TYPE) -> list[bytes]:
    """A WARC record whose block is the concatenation of ``block``, as pieces."""
    head = [b"WARC/1.1"]
    head.extend(name.encode("ascii") + b": " + _clean(value) for name, value in fields)
    head.append(b"Content-Type: " + content_type)
    head.append(b"Content-Length: %d" % sum(map(len, block)))
    return [b"\r\n".join(head) + b"\r\n\r\n", *block, b"\r\n\r\n"]


def new_record_id() -> str:
    """A fresh ``WARC-Record-ID`` value: a random (version 4) UUID URN, as ``uuid.uuid4()`` makes it
    without building the UUID object."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"


def _common(record: FetchRecord, kind: str, record_id: str | None = None) -> list[tuple[str, str]]:
    return [
        ("WARC-Type", kind),
        ("WARC-Record-ID", record_id or new_record_id()),
        ("WARC-Date", warc_date(record.fetched_at)),
        ("WARC-Target-URI", record.url),
        ("WARC-Polecat-Content-Hash", f"{HASH_NAME}:{record.content_hash.hex()}"),
    ]


def encode_response(record: FetchRecord, body: bytes, sha256: bytes) -> bytes:
    """A WARC ``response`` record holding the status line, headers and decoded body.

    ``sha256`` is the body's SHA-256 (the caller keeps it for revisits of this body).
    """
    return b"".join(encode_response_parts(record, body, sha256))


def encode_response_parts(record: FetchRecord, body: bytes, sha256: bytes,
                          record_id: str | None = None) -> list[bytes]:
    """:func:`encode_response` as the pieces to write one after the other: the body is not copied (a
    page at the 10 MiB body cap would otherwise cost two more copies of itself)."""
    fields = _common(record, "response", record_id)
    fields.append(("WARC-Payload-Digest", payload_digest_from(sha256)))
    if record.truncated:
        fields.append(("WARC-Truncated", "length"))
    return _record_parts(fields, _http_block(record, len(body)), body)


def encode_revisit(record: FetchRecord, refers_to: tuple[str, float] | None, digest: str | None,
                   record_id: str | None = None) -> bytes:
    """A WARC ``revisit`` record: status line and headers, no body.

    ``refers_to`` is the original's (URL, fetch time) when known; ``digest`` its payload digest.
    """
    near = record.duplicate_of is not None and record.duplicate_of != record.url
    fields = _common(record, "revisit", record_id)
    fields.append(("WARC-Profile", NEAR_DUP_PROFILE if near else IDENTICAL_PROFILE))
    target = refers_to[0] if refers_to else record.duplicate_of
    if target is not None:
        fields.append(("WARC-Refers-To-Target-URI", target))
    if refers_to is not None:
        fields.append(("WARC-Refers-To-Date", warc_date(refers_to[1])))
    if digest is not None:
        fields.append(("WARC-Payload-Digest", digest))
    return _record(fields, _http_block(record, None))


def encode_request(record: FetchRecord, headers: tuple[tuple[str, str], ...], concurrent_to: str) -> bytes:
    """The WARC ``request`` record of the GET that fetched ``record``: the request line, ``Host`` and
    ``headers`` (those the fetcher sends on every request), linked to the response or revisit record
    ``concurrent_to`` by ``WARC-Concurrent-To``."""
    parts = urlsplit(record.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [b"GET " + _clean(target) + b" HTTP/1.1", b"Host: " + _clean(parts.netloc)]
    lines.extend(_clean(name) + b": " + _clean(value) for name, value in headers)
    fields = [("WARC-Type", "request"), ("WARC-Record-ID", new_record_id()),
              ("WARC-Date", warc_date(record.fetched_at)), ("WARC-Target-URI", record.url),
              ("WARC-Concurrent-To", concurrent_to)]
    return _record(fields, b"\r\n".join(lines) + b"\r\n\r\n", _REQUEST_TYPE)


def encode_warcinfo(info: tuple[tuple[str, str], ...], filename: str, ts: float) -> bytes:
    """A ``warcinfo`` record describing the file ``filename`` (``application/warc-fields`` lines)."""
    block = b"".join(_clean(name) + b": " + _clean(value) + b"\r\n" for name, value in info)
    fields = [("WARC-Type", "warcinfo"), ("WARC-Record-ID", new_record_id()), ("WARC-Date", warc_date(ts)),
              ("WARC-Filename", filename)]
    return _record(fields, block, b"application/warc-fields")


def split_records(data: bytes) -> list[bytes]:
    """The WARC records concatenated in ``data`` (a stored frame holds the response or revisit, after
    the segment's ``warcinfo`` when it is the first, and the ``request`` record when kept)."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        head = data[pos:end] if end >= 0 else b""
        length = next((line[15:].strip() for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), b"")
        if end < 0 or not length.isdigit():
            raise CorruptRecord("WARC record without a valid Content-Length")
        stop = end + 4 + int(length) + 4
        out.append(data[pos:stop])
        pos = stop
    return out


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """What the store needs back from a WARC record."""

    fields: dict[str, str]
    """WARC header fields, names lower-cased."""
    status: int
    payload: bytes | None
    """The HTTP body of a response record; None for a revisit."""

    @property
    def kind(self) -> str:
        return self.fields.get("warc-type", "")


def decode(data: bytes) -> DecodedRecord:
    """Parse the last WARC record of a stored frame (the response or revisit; see :func:`split_records`)
    as written by this module; raise CorruptRecord when it is not one."""
    if not data.startswith(b"WARC/1.1\r\n"):
        raise CorruptRecord("not a WARC/1.1 record")
    records = split_records(data)
    return _decode_one(records[-1] if records else data)


def _decode_one(data: bytes) -> DecodedRecord:
    end = data.find(b"\r\n\r\n")
    if not data.startswith(b"WARC/1.1\r\n") or end < 0:
        raise CorruptRecord("not a WARC/1.1 record")
    fields: dict[str, str] = {}
    for line in data[10:end].split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            raise CorruptRecord(f"bad WARC header line {line[:80]!r}")
        fields[name.strip().lower().decode("ascii", "replace")] = value.strip().decode("utf-8", "replace")
    try:
        length = int(fields["content-length"])
    except (KeyError, ValueError) as exc:
        raise CorruptRecord("WARC record without a valid Content-Length") from exc
    block = data[end + 4 : end + 4 + length]
    if len(block) != length or data[end + 4 + length :] != b"\r\n\r\n":
        raise CorruptRecord("WARC record block is short or not terminated")
    head_end = block.find(b"\r\n\r\n")
    status_line = block[: block.find(b"\r\n")] if head_end >= 0 else b""
    parts = status_line.split(b" ", 2)
    if head_end < 0 or len(parts) < 2 or not parts[1].isdigit():
        raise CorruptRecord("WARC record without an HTTP status line")
    payload = block[head_end + 4 :] if fields.get("warc-type") == "response" else None
    return DecodedRecord(fields=fields, status=int(parts[1]), payload=payload)
