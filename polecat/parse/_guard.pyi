"""Native kernel of rules 2 and 3 of :mod:`polecat.parse.guard` (polecat/parse/_guard.c)."""

FLAT: frozenset[str]
"""The kernel's copy of ``guard._FLAT`` (tested equal)."""
RAW: frozenset[str]
"""The kernel's copy of ``guard._RAW`` (tested equal)."""

def too_many_attrs(html: str, limit: int, /) -> int | None:
    """``guard._too_many_attrs(html)`` with ``MAX_ATTRS = limit``."""

def too_deep(html: str, limit: int, shallow: int, /) -> int | None:
    """``guard._too_deep(html)`` with ``MAX_DEPTH = limit``, or None if ``html`` has at most ``shallow``
    "<"."""

def whole_utf8(data: bytes, attrs_limit: int, depth_limit: int, shallow: int, /) -> bool:
    """True when ``data`` is well-formed UTF-8 and ``too_many_attrs`` and ``too_deep`` (with these limits)
    return None for ``data.decode()``; False when not, or when the bytes cannot tell."""
