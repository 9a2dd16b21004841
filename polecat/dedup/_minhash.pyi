"""Native kernel of :func:`polecat.dedup.minhash.fingerprint` (polecat/dedup/_minhash.c)."""

ONE_THRESHOLD: int
"""The kernel's copy of ``minhash._ONE_THRESHOLD`` (tested equal)."""

def fingerprint(text: str, /) -> tuple[int, bytes]:
    """``(index, verify)`` of ``minhash.python_fingerprint(text)``, computed in one pass."""

def lowered(text: str, /) -> bytes | None:
    """``text.lower().encode("utf-8", "surrogatepass")`` as :func:`fingerprint` computes it for a non-ASCII
    text, or None for a text it hands to ``text.lower()`` (one holding U+03A3)."""
