"""Slices: the unit in which per-host state is owned, stored and handed over.

Rules (DESIGN.md section 5):

1. A host key (``host[:port]``, as :func:`polecat.hosts.host_key` gives it) belongs to exactly one of
   ``SLICES`` slices: ``xxh3_64(host key) mod SLICES``. xxh3's output is fixed by its specification, so the
   mapping is the same on every machine, Python version and run.
2. ``SLICES`` never changes for a data dir: it is recorded in the frontier's meta at creation and checked
   at every open, so a membership change moves whole slices and never re-hashes a URL.
3. Every frontier table that holds per-host or per-URL state is keyed slice-first (:func:`slice_prefix`,
   two big-endian bytes), so one slice is one contiguous key range in each table.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Collection, Iterable

import xxhash

SLICES = 4096
"""Number of slices (S). Fixed for a data dir; recorded in the frontier's meta as ``slices``."""

_PREFIX = struct.Struct(">H")
PREFIX_LEN = _PREFIX.size


def slice_of(host_key: str) -> int:
    """The slice of a host key, per rule 1."""
    return xxhash.xxh3_64_intdigest(host_key.encode()) % SLICES


def prefixes_slices(prefixes: Collection[bytes]) -> tuple[int, ...] | None:
    """:func:`prefix_slice` of each key prefix of ``prefixes``, in one unpack (a commit's marks); None if
    one is not :data:`PREFIX_LEN` bytes (a key shorter than a prefix)."""
    joined = b"".join(prefixes)
    if len(joined) != PREFIX_LEN * len(prefixes):
        return None
    return struct.unpack(f">{len(prefixes)}H", joined)


def slice_prefix(slice_id: int) -> bytes:
    """The key prefix of ``slice_id`` in every slice-keyed table (rule 3)."""
    return _PREFIX.pack(slice_id)


def prefix_slice(key: bytes) -> int:
    """The slice a slice-keyed table key belongs to."""
    return int(_PREFIX.unpack_from(key)[0])


@functools.lru_cache(maxsize=1 << 16)
def host_slice_prefix(host_key: str) -> bytes:
    """``slice_prefix(slice_of(host_key))``: the start of every key about ``host_key``. Memoized: a host's
    keys are made many times per request (queue, host record, URL records), its hash once while it is
    among the 65,536 hosts used last."""
    return _PREFIX.pack(slice_of(host_key))


_PREFIXES = [_PREFIX.pack(s) for s in range(SLICES)]


def slice_prefixes(names: Iterable[bytes]) -> list[bytes]:
    """:func:`host_slice_prefix` of each encoded host key of ``names``, in one pass (a seeds batch: each
    host new, so the memo would only miss)."""
    digest, prefixes = xxhash.xxh3_64_intdigest, _PREFIXES
    return [prefixes[digest(name) % SLICES] for name in names]


def check_slices(slices: Iterable[int]) -> frozenset[int]:
    """``slices`` as a set, or ValueError naming the first one out of range."""
    out = frozenset(slices)
    for s in out:
        if not 0 <= s < SLICES:
            raise ValueError(f"slice {s} out of range 0..{SLICES - 1}")
    return out
