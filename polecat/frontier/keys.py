"""Key layout of the frontier's LMDB tables: every per-host and per-URL key starts with its slice.

Rules (DESIGN.md section 5; slices in polecat/frontier/slices.py):

1. ``hosts``: slice, host key. ``queue`` (schema 7): slice, the host's number (``HostState.num``, kept in
   its record, allocated by polecat/frontier/host_table.py rule 14), priority tail (rank 2 bytes, depth 1,
   FIFO seq), the number and the seq as order-preserving varints (polecat/frontier/ovarint.py), so a host's
   queue is one key range, ordered by priority, inside its slice's range, and a row does not repeat the
   host's name. The rank is :func:`~polecat.frontier.records.rank` on a grid of 1/1024 of a halving of
   importance (records.py ``key_rank``): URLs closer in importance than that, and depths past 255, are
   taken in FIFO order. Issue 39: at most 12 bytes at 100,000 hosts and 10M URLs queued (schema 5 and 6:
   18, fixed widths; before: 18 + the host's name). Its value leaves out what the key and the record say
   (the ``http(s)://host`` of the URL, the importance the rank gives, the depth:
   polecat/frontier/records.py ``QueuedUrl.encode``).
   Slice bundles carry the key of schema 4 (0.3.0's: slice, host key, NUL, rank 4, depth 2, seq 8):
   :func:`wire_queue_key` and :func:`parse_wire_queue_key` convert (polecat/frontier/handover_ranges.py).
2. ``seen`` and ``urls``: slice of the URL's host, then the URL's 16-byte fingerprint. The seen-set's
   Bloom filter holds these same 18-byte keys.
3. ``robots``: slice of the origin's host key, then the origin (``scheme://host[:port]``).
4. ``ops``: operator controls. One that names a single host key (``traps``: the host's trap counts,
   polecat/frontier/traps.py) is keyed by that host's slice and moves with it. A seed host's mark, a
   ``seedhost`` row here up to schema 5, is a bit of its record since schema 6 (polecat/frontier/db.py rule
   18) but for a seed host with no record here, which keeps the row (host_table.py rule 26); slice bundles
   carry every mark as that row (:data:`SEED_HOST`, 0.3.0's form). Host patterns (``block``,
   ``throttle``) can match hosts of many slices: they are keyed under :data:`GLOBAL`, a prefix past every
   slice, and every slice bundle carries them. A refetch request (``refetch``: a URL whose stored copy was
   lost, polecat/frontier/refetch.py) is keyed by its URL's host slice and the URL's fingerprint. In a slice
   the rows of one kind sit together (the kind leads the key after the slice), so a reader of some kinds reads
   their ranges only (:func:`ops_prefixes`).
5. ``meta`` and ``near`` (content fingerprints, not about a host) are not slice-keyed.
6. ``ready`` (the due index of hosts kept out of memory, polecat/frontier/host_table.py rule 7): the
   host's next-allowed time as a big-endian IEEE double (times are >= 0, so bytewise order is time
   order), then the host key. ``resident`` (rule 8 there): the host key. Neither is slice-keyed: a row
   of a released slice is found stale when read (its host has no record) and dropped then.
7. The refresh indexes (polecat/frontier/refresh_index.py): ``refresh``, one row per URL with a history,
   keyed by slice, host key, NUL, then the URL's fingerprint, so a host's rows are one range inside its
   slice's; ``due`` and ``fresh``: a time as in rule 6, then the URL key. The two time-keyed tables are
   not slice-keyed: a release deletes their rows through the ``refresh`` rows of its slices.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from itertools import count

from polecat.dedup.canon import url_fingerprint
from polecat.frontier import ovarint
from polecat.frontier.ovarint import LENGTH
from polecat.frontier.records import KEY_DEPTH, KEY_RANK_DEPTH, full_rank, key_rank, rank
from polecat.frontier.slices import PREFIX_LEN, SLICES, host_slice_prefix, slice_prefix
from polecat.hosts import host_key

GLOBAL = struct.pack(">H", 0xFFFF)
"""Prefix of the ops that belong to no single slice (rule 4)."""
assert SLICES < 0xFFFF

_WIRE_TAIL = struct.Struct(">IHQ")
"""The tail of a schema-4 (wire) queue key: rank, depth, seq in 8 bytes."""
MAX_HOST_NUM = 2**31 - 1
"""The last host number a queue key holds (rule 1): a schema-6 record's number field keeps its top bit for
the seed mark (polecat/frontier/records.py ``SEED_BIT``), and schema 7 reads those records as they are."""

_DUE = struct.Struct(">d")
FINGERPRINT_LEN = 16
"""Bytes of a URL fingerprint (rule 2)."""
HOST_OPS = frozenset({"seedhost", "traps", "requisites"})
"""Op kinds whose argument is one host key (rule 4)."""
SEED_HOST = "seedhost"
"""Op kind: a seed's host, in the crawl's scope: a row of schema 5 and before, of a seed host with no record
since, and of a slice bundle (rule 4)."""


def host_row(host: str) -> bytes:
    """Key of ``host`` in the ``hosts`` table."""
    return host_slice_prefix(host) + host.encode()


def host_rows(prefixes: Iterable[bytes], names: Iterable[bytes]) -> list[bytes]:
    """:func:`host_row` of each host, given its slice prefix and its encoded key (a batch, one pass)."""
    return [prefix + name for prefix, name in zip(prefixes, names, strict=True)]


def host_of_row(key: bytes) -> str:
    return key[PREFIX_LEN:].decode()


def ready_key(due: float, host: str) -> bytes:
    """Key of ``host`` in the ``ready`` index, due at ``due`` (rule 6)."""
    return _DUE.pack(due) + host.encode()


def ready_row(key: bytes) -> tuple[float, str]:
    """``(due, host)`` of a ``ready`` key."""
    return _DUE.unpack_from(key)[0], key[_DUE.size :].decode()


def refresh_prefix(host: str) -> bytes:
    """The start of every ``refresh`` key of ``host`` (rule 7)."""
    return host_row(host) + b"\x00"


def refresh_row(host: str, ukey: bytes) -> bytes:
    """Key of the ``refresh`` row of the URL ``ukey`` (its ``urls`` key) of ``host`` (rule 7)."""
    return ukey[:PREFIX_LEN] + host.encode() + b"\x00" + ukey[PREFIX_LEN:]


def url_key_of_refresh_row(key: bytes) -> bytes:
    """The ``urls`` key of a ``refresh`` row (rule 7)."""
    return key[:PREFIX_LEN] + key[-FINGERPRINT_LEN:]


def due_key(at: float, ukey: bytes) -> bytes:
    """Key of the URL ``ukey`` in the ``due`` index at ``at`` (rule 7)."""
    return _DUE.pack(at) + ukey


def fresh_key(boundary: float, ukey: bytes) -> bytes:
    """Key of the URL ``ukey`` in the ``fresh`` index at its boundary (rule 7)."""
    return _DUE.pack(boundary) + ukey


def queue_prefix(host: str, num: int) -> bytes:
    """The start of every ``queue`` key of ``host``, whose number is ``num`` (rule 1)."""
    return host_slice_prefix(host) + ovarint.encode(num)


def queue_prefix_of_row(row: bytes, num: int) -> bytes:
    """:func:`queue_prefix` of the host whose ``hosts`` key is ``row`` and number ``num``."""
    return row[:PREFIX_LEN] + ovarint.encode(num)


def queue_key(host: str, num: int, importance: float, depth: int, seq: int) -> bytes:
    """Key of a queued URL: host (its number ``num``), then priority (rank, then depth: shallower first),
    then FIFO seq (rule 1)."""
    return queue_key_at(queue_prefix(host, num), rank(importance), depth, seq)


def queue_key_num(key: bytes) -> int:
    """The host number of a ``queue`` key (rule 1)."""
    return ovarint.decode_at(key, PREFIX_LEN)[0]


def _tail_at(key: bytes) -> int:
    """Where the priority tail of the ``queue`` key ``key`` starts (rule 1)."""
    return PREFIX_LEN + LENGTH[key[PREFIX_LEN]]


def queue_key_priority(key: bytes) -> tuple[int, int, int]:
    """``(rank, depth, seq)`` of a ``queue`` key (rule 1), its rank on the grid of
    :func:`~polecat.frontier.records.rank`."""
    at = _tail_at(key)
    r, depth = KEY_RANK_DEPTH.unpack_from(key, at)
    return full_rank(r), depth, ovarint.decode_at(key, at + KEY_RANK_DEPTH.size)[0]


def queue_key_seq(key: bytes) -> int:
    """The FIFO seq of a ``queue`` key (rule 1): the frontier's ``qseq`` when the URL was queued."""
    return ovarint.decode_at(key, _tail_at(key) + KEY_RANK_DEPTH.size)[0]


def wire_queue_prefix(host: str) -> bytes:
    """The start of every schema-4 (wire) ``queue`` key of ``host`` (rule 1)."""
    return host_row(host) + b"\x00"


def wire_queue_key(key: bytes, host: str, depth: int) -> bytes:
    """The schema-4 (wire, 0.3.0) form of the ``queue`` key ``key`` of ``host``, of a URL at ``depth`` (the
    key's own depth stops at 255: rule 1)."""
    r, _, seq = queue_key_priority(key)
    return key[:PREFIX_LEN] + host.encode() + b"\x00" + _WIRE_TAIL.pack(r, min(depth, 0xFFFF), seq)


def parse_wire_queue_key(key: bytes) -> tuple[str, int, int, int]:
    """``(host, rank, depth, seq)`` of a schema-4 (wire) ``queue`` key (rule 1)."""
    r, depth, seq = _WIRE_TAIL.unpack_from(key, len(key) - _WIRE_TAIL.size)
    return bytes(key[PREFIX_LEN : -_WIRE_TAIL.size - 1]).decode(), r, depth, seq


def seed_queue_keys(rows: Iterable[bytes], nums: Iterable[int], r: int, seq: int) -> list[bytes]:
    """``queue_key_at(queue_prefix(host, num), r, 0, s)`` of each URL, given its host's ``hosts`` key of
    ``rows`` and number of ``nums``, ``s`` counting up from ``seq`` (a seeds batch's URLs filed cold,
    host_table.py rule 10: the tail's rank and depth packed once)."""
    tail, enc = KEY_RANK_DEPTH.pack(key_rank(r), 0), ovarint.encode
    return [row[:PREFIX_LEN] + enc(num) + tail + enc(s) for row, num, s in zip(rows, nums, count(seq))]


def queue_key_at(key: bytes, r: int, depth: int, seq: int) -> bytes:
    """The ``queue`` key of the host of ``key`` (a key of this schema, or its prefix), of rank ``r`` (on the
    grid of :func:`~polecat.frontier.records.rank`), ``depth`` and FIFO ``seq`` (an adopted URL joins this
    frontier's order)."""
    return (key[: _tail_at(key)] + KEY_RANK_DEPTH.pack(key_rank(r), min(depth, KEY_DEPTH))
            + ovarint.encode(seq))


PRIORITY_BANDS = (("seed", 0), ("high", 4), ("medium", 10))
"""Priority bands for reporting: ``(name, halvings of importance below 1)``; beyond the last: ``low``."""


def priority_band(key: bytes) -> str:
    """The priority band of a queued URL, from its ``queue`` key."""
    halvings = (queue_key_priority(key)[0] - 2**31) / 65536
    for name, limit in PRIORITY_BANDS:
        if halvings <= limit:
            return name
    return "low"


def url_key_at(key: bytes, url: str) -> bytes:
    """:func:`url_key` of ``url`` from another key of its host (its queue key): no host hashing."""
    return key[:PREFIX_LEN] + url_fingerprint(url)


def url_keys_at(rows: Iterable[bytes], urls: Iterable[str]) -> list[bytes]:
    """:func:`url_key` of each URL, given its host's ``hosts`` key (or any key of its slice: a batch)."""
    return [row[:PREFIX_LEN] + url_fingerprint(url) for row, url in zip(rows, urls, strict=True)]


def url_key(url: str, host: str | None = None) -> bytes:
    """Key of a canonical URL in ``seen`` and ``urls`` (``host``: its host key, when already known)."""
    return host_slice_prefix(host if host is not None else host_key(url)) + url_fingerprint(url)


def robots_key(origin: str) -> bytes:
    """Key of an origin's robots.txt answer."""
    return host_slice_prefix(host_key(origin)) + origin.encode()


def origin_of_robots_key(key: bytes) -> str:
    return key[PREFIX_LEN:].decode()


def op_key(kind: str, arg: str) -> bytes:
    """Key of an operator control (rule 4)."""
    prefix = host_slice_prefix(arg) if kind in HOST_OPS else GLOBAL
    return prefix + f"{kind}:{arg}".encode()


def seed_host_keys(prefixes: Iterable[bytes], names: Iterable[bytes]) -> list[bytes]:
    """:func:`op_key` ``(SEED_HOST, host)`` of each host, given its slice prefix and its encoded key (a
    batch, one pass)."""
    head = f"{SEED_HOST}:".encode()
    return [prefix + head + name for prefix, name in zip(prefixes, names, strict=True)]


def refetch_key(url: str) -> bytes:
    """Key of a request to fetch ``url`` again (rule 4)."""
    return host_slice_prefix(host_key(url)) + f"refetch:{url_fingerprint(url).hex()}".encode()


def ops_prefixes(kinds: Iterable[str]) -> list[bytes]:
    """Key prefixes of the ``ops`` rows under :data:`GLOBAL` and, in every slice, of the per-slice
    ``kinds`` (rule 4), in key order: a reader of these reads no row of another kind."""
    heads = [f"{kind}:".encode() for kind in sorted(kinds)]
    return [*(slice_prefix(s) + head for s in range(SLICES) for head in heads), GLOBAL]


def parse_op_key(key: bytes) -> tuple[str, str]:
    """``(kind, arg)`` of an ``ops`` key."""
    kind, _, arg = key[PREFIX_LEN:].decode().partition(":")
    return kind, arg
