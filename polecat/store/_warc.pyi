"""Native WARC head assembly (polecat/store/_warc.c)."""

from collections.abc import Sequence

def record(fields: list[str], content_type: str, first_line: str, headers: Sequence[tuple[str, str]],
           length_line: int | None, payload: int, rename: bool, end: bool, /) -> bytes:
    """``polecat.store.warc.python_record`` of the same arguments."""
