"""Native kernel of :func:`polecat.dedup.minhash.fingerprint` (polecat/dedup/_minhash.c)."""

ONE_THRESHOLD: int
"""The kernel's copy of ``minhash._ONE_THRESHOLD`` (tested equal)."""

def fingerprint(text: str, /) -> tuple[int, bytes]:
    """``(index, verify)`` of ``minhash.python_fingerprint(text)``, computed in one pass."""
