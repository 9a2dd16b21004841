"""Banded index of page fingerprints: find a stored near-duplicate without a pairwise scan.

A :class:`~polecat.dedup.minhash.Fingerprint` has a 64-bit ``index`` part and a 128-byte ``verify``
sketch. Split ``index`` into 4 bands of 16 bits: two fingerprints at distance <= 3 differ in at most 3
bands, so at least one band is identical (pigeonhole): looking up the 4 exact band keys finds every
candidate, and each is checked by popcount. A lookup reads 4 duplicate lists of about ``pages / 65536``
entries each. A larger distance finds the pages within it that share a band (most of them).

64 bits alone are not evidence enough: at crawl scale each new page meets millions of stored ones, and
the per-pair chance that unrelated pages land within distance 3 (1e-5 for pages sharing half their
words as boilerplate) would lose pages. So a candidate within the distance counts only when its
verification sketch is within :data:`~polecat.dedup.minhash.VERIFY_MAX_DISTANCE` too; that takes the
per-pair false match rate below 1e-20 for such pages (benchmarks/README.md, "Dedup").

Layout, in one LMDB database the caller opens with ``dupsort=True``:

- band entries, 4 a page: key = band index (1 byte) + band value (2 bytes, big-endian); value = ``index``
  (8 bytes, big-endian). Short values keep the scanned duplicate lists small.
- one record a page: key = ``0xFF`` + ``index`` (8 bytes, big-endian); value = ``verify`` + caller
  payload. Pages with equal ``index`` share the key as duplicates.

:meth:`NearDupIndex.add` returns these entries as writes (``Put`` into the ``near`` table, each adding a
duplicate) for the caller to apply with the frontier's other writes.

LMDB limits the values of a dupsort database to its maximum key size (511 bytes by default), so payloads
are capped at :data:`MAX_PAYLOAD` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polecat.dedup.minhash import VERIFY_BYTES, VERIFY_MAX_DISTANCE, Fingerprint, verify_distance
from polecat.writes import Put

BANDS = 4
MAX_DISTANCE = BANDS - 1
"""Up to this distance ``find`` sees every stored page; beyond it, only those that share a band."""
MAX_CANDIDATE_DISTANCE = 8
"""Largest ``max_distance`` accepted. Past 3 bits a candidate must also share a band, which recovers most
of the near-duplicates a 3-bit rule misses (3 % of words changed: 94-95 % -> 99 % at 6 bits); the
verification sketch keeps precision, and each candidate costs one record read, so the bound stays small."""
MAX_PAYLOAD = 511 - VERIFY_BYTES
_RECORD = b"\xff"


@dataclass(frozen=True, slots=True)
class NearStats:
    lookups: int
    matches: int
    """Lookups that found a verified stored fingerprint (the near-duplicate collapse count)."""
    rejected: int
    """Stored pages within the index distance whose verification sketch was too far (false candidates)."""


def band_keys(h: int) -> list[bytes]:
    """The 4 band keys of fingerprint index ``h`` (layout in the module docstring)."""
    return [bytes((band, (h >> (16 * band + 8)) & 0xFF, (h >> (16 * band)) & 0xFF)) for band in range(BANDS)]


class NearDupIndex:
    """Fingerprint -> payload index over a dupsort LMDB database (layout in the module docstring)."""

    __slots__ = ("_db", "_lookups", "_matches", "_rejected")

    def __init__(self, db: Any) -> None:
        self._db = db
        self._lookups = self._matches = self._rejected = 0

    def find(self, txn: Any, fp: Fingerprint, max_distance: int = 3) -> bytes | None:
        """Payload of the closest stored page whose ``index`` is within ``max_distance`` bits of
        ``fp.index`` and whose ``verify`` is within ``VERIFY_MAX_DISTANCE`` bins, or None.

        Up to :data:`MAX_DISTANCE` every stored page within the distance is a candidate; beyond it, only
        those that also share one of the 4 bands. Closest means fewest differing verification bins (the
        finer estimate), then fewest index bits; ties go to the first stored. ``max_distance`` outside
        ``0..MAX_CANDIDATE_DISTANCE`` raises ValueError.
        """
        if not 0 <= max_distance <= MAX_CANDIDATE_DISTANCE:
            raise ValueError(f"max_distance must be 0..{MAX_CANDIDATE_DISTANCE}, got {max_distance}")
        self._lookups += 1
        h = fp.index
        best: bytes | None = None
        best_rank = (VERIFY_MAX_DISTANCE + 1, 0)
        with txn.cursor(db=self._db) as cursor:
            candidates: dict[int, int] = {}
            for key in band_keys(h):
                if cursor.set_key(key):
                    for value in cursor.iternext_dup():
                        other = int.from_bytes(value, "big")
                        if (distance := (h ^ other).bit_count()) <= max_distance:
                            candidates[other] = distance
            for other, distance in sorted(candidates.items(), key=lambda item: item[1]):
                cursor.set_key(_RECORD + other.to_bytes(8, "big"))
                for record in cursor.iternext_dup():
                    rank = (verify_distance(fp.verify, record[:VERIFY_BYTES]), distance)
                    if rank < best_rank:
                        best, best_rank = bytes(record[VERIFY_BYTES:]), rank
                    elif rank[0] > VERIFY_MAX_DISTANCE:
                        self._rejected += 1
        if best is not None:
            self._matches += 1
        return best

    def add(self, fp: Fingerprint, payload: bytes) -> list[Put]:
        """The writes that index ``payload`` under ``fp`` (ValueError if longer than :data:`MAX_PAYLOAD`):
        a decision, applied by the caller in its transaction (polecat/writes.py)."""
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"near-duplicate payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
        if len(fp.verify) != VERIFY_BYTES:
            raise ValueError(f"verification sketch must be {VERIFY_BYTES} bytes, got {len(fp.verify)}")
        index = fp.index.to_bytes(8, "big")
        out = [Put("near", key, index) for key in band_keys(fp.index)]
        out.append(Put("near", _RECORD + index, fp.verify + payload))
        return out

    def stats(self) -> NearStats:
        return NearStats(lookups=self._lookups, matches=self._matches, rejected=self._rejected)
