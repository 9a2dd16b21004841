"""Native band slices (polecat/cluster/_claims.c)."""

def band_slices(index: int, slices: int, /) -> tuple[int, int, int, int]:
    """The slice of each band key of fingerprint index ``index`` (its low 64 bits), as
    ``tuple(map(claims.band_slice, nearindex.band_keys(index)))`` with ``claims.SLICES`` = ``slices``."""
