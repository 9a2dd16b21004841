"""Native kernel of :class:`polecat.dedup.canon.Canonicalizer` (polecat/dedup/_canon.c)."""

from collections.abc import Callable, Iterable

def bind_ada(addresses: tuple[int, ...], /) -> bool:
    """Binds ada's C API (the addresses of ``canon._ADA_KERNEL_API``, in that order) once; False when the
    functions do not give ada's answers on known URLs (then no Kernel can be made)."""

class Kernel:
    """The link loop and miss path of one Canonicalizer, sharing its memo dict."""

    def __init__(self, memo: dict[tuple[str, str], tuple[str | None, bool]], memo_entries: int,
                 exact: tuple[str, ...], prefixes: tuple[str, ...],
                 keep_order: Callable[[str], bool] | None) -> None: ...
    def links(self, hrefs: Iterable[str], base: str, /) -> list[str]:
        """``Canonicalizer.canonicalize_links``."""
    def canonicalize(self, url: str, base: str | None = None, /) -> str | None:
        """``Canonicalizer.canonicalize``."""
    def resolve(self, url: str, base: bytes | None, /) -> tuple[str | None, bool]:
        """``Canonicalizer._resolve`` (counts nothing)."""
    def counts(self) -> tuple[int, int, int]:
        """(total, collapsed, rejected) since the kernel was made."""
