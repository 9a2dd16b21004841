"""Native band slices and near book scans (polecat/cluster/_claims.c)."""

from collections.abc import Container
from typing import Any

def band_slices(index: int, slices: int, /) -> tuple[int, int, int, int]:
    """The slice of each band key of fingerprint index ``index`` (its low 64 bits), as
    ``tuple(map(claims.band_slice, nearindex.band_keys(index)))`` with ``claims.SLICES`` = ``slices``."""

def band_keys(index: int, /) -> tuple[bytes, bytes, bytes, bytes]:
    """The 4 band keys of fingerprint index ``index`` (its low 64 bits), as
    ``tuple(nearindex.band_keys(index))``."""

def closest(bands: dict[bytes, list[Any]], keys: tuple[bytes, ...], claim: Any,
            settling: Container[tuple[str, bytes]], max_distance: int, max_bins: int, verify_bytes: int,
            /) -> tuple[tuple[Any, tuple[int, int]] | None, tuple[Any, tuple[int, int]] | None]:
    """``claims._scan(bands, keys, claim, settling, max_distance)`` with ``minhash.VERIFY_MAX_DISTANCE`` =
    ``max_bins`` and ``minhash.VERIFY_BYTES`` = ``verify_bytes``; sketches must be bytes."""

def unsettled_in_bands(bands: dict[bytes, list[Any]], keys: tuple[bytes, ...],
                       settling: dict[tuple[str, bytes], tuple[Any, float]], claim: Any, max_distance: int,
                       max_bins: int, verify_bytes: int, /) -> list[tuple[tuple[str, bytes], Any]]:
    """``claims._unsettled(bands, keys, settling, claim, max_distance)`` with
    ``minhash.VERIFY_MAX_DISTANCE`` = ``max_bins`` and ``minhash.VERIFY_BYTES`` = ``verify_bytes``; sketches
    must be bytes."""
