"""Banded index of 64-bit page fingerprints: find a stored one within a small Hamming distance.

Split a fingerprint into 4 bands of 16 bits. Two fingerprints at distance <= 3 differ in at most 3
bands, so at least one band is identical (pigeonhole): looking up the 4 exact band keys finds every
candidate, and each candidate is verified by popcount. No pairwise scan; a lookup reads 4 duplicate
lists of about ``pages / 65536`` entries each.

Layout, in an LMDB database the caller opens with ``dupsort=True``: key = band index (1 byte) + band
value (2 bytes, big-endian); value = full fingerprint (8 bytes, big-endian) + caller payload. LMDB limits
the values of a dupsort database to its maximum key size (511 bytes by default), so payloads are capped
at :data:`MAX_PAYLOAD` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BANDS = 4
MAX_DISTANCE = BANDS - 1
"""Beyond this distance two fingerprints may share no band, so ``find`` could miss them."""
MAX_PAYLOAD = 511 - 8


@dataclass(frozen=True, slots=True)
class NearStats:
    lookups: int
    matches: int
    """Lookups that found a stored fingerprint within the distance (the near-duplicate collapse count)."""


def _band_keys(h: int) -> list[bytes]:
    return [bytes((band, (h >> (16 * band + 8)) & 0xFF, (h >> (16 * band)) & 0xFF)) for band in range(BANDS)]


class NearDupIndex:
    """Fingerprint -> payload index over a dupsort LMDB database (layout in the module docstring)."""

    __slots__ = ("_db", "_lookups", "_matches")

    def __init__(self, db: Any) -> None:
        self._db = db
        self._lookups = self._matches = 0

    def find(self, txn: Any, h: int, max_distance: int = 3) -> tuple[int, bytes] | None:
        """The closest stored ``(fingerprint, payload)`` within ``max_distance`` of ``h``, or None.

        Ties go to the first found. ``max_distance`` above :data:`MAX_DISTANCE` raises ValueError.
        """
        if not 0 <= max_distance <= MAX_DISTANCE:
            raise ValueError(f"max_distance must be 0..{MAX_DISTANCE} with {BANDS} bands, got {max_distance}")
        self._lookups += 1
        best: tuple[int, bytes] | None = None
        best_distance = max_distance + 1
        with txn.cursor(db=self._db) as cursor:
            for key in _band_keys(h):
                if not cursor.set_key(key):
                    continue
                for value in cursor.iternext_dup():
                    other = int.from_bytes(value[:8], "big")
                    distance = (h ^ other).bit_count()
                    if distance < best_distance:
                        best, best_distance = (other, bytes(value[8:])), distance
                        if distance == 0:
                            self._matches += 1
                            return best
        if best is not None:
            self._matches += 1
        return best

    def add(self, txn: Any, h: int, payload: bytes) -> None:
        """Index ``payload`` under fingerprint ``h`` (ValueError if longer than :data:`MAX_PAYLOAD`)."""
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"near-duplicate payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
        value = h.to_bytes(8, "big") + payload
        for key in _band_keys(h):
            txn.put(key, value, db=self._db, dupdata=True)

    def stats(self) -> NearStats:
        return NearStats(lookups=self._lookups, matches=self._matches)
