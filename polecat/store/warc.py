"""WARC/1.1 record encoding and decoding for the segment files.

Each stored record is one WARC/1.1 record (``response`` with the body, or ``revisit`` without), so
``zstd -dc segment.warc.zst`` is a WARC file that standard tools read.

Digests. ``WARC-Payload-Digest`` is ``sha256:`` + base32 (RFC 3548), which tools such as
``warcio check`` verify with hashlib; polecat's own address goes in
``WARC-Polecat-Content-Hash: <hash name>:<hex>``: ``sha256`` (the same digest, in hex) in stores made
now, ``blake2b-256`` in older ones (polecat/store/base.py). (``blake2b:`` would not do as the payload
digest: tools read that label as the 512-bit variant.)

Bodies are stored decoded. The HTTP header block therefore carries a ``Content-Length`` of the stored
body, and the received ``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length`` are kept
renamed as ``X-Archive-Orig-*`` so that replay tools do not try to decode the body again.

Revisit profiles: a revisit whose fetch received exactly the referred payload (an unchanged refetch, or
an exact copy of another URL's page: the same payload digest) uses the standard
``identical-payload-digest`` profile, so that tools that understand revisits (pywb, OpenWayback,
warcprox) replay the referred payload as this page's; a near-duplicate (the fetch received another body,
recorded as :data:`~polecat.store.base.OWN_HASH_HEADER`) uses :data:`NEAR_DUP_PROFILE`, which those tools
do not take for identical.
"""

from __future__ import annotations

import hashlib
import http
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import urlsplit

from polecat import native
from polecat.errors import CorruptRecord
from polecat.store.base import HASH_NAME, FetchRecord

IDENTICAL_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NEAR_DUP_PROFILE = "urn:polecat:revisit/near-duplicate"
_HTTP_TYPE = "application/http;msgtype=response"
_REQUEST_TYPE = "application/http;msgtype=request"
_RECORD_END = b"\r\n\r\n"
_RENAMED = frozenset({"content-encoding", "transfer-encoding", "content-length"})
_REASONS = {status.value: status.phrase for status in http.HTTPStatus}
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [a + b for a in _B32 for b in _B32]
"""Every 10-bit value as its two RFC 4648 base32 characters (the stdlib's b32encode is a Python loop)."""
_HTTP_URL = re.compile(r"https?://([^/?#\[\]\t\r\n\x80-\U0010ffff]*)(/[^?#\t\r\n]*)?(?:\?([^#\t\r\n]*))?"
                       r"(?:#[^\t\r\n]*)?")
"""An http(s) URL whose ``urlsplit`` is plain string splitting: an ASCII host without IPv6 brackets, no
tab, CR or LF (which urlsplit drops). Groups: netloc, path, query."""
_kernel = native.load("polecat.store._warc")
"""The native twins of python_record, python_payload_digest, new_record_id's formatting and
python_warc_date (polecat/store/_warc.c)."""


def payload_digest(body: bytes) -> str:
    """The WARC-Payload-Digest value of a body."""
    return payload_digest_from(hashlib.sha256(body).digest())


def payload_digest_from(sha256: bytes) -> str:
    """The WARC-Payload-Digest value for a body whose SHA-256 is ``sha256``: ``"sha256:"`` and
    ``base64.b32encode``'s output."""
    if _kernel is not None and type(sha256) is bytes:
        return _kernel.payload_digest(sha256)  # type: ignore[no-any-return]
    return python_payload_digest(sha256)


def python_payload_digest(sha256: bytes) -> str:
    """:func:`payload_digest_from` in Python, 10 bits at a time: the specification of the native kernel."""
    if len(sha256) != 32:
        raise ValueError(f"a SHA-256 digest has 32 bytes, not {len(sha256)}")
    # 256 bits padded to 260 (52 characters), then the padding RFC 4648 adds after 32 bytes.
    n = int.from_bytes(sha256, "big") << 4
    pairs = _B32_PAIRS
    return "sha256:" + "".join([pairs[(n >> shift) & 0x3FF] for shift in range(250, -1, -10)]) + "===="


@lru_cache(maxsize=8)
def warc_date(ts: float) -> str:
    """WARC 1.1 date with microseconds (the standard allows fractional seconds):
    ``datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")``, with the microseconds rounded
    as datetime rounds them (half to even, carrying into the second). Cached: a response and its request
    record carry the same date."""
    if _kernel is not None:
        date: str | None = _kernel.warc_date(ts)
        if date is not None:
            return date
    return python_warc_date(ts)


def python_warc_date(ts: float) -> str:
    """:func:`warc_date` in Python (each second formatted once): the specification of the native kernel,
    and the path for dates outside the years it formats."""
    frac, whole = math.modf(ts)
    micros = round(frac * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    return f"{_warc_second(int(whole))}.{micros:06d}Z"


@lru_cache(maxsize=8)
def _warc_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def clean_text(value: str) -> str:
    """A header value as written: a CR or LF inside a field would end the header early."""
    return value.replace("\r", " ").replace("\n", " ")


def _lines(lines: list[str]) -> str:
    """Header lines (``name: value``) joined by CRLF, each as :func:`clean_text` leaves it."""
    text = "\r\n".join(lines)
    # Counting the CRs and LFs of the whole text checks every field at once: only the joins' are there
    # unless a field brought its own.
    if text.count("\r") != len(lines) - 1 or text.count("\n") != len(lines) - 1:
        text = "\r\n".join(map(clean_text, lines))
    return text


def _encode(text: str) -> bytes:
    # Characters that are not text (lone surrogates) stay visible as escapes.
    return text.encode("utf-8", "backslashreplace")


def python_record(fields: list[str], content_type: str, first_line: str,
                  headers: Sequence[tuple[str, str]], length_line: int | None, payload: int,
                  rename: bool, end: bool, /) -> bytes:
    """A WARC record up to its payload: the version line, ``fields`` (``name: value`` lines), the
    Content-Type and the Content-Length of its block, then the block's HTTP head: ``first_line`` (status
    or request line), ``headers`` (with ``rename``: those in ``_RENAMED`` as ``X-Archive-Orig-*``), and a
    ``Content-Length: length_line`` line unless it is None. ``payload``: the bytes that follow the head
    in the block; ``end``: the record's end follows at once (no payload). Every line as
    :func:`clean_text` leaves it, UTF-8 with lone surrogates as escapes. The specification of the native
    kernel (polecat/store/_warc.c) and its fallback."""
    lines = [first_line]
    lines += [f"X-Archive-Orig-{name}: {value}" if rename and name.lower() in _RENAMED else f"{name}: {value}"
              for name, value in headers]
    if length_line is not None:
        lines.append(f"Content-Length: {length_line}")
    block = _encode(_lines(lines) + "\r\n\r\n")
    head = _head(fields, content_type, len(block) + payload)
    return head + block + _RECORD_END if end else head + block


def _head(fields: list[str], content_type: str, block_len: int) -> bytes:
    """A WARC record's version line and header block (``fields``: ``name: value`` lines), up to its
    block of ``block_len`` bytes."""
    return _encode(f"WARC/1.1\r\n{_lines(fields)}\r\nContent-Type: {content_type}\r\n"
                   f"Content-Length: {block_len}\r\n\r\n")


_Record = Callable[[list[str], str, str, Sequence[tuple[str, str]], int | None, int, bool, bool], bytes]
_native_record: _Record | None = None if _kernel is None else _kernel.record


def _record(fields: list[str], content_type: str, first_line: str, headers: Sequence[tuple[str, str]],
            length_line: int | None, payload: int, rename: bool, end: bool) -> bytes:
    """:func:`python_record`, by the native kernel when it is built. The kernel takes exact str pieces
    only: anything else (a str subclass, say) is a TypeError there and goes to the specification."""
    if _native_record is not None:
        try:
            return _native_record(fields, content_type, first_line, headers, length_line, payload, rename,
                                  end)
        except TypeError:
            pass
    return python_record(fields, content_type, first_line, headers, length_line, payload, rename, end)


def _status_line(record: FetchRecord) -> str:
    return f"HTTP/1.1 {record.status:d} {_REASONS.get(record.status, 'Unknown')}"


def new_record_id() -> str:
    """A fresh ``WARC-Record-ID`` value: a random (version 4) UUID URN, as ``uuid.uuid4()`` makes it
    without building the UUID object."""
    raw = os.urandom(16)
    if _kernel is not None:
        return _kernel.record_id(raw)  # type: ignore[no-any-return]
    return python_record_id(raw)


def python_record_id(random16: bytes) -> str:
    """The record id :func:`new_record_id` makes of 16 random bytes: the specification of the kernel."""
    raw = bytearray(random16)
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"


def _common(record: FetchRecord, kind: str, record_id: str | None, hash_name: str) -> list[str]:
    return [
        f"WARC-Type: {kind}",
        f"WARC-Record-ID: {record_id or new_record_id()}",
        f"WARC-Date: {warc_date(record.fetched_at)}",
        f"WARC-Target-URI: {record.url}",
        f"WARC-Polecat-Content-Hash: {hash_name}:{record.content_hash.hex()}",
    ]


def encode_response(record: FetchRecord, body: bytes, sha256: bytes, hash_name: str = HASH_NAME) -> bytes:
    """A WARC ``response`` record holding the status line, headers and decoded body.

    ``sha256`` is the body's SHA-256 (the caller keeps it for revisits of this body); ``hash_name`` names
    the hash of ``record.content_hash`` (the store's).
    """
    return b"".join(encode_response_parts(record, body, sha256, None, hash_name))


def encode_response_parts(record: FetchRecord, body: bytes, sha256: bytes, record_id: str | None = None,
                          hash_name: str = HASH_NAME) -> tuple[bytes, bytes, bytes]:
    """:func:`encode_response` as the pieces to write one after the other (the WARC and HTTP headers,
    the body, the record's end): the body is not copied (a page at the 10 MiB body cap would otherwise
    cost two more copies of itself)."""
    fields = _common(record, "response", record_id, hash_name)
    fields.append(f"WARC-Payload-Digest: {payload_digest_from(sha256)}")
    if record.truncated:
        fields.append("WARC-Truncated: length")
    size = len(body)
    return _record(fields, _HTTP_TYPE, _status_line(record), record.headers, size, size, True, False), body, \
        _RECORD_END


def encode_revisit(record: FetchRecord, refers_to: tuple[str, float] | None, digest: str | None,
                   record_id: str | None = None, hash_name: str = HASH_NAME) -> bytes:
    """A WARC ``revisit`` record: status line and headers, no body.

    ``refers_to`` is the original's (URL, fetch time) when known; ``digest`` its payload digest.
    """
    near = record.own_hash != record.content_hash
    fields = _common(record, "revisit", record_id, hash_name)
    fields.append(f"WARC-Profile: {NEAR_DUP_PROFILE if near else IDENTICAL_PROFILE}")
    target = refers_to[0] if refers_to else record.duplicate_of
    if target is not None:
        fields.append(f"WARC-Refers-To-Target-URI: {target}")
    if refers_to is not None:
        fields.append(f"WARC-Refers-To-Date: {warc_date(refers_to[1])}")
    if digest is not None:
        fields.append(f"WARC-Payload-Digest: {digest}")
    return _record(fields, _HTTP_TYPE, _status_line(record), record.headers, None, 0, True, True)


def request_target(url: str) -> tuple[str, str]:
    """The ``Host`` and request target of a GET of ``url``, as ``urllib.parse.urlsplit`` splits it."""
    m = _HTTP_URL.fullmatch(url)
    if m is not None:
        netloc, path, query = m.group(1), m.group(2) or "", m.group(3) or ""
    else:
        parts = urlsplit(url)
        netloc, path, query = parts.netloc, parts.path, parts.query
    return netloc, (path or "/") + (f"?{query}" if query else "")


def encode_request(record: FetchRecord, headers: tuple[tuple[str, str], ...], concurrent_to: str) -> bytes:
    """The WARC ``request`` record of the GET that fetched ``record``: the request line, ``Host`` and
    ``headers`` (those the fetcher sends on every request), linked to the response or revisit record
    ``concurrent_to`` by ``WARC-Concurrent-To``."""
    netloc, target = request_target(record.url)
    fields = ["WARC-Type: request", f"WARC-Record-ID: {new_record_id()}",
              f"WARC-Date: {warc_date(record.fetched_at)}", f"WARC-Target-URI: {record.url}",
              f"WARC-Concurrent-To: {concurrent_to}"]
    return _record(fields, _REQUEST_TYPE, f"GET {target} HTTP/1.1", (("Host", netloc), *headers), None, 0,
                   False, True)


def encode_warcinfo(info: tuple[tuple[str, str], ...], filename: str, ts: float) -> bytes:
    """A ``warcinfo`` record describing the file ``filename`` (``application/warc-fields`` lines)."""
    block = _encode(_lines([*map(": ".join, info)]) + "\r\n") if info else b""
    fields = ["WARC-Type: warcinfo", f"WARC-Record-ID: {new_record_id()}", f"WARC-Date: {warc_date(ts)}",
              f"WARC-Filename: {filename}"]
    return _head(fields, "application/warc-fields", len(block)) + block + _RECORD_END


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


def has_field(record: bytes, field: bytes) -> bool:
    """Whether the WARC head of ``record`` has a line starting with ``field``."""
    head = record[: record.find(b"\r\n\r\n")]
    return b"\r\n" + field in head


def http_headers(record: bytes) -> tuple[tuple[str, str], ...]:
    """The HTTP headers in the block of a response or revisit record."""
    start = record.find(b"\r\n\r\n") + 4
    lines = record[start : record.find(b"\r\n\r\n", start)].decode("latin-1").split("\r\n")[1:]
    return tuple((name.strip(), value.strip()) for name, _, value in (line.partition(":") for line in lines))


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
