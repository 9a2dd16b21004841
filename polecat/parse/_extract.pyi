"""Type stub of the native kernel polecat/parse/_extract.c (lexbor parse + extraction in one pass)."""

class ExtractError(Exception): ...

def bind(path: str) -> None: ...
def extract(
    html: str | bytes, /
) -> tuple[
    tuple[str, ...],
    str,
    str,
    list[tuple[str | None, str | None]],
    list[tuple[str | None, str | None]],
    list[str | None],
]: ...
