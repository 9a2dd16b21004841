"""Records the frontier hands out and takes back, and their compact LMDB encodings."""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from polecat.frontier import ovarint
from polecat.frontier.ovarint import LENGTH
from polecat.frontier.politeness import Attempt, HostState
from polecat.frontier.slices import PREFIX_LEN

# --- priority ------------------------------------------------------------------------------------

SEED_IMPORTANCE = 1.0
CASH_SHARE = 0.85
"""Fraction of a page's importance passed on to its outlinks (OPIC-style cash, split among them)."""
MIN_IMPORTANCE = 2.0**-60


def child_importance(parent: float, outlinks: int) -> float:
    """Importance a discovered URL inherits: the parent's cash split over its new outlinks."""
    return max(MIN_IMPORTANCE, parent * CASH_SHARE / max(1, outlinks))


def rank(importance: float) -> int:
    """Sortable 32-bit rank: lower rank pops first. Log scale keeps 60 halvings distinguishable."""
    r = int(-math.log2(max(importance, MIN_IMPORTANCE)) * 65536) + 2**31
    return min(max(r, 0), 2**32 - 1)


KEY_RANK_SHIFT = 6
"""Low bits of a :func:`rank` a ``queue`` key leaves out (polecat/frontier/keys.py rule 1): its grid is
1/1024 of a halving of importance."""
_KEY_RANK_ZERO = 2048
"""The key rank of importance 1 (:func:`key_rank`): importance up to 4 is on its grid."""


def key_rank(r: int) -> int:
    """The 16-bit rank of a ``queue`` key (schema 7, polecat/frontier/keys.py rule 1) of the :func:`rank`
    ``r``: its order, on a coarser grid; importance 4 and over all rank 0."""
    return min(max(((r - 2**31) >> KEY_RANK_SHIFT) + _KEY_RANK_ZERO, 0), 0xFFFF)


def full_rank(kr: int) -> int:
    """The :func:`rank` on the grid of the key rank ``kr`` (:func:`key_rank`)."""
    return ((kr - _KEY_RANK_ZERO) << KEY_RANK_SHIFT) + 2**31


# --- queue entries -------------------------------------------------------------------------------

KEY_RANK_DEPTH = struct.Struct(">HB")
"""The rank (:func:`key_rank`) and depth after a ``queue`` key's host number (polecat/frontier/keys.py
rule 1)."""
KEY_DEPTH = 0xFF
"""The deepest depth a ``queue`` key holds (polecat/frontier/keys.py rule 1); a value holds a deeper one."""
_Q_V3 = struct.Struct(">dHBB")
_Q_HTTP, _Q_HTTPS, _Q_ATTEMPTS, _Q_HOPS, _Q_IMPORTANCE, _Q_DEPTH = 1, 2, 4, 8, 16, 32
_HTTP = "http://"
_HTTP_LEN = len(_HTTP)
_ORIGIN_FLAGS = ((_Q_HTTP, _HTTP), (_Q_HTTPS, "https://"))
_U8 = struct.Struct(">B")
_F64 = struct.Struct(">d")
_U32 = struct.Struct(">I")


def _strip_origin(url: str, host: str) -> tuple[int, str]:
    """The flag of ``url``'s ``http://host`` or ``https://host`` origin and the rest of it (0 and the
    whole URL: another origin, userinfo)."""
    for flag, scheme in _ORIGIN_FLAGS:
        if url.startswith(scheme) and url.startswith(host, len(scheme)):
            return flag, url[len(scheme) + len(host):]
    return 0, url


def _own_importance(importance: float) -> bool:
    """Whether a ``queue`` value holds ``importance`` itself: the key's rank does not give it exactly."""
    return rank_importance(full_rank(key_rank(rank(importance)))) != importance


def rank_importance(r: int) -> float:
    """The importance whose :func:`rank` is ``r``, on the rank's grid (what a queue key says of it)."""
    return math.exp2(-(r - 2**31) / 65536)


@dataclass(frozen=True, slots=True)
class QueuedUrl:
    """A queued URL. Its ``queue`` row (schema 4) is the key of polecat/frontier/keys.py rule 1 and a
    value that holds only what the key does not say (:meth:`encode`)."""

    url: str
    depth: int
    importance: float
    attempts: int = 0
    hops: int = 0
    """Redirects followed to reach this URL (bounded by fetch.max_redirects)."""

    def encode(self, host: str) -> bytes:
        """The ``queue`` value of this URL queued for ``host``: a flags byte, the fields that are not
        their default and not in the key (attempts, hops: one byte each; the importance, a double,
        unless the key's rank gives it exactly; the depth, a varint, only past what the key's byte
        holds), then the URL without its ``http://`` or ``https://`` and ``host`` (which the key holds).
        No JSON: this is the row of every queued URL (issue 39)."""
        flags, url = _strip_origin(self.url, host)
        out = bytearray(1)
        if self.attempts:
            flags |= _Q_ATTEMPTS
            out += _U8.pack(min(self.attempts, 255))
        if self.hops:
            flags |= _Q_HOPS
            out += _U8.pack(min(self.hops, 255))
        if _own_importance(self.importance):
            flags |= _Q_IMPORTANCE
            out += _F64.pack(self.importance)
        if self.depth > KEY_DEPTH:
            flags |= _Q_DEPTH
            out += ovarint.encode(self.depth)
        out[0] = flags
        out += url.encode()
        return bytes(out)

    @staticmethod
    def encode_seeds(urls: Iterable[str], hosts: Iterable[str], importance: float) -> list[bytes]:
        """``QueuedUrl(url, 0, importance).encode(host)`` of each URL of ``urls`` and its host of ``hosts``
        (a batch of a seeds file: the importance's field made once)."""
        extra = _F64.pack(importance) if _own_importance(importance) else b""
        flag = _Q_IMPORTANCE if extra else 0
        heads = [bytes((origin | flag,)) + extra for origin in range(_Q_HTTPS + 1)]
        plain = heads[_Q_HTTP]

        def other(url: str, host: str) -> bytes:
            origin, rest = _strip_origin(url, host)
            return heads[origin] + rest.encode()

        # _strip_origin's first case inline, a call only for the others (issue 39: ~0.1 us a seed).
        return [plain + url[_HTTP_LEN + len(host):].encode()
                if url.startswith(host, _HTTP_LEN) and url.startswith(_HTTP) else other(url, host)
                for url, host in zip(urls, hosts, strict=True)]

    @classmethod
    def decode(cls, raw: bytes, key: bytes, host: str) -> QueuedUrl:
        """The URL of the ``queue`` row ``key``, ``raw``, queued for ``host`` (:meth:`encode`)."""
        r, depth = KEY_RANK_DEPTH.unpack_from(key, PREFIX_LEN + LENGTH[key[PREFIX_LEN]])
        flags, pos = raw[0], 1
        attempts = hops = 0
        if flags & _Q_ATTEMPTS:
            attempts, pos = raw[pos], pos + 1
        if flags & _Q_HOPS:
            hops, pos = raw[pos], pos + 1
        if flags & _Q_IMPORTANCE:
            importance = _F64.unpack_from(raw, pos)[0]
            pos += 8
        else:
            importance = rank_importance(full_rank(r))
        if flags & _Q_DEPTH:
            depth, pos = ovarint.decode_at(raw, pos)
        rest = raw[pos:].decode()
        if flags & _Q_HTTP:
            rest = "http://" + host + rest
        elif flags & _Q_HTTPS:
            rest = "https://" + host + rest
        return cls(rest, depth, importance, attempts, hops)

    @staticmethod
    def value_v7(raw: bytes, r: int, depth: int) -> bytes:
        """The schema-7 value of the schema-6 ``queue`` value ``raw`` whose key said rank ``r`` and
        ``depth``: with the importance and the depth that schema 7's key does not give (:func:`key_rank`'s
        coarser grid, :data:`KEY_DEPTH`) added, the depth a varint (schema 6: 4 bytes past 65,535); no host
        is needed (the URL's bytes are kept)."""
        flags = raw[0]
        pos = 1 + bool(flags & _Q_ATTEMPTS) + bool(flags & _Q_HOPS)
        own_end = rest = pos + 8 * bool(flags & _Q_IMPORTANCE)
        if flags & _Q_DEPTH:
            depth, rest = _U32.unpack_from(raw, own_end)[0], own_end + _U32.size
        elif depth <= KEY_DEPTH and (flags & _Q_IMPORTANCE or full_rank(key_rank(r)) == r):
            return raw  # the key says what schema 6's did
        extra = b""
        if not flags & _Q_IMPORTANCE and full_rank(key_rank(r)) != r:
            flags |= _Q_IMPORTANCE
            extra = _F64.pack(rank_importance(r))
        deep = b""
        if depth > KEY_DEPTH:
            flags |= _Q_DEPTH
            deep = ovarint.encode(depth)
        return bytes((flags,)) + raw[1:pos] + extra + raw[pos:own_end] + deep + raw[rest:]

    def encode_v3(self) -> bytes:
        """The ``queue`` value of schema 3 (0.3.0 and before), which slice bundles carry: importance,
        depth, attempts, hops, then the whole URL."""
        counts = (min(self.depth, 0xFFFF), min(self.attempts, 255), min(self.hops, 255))
        return _Q_V3.pack(self.importance, *counts) + self.url.encode()

    @classmethod
    def decode_v3(cls, raw: bytes | memoryview) -> QueuedUrl:
        """A ``queue`` value of schema 3 (:meth:`encode_v3`)."""
        importance, depth, attempts, hops = _Q_V3.unpack_from(raw)
        return cls(bytes(raw[_Q_V3.size :]).decode(), depth, importance, attempts, hops)


# --- hosts ---------------------------------------------------------------------------------------

_H_V4 = struct.Struct(">dddIQQ")
_H = struct.Struct(">dddIQQI")
_H7 = struct.Struct(">BdI")
"""A ``hosts`` value of schema 7: its tag byte (:data:`HOST_TAG` and the flags of the fields present),
next-allowed time, number; then the queued count (varint), the fields present, the address."""


SEED_BIT = 1 << 31
"""The bit of a schema-6 ``hosts`` value's number field that marks a seed's host (polecat/frontier/db.py
rule 18): host numbers stop below it (polecat/frontier/keys.py ``MAX_HOST_NUM``)."""

HOST_TAG = 0x80
"""The first byte of a schema-7 ``hosts`` value has this bit (polecat/frontier/db.py rule 20); one of schema
6 and before does not: it is the first of a next-allowed time, a double >= 0."""
_H_SEED, _H_RATE, _H_DELAY, _H_FAILURES, _H_FETCHED = 1, 2, 4, 8, 16
"""Flags of a schema-7 tag byte: a seed's host, then the fields that differ from a new record's and so
follow the queued count, in this order."""


def encode_host(s: HostState) -> bytes:
    """The ``hosts`` value of schema 7 (polecat/frontier/db.py rule 20): the tag, the record's next-allowed
    time and number, its queued count, the fields a new record does not have, then its address."""
    flags = HOST_TAG | _H_SEED if s.seed else HOST_TAG
    parts = [b"", _varint_bytes(s.queued)]  # the head, packed once the flags are known
    if s.rate_factor != 1.0:
        flags |= _H_RATE
        parts.append(_F64.pack(s.rate_factor))
    if s.crawl_delay != 0.0:
        flags |= _H_DELAY
        parts.append(_F64.pack(s.crawl_delay))
    if s.failures:
        flags |= _H_FAILURES
        parts.append(_varint_bytes(s.failures))
    if s.fetched:
        flags |= _H_FETCHED
        parts.append(_varint_bytes(s.fetched))
    parts[0] = _H7.pack(flags, s.next_allowed, s.num)
    parts.append(s.ip.encode())
    return b"".join(parts)


def encode_new_hosts(next_allowed: float, queued: Iterable[int], nums: Iterable[int]) -> list[bytes]:
    """``encode_host(HostState(next_allowed=..., queued=q, num=num, seed=True))`` of each ``q`` of
    ``queued`` and ``num`` of ``nums``, with no record built (seeds' hosts new to the table, filed cold:
    polecat/frontier/host_table.py rule 10)."""
    pack, tag = _H7.pack, HOST_TAG | _H_SEED
    return [pack(tag, next_allowed, num) + _varint_bytes(q) for q, num in zip(queued, nums, strict=True)]


def decode_host(raw: bytes | memoryview) -> HostState:
    """A ``hosts`` value of schema 7 (:func:`encode_host`), or of schema 6 or 5 (no tag: the fixed fields,
    the seed mark in the number's :data:`SEED_BIT`, then the address; schema 5 has no mark)."""
    if raw[0] & HOST_TAG:
        flags, na, num = _H7.unpack_from(raw)
        queued, pos = raw[_H7.size], _H7.size + 1
        if queued >= 0x80:  # most counts take one byte
            queued, pos = _varint(raw, _H7.size)
        rf, cd, fails, fetched = 1.0, 0.0, 0, 0
        if flags & _H_RATE:
            rf, pos = _F64.unpack_from(raw, pos)[0], pos + 8
        if flags & _H_DELAY:
            cd, pos = _F64.unpack_from(raw, pos)[0], pos + 8
        if flags & _H_FAILURES:
            fails, pos = _varint(raw, pos)
        if flags & _H_FETCHED:
            fetched, pos = _varint(raw, pos)
        return HostState(next_allowed=na, rate_factor=rf, crawl_delay=cd, failures=fails, queued=queued,
                         fetched=fetched, ip=bytes(raw[pos:]).decode(), num=num, seed=bool(flags & _H_SEED))
    na, rf, cd, fails, queued, fetched, num = _H.unpack_from(raw)
    return HostState(next_allowed=na, rate_factor=rf, crawl_delay=cd, failures=fails, queued=queued,
                     fetched=fetched, ip=bytes(raw[_H.size :]).decode(), num=num & ~SEED_BIT,
                     seed=num >= SEED_BIT)


def encode_host_v4(s: HostState) -> bytes:
    """The ``hosts`` value of schema 4 and before (0.3.0), which slice bundles carry: no number, and no
    seed mark (a bundle carries it as a ``seedhost`` row of ``ops``: polecat/frontier/handover_ranges.py)."""
    packed = _H_V4.pack(s.next_allowed, s.rate_factor, s.crawl_delay, s.failures, s.queued, s.fetched)
    return packed + s.ip.encode()


def decode_host_v4(raw: bytes | memoryview) -> HostState:
    """A ``hosts`` value of schema 4 and before (:func:`encode_host_v4`); its number is 0 (none)."""
    na, rf, cd, fails, queued, fetched = _H_V4.unpack_from(raw)
    return HostState(next_allowed=na, rate_factor=rf, crawl_delay=cd, failures=fails, queued=queued,
                     fetched=fetched, ip=bytes(raw[_H_V4.size :]).decode())


_RECORD_JSON = json.JSONEncoder(separators=(",", ":"), check_circular=False)
"""What ``json.dumps(..., separators=(",", ":"))`` writes, without building an encoder per record."""

# --- leases and results --------------------------------------------------------------------------

LeaseKind = Literal["page", "robots"]


@dataclass(frozen=True, slots=True)
class Lease:
    """Permission to make one request to ``host`` now. Hand it back with :meth:`Frontier.complete`."""

    host: str
    url: str
    kind: LeaseKind
    depth: int = 0
    importance: float = SEED_IMPORTANCE
    attempts: int = 0
    key: bytes = b""
    etag: str | None = None
    last_modified: str | None = None
    not_before: float = 0.0
    """The host's next-allowed time when leased (for the self-check of rule 2): the earliest its request
    may go (a lease taken ahead, polecat/frontier/leasing.py rule 12, is held until then)."""
    hops: int = 0

    @property
    def tls(self) -> bool:
        """Whether its request may open a TLS connection (an https URL): what the TLS connections' cap
        counts (polecat/fetch/pool.py rule 15, polecat/frontier/leasing.py rule 11)."""
        return self.url.startswith("https:")


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing is ready; ask again at ``until`` (or when a lease completes). None: only on completion."""

    until: float | None


@dataclass(frozen=True, slots=True)
class Refused:
    """The request may not be made at all (a robots.txt hop whose host stays busy, politeness rule 8)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing queued and nothing in flight: the crawl is complete."""


Outcome = Literal["fetched", "not_modified", "redirect", "skipped", "failed", "retry"]


@dataclass(frozen=True, slots=True)
class RobotsOutcome:
    """How a robots.txt fetch ended (after its redirects): the final response, or the failure."""

    status: int = 0
    body: bytes = b""
    retry_after: float | None = None
    error: BaseException | None = None
    """The network failure (DNS, connect, timeout, TLS) when there was no response."""


@dataclass(frozen=True, slots=True)
class Completion:
    """How a leased request ended, as the node reports it."""

    attempt: Attempt
    outcome: Outcome
    reason: str = ""
    """Short label: HTTP status, error kind, skip reason."""
    content_hash: bytes | None = None
    etag: str | None = None
    last_modified: str | None = None
    ip: str | None = None
    changed: bool = True
    detail: str = ""
    """What went wrong, for people (``dns: h.test: NXDOMAIN``); the reason a host is reported with
    when it is parked or given up."""
    park: str = ""
    """Non-empty: no request to this host can succeed in this run (e.g. its address is refused by the
    SSRF guard); the host is parked with this reason and its queue kept for a later run."""
    robots: RobotsOutcome | None = None
    """For a robots lease: what robots.txt answered. The frontier records it (policy and persistence)
    before it spaces the host's next request, so a new Crawl-delay applies at once."""


PAGE_OUTCOMES = frozenset({"fetched", "not_modified", "redirect"})
"""The outcomes of a finished URL with a record in its fetcher's page store."""


@dataclass(slots=True)
class UrlRecord:
    """What the frontier remembers of a finished URL: the outcome and what refresh needs."""

    url: str
    outcome: str
    reason: str = ""
    fetched_at: float = 0.0
    content_hash: str = ""
    etag: str | None = None
    last_modified: str | None = None
    fetches: int = 0
    changes: int = 0
    depth: int = 0
    importance: float = SEED_IMPORTANCE
    history: str = ""
    """The URL's change history (polecat/frontier/refresh.py ``History.encode()``, hex); "" before a visit."""
    due: float | None = None
    """When a refresh is due (refresh rules 5 and 6); None: not scheduled (never refreshed, not fetched,
    or queued for its refresh right now)."""

    def encode(self) -> bytes:
        """The ``urls`` value (schema 4): a format byte, a 16-bit mask of the fields that are not their
        default, then those fields in order: strings as a varint length and UTF-8, the content hash and
        the history as their bytes when they are lowercase hex (else as text; the history's runs of zero
        bytes as their length: its doubles are mostly zero), counts as varints, times
        and the importance as doubles, the outcome as one byte when it is a known one. No JSON: every
        finished URL has one (issue 39)."""
        out = bytearray(3)
        mask = 0
        code = _OUTCOME_CODES.get(self.outcome)
        if code is None:
            mask |= _R_OUTCOME_TEXT
            _put_text(out, self.outcome)
        else:
            out.append(code)
        _put_text(out, self.url)
        if self.reason:
            mask |= _R_REASON
            _put_text(out, self.reason)
        if self.fetched_at:
            mask |= _R_FETCHED_AT
            out += _F64.pack(self.fetched_at)
        mask |= _put_hex(out, self.content_hash, _R_HASH)
        if self.etag is not None:
            mask |= _R_ETAG
            _put_text(out, self.etag)
        if self.last_modified is not None:
            mask |= _R_LAST_MODIFIED
            _put_text(out, self.last_modified)
        for flag, count in ((_R_FETCHES, self.fetches), (_R_CHANGES, self.changes), (_R_DEPTH, self.depth)):
            if count:
                mask |= flag
                _put_varint(out, count)
        if self.importance != SEED_IMPORTANCE:
            mask |= _R_IMPORTANCE
            out += _F64.pack(self.importance)
        mask |= _put_hex(out, self.history, _R_HISTORY, zeros=True)
        if self.due is not None:
            mask |= _R_DUE
            out += _F64.pack(self.due)
        out[0] = _RECORD_FORMAT
        out[1:3] = _U16.pack(mask)
        return bytes(out)

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> UrlRecord:
        """A ``urls`` value: :meth:`encode`'s, or the JSON list of schema 3 and before (which slice
        bundles carry, :meth:`encode_v3`)."""
        raw = bytes(raw)
        if raw[0] != _RECORD_FORMAT:
            # Records written before refresh state existed have the first nine fields only.
            u, o, r, t, h, e, m, n, c, *refresh = json.loads(raw)
            return cls(u, o, r, t, h, e, m, n, c, *refresh)
        mask = _U16.unpack_from(raw, 1)[0]
        if mask & _R_OUTCOME_TEXT:
            outcome, pos = _text(raw, 3)
        else:
            outcome, pos = _OUTCOMES[raw[3]], 4
        url, pos = _text(raw, pos)
        rec = cls(url, outcome)
        if mask & _R_REASON:
            rec.reason, pos = _text(raw, pos)
        if mask & _R_FETCHED_AT:
            rec.fetched_at, pos = _F64.unpack_from(raw, pos)[0], pos + 8
        if mask & (_R_HASH | _R_HASH << 1):
            rec.content_hash, pos = _hex(raw, pos, mask & _R_HASH)
        if mask & _R_ETAG:
            rec.etag, pos = _text(raw, pos)
        if mask & _R_LAST_MODIFIED:
            rec.last_modified, pos = _text(raw, pos)
        if mask & _R_FETCHES:
            rec.fetches, pos = _varint(raw, pos)
        if mask & _R_CHANGES:
            rec.changes, pos = _varint(raw, pos)
        if mask & _R_DEPTH:
            rec.depth, pos = _varint(raw, pos)
        if mask & _R_IMPORTANCE:
            rec.importance, pos = _F64.unpack_from(raw, pos)[0], pos + 8
        if mask & (_R_HISTORY | _R_HISTORY << 1):
            rec.history, pos = _hex(raw, pos, mask & _R_HISTORY, zeros=True)
        if mask & _R_DUE:
            rec.due = _F64.unpack_from(raw, pos)[0]
        return rec

    def encode_v3(self) -> bytes:
        """The ``urls`` value of schema 3 (0.3.0 and before), which slice bundles carry: a JSON list."""
        return _RECORD_JSON.encode(
            [self.url, self.outcome, self.reason, self.fetched_at, self.content_hash, self.etag,
             self.last_modified, self.fetches, self.changes, self.depth, self.importance, self.history,
             self.due],
        ).encode()


_RECORD_FORMAT = 1
"""First byte of a schema-4 ``urls`` value; a JSON list (schema 3) starts with ``[``."""
_U16 = struct.Struct(">H")
_OUTCOMES = ("fetched", "not_modified", "redirect", "skipped", "failed", "retry")
_OUTCOME_CODES = {name: i for i, name in enumerate(_OUTCOMES)}
(_R_OUTCOME_TEXT, _R_REASON, _R_FETCHED_AT, _R_HASH, _R_HASH_TEXT, _R_ETAG, _R_LAST_MODIFIED, _R_FETCHES,
 _R_CHANGES, _R_DEPTH, _R_IMPORTANCE, _R_HISTORY, _R_HISTORY_TEXT, _R_DUE) = (1 << i for i in range(14))
"""The fields of a ``urls`` value that are present (:meth:`UrlRecord.encode`); a hex field's bit, or
the bit after it when it is kept as text."""


def _put_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]
"""The varint of each number that takes one byte, made once (a seeds batch's queued counts, most 1)."""


def _varint_bytes(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    _put_varint(out, n)
    return bytes(out)


def _varint(raw: bytes | memoryview, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = raw[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def _put_text(out: bytearray, text: str) -> None:
    data = text.encode()
    _put_varint(out, len(data))
    out += data


def _text(raw: bytes, pos: int) -> tuple[str, int]:
    n, pos = _varint(raw, pos)
    return raw[pos : pos + n].decode(), pos + n


def _put_hex(out: bytearray, text: str, flag: int, *, zeros: bool = False) -> int:
    """Write a hex field (as its bytes when it is lowercase hex of even length; ``zeros``: with its runs
    of zero bytes packed, :func:`_pack_zeros`); answers its mask bits."""
    if not text:
        return 0
    try:
        data = bytes.fromhex(text)
    except ValueError:
        data = b""
    if data.hex() != text:
        _put_text(out, text)
        return flag << 1
    if zeros:
        data = _pack_zeros(data)
    _put_varint(out, len(data))
    out += data
    return flag


def _hex(raw: bytes, pos: int, binary: int, *, zeros: bool = False) -> tuple[str, int]:
    if not binary:
        return _text(raw, pos)
    n, pos = _varint(raw, pos)
    data = raw[pos : pos + n]
    return (_unpack_zeros(data) if zeros else data).hex(), pos + n


_ZERO_RUNS = re.compile(rb"(\x00{3,})")


def _pack_zeros(data: bytes) -> bytes:
    """``data`` as pairs of a literal (varint length, bytes) and a run of zero bytes (varint length),
    the last literal alone."""
    out = bytearray()
    parts = _ZERO_RUNS.split(data)
    for i, part in enumerate(parts):
        _put_varint(out, len(part))
        if not i % 2:
            out += part
    return bytes(out)


def _unpack_zeros(packed: bytes) -> bytes:
    parts: list[bytes] = []
    pos, end, literal = 0, len(packed), True
    while pos < end:
        n = packed[pos]
        if n < 0x80:  # a history's runs are shorter than 128 bytes: one-byte lengths
            pos += 1
        else:
            n, pos = _varint(packed, pos)
        if literal:
            parts.append(packed[pos : pos + n])
            pos += n
        else:
            parts.append(bytes(n))
        literal = not literal
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class FrontierStats:
    hosts: int
    hosts_ready: int
    hosts_waiting: int
    hosts_parked: int
    queued: int
    in_flight: int
    accepted: int
    seen: int
    rejected: tuple[tuple[str, int], ...]
    done: tuple[tuple[str, int], ...]
    dropped_blocked: int
    hosts_backoff: int = 0
    """Waiting hosts whose last attempt failed (quarantine, robots.txt closed) rather than paced."""
    next_ready_at: float = 0.0
    """When the next waiting host may go (0.0: none waits)."""
    done_total: tuple[tuple[str, int], ...] = ()
    """Outcomes over the whole crawl (all runs on this data dir)."""


@dataclass(frozen=True, slots=True)
class AdoptReport:
    """What :meth:`Frontier.adopt` took over."""

    slices: int
    hosts: int
    queued: int
    """URLs queued here from the bundle."""
    duplicates: int
    """Queued URLs of the bundle this frontier had already seen (not queued twice)."""
    seen: int
    """Seen entries new to this frontier (the queued ones included)."""
    stored: int = 0
    """Finished URLs of the bundle whose exporter stored a page for them (:data:`PAGE_OUTCOMES`)."""


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL (robots.txt is per origin)."""
    return url[: url.index("/", url.index("//") + 2)] if url.count("/") >= 3 else url
