"""URL canonicalization: one spelling per resource, computed before any dedup structure is touched.

Rules, in order (the WHATWG parser does the first group, this module the second):

1. WHATWG parse and resolve against ``base`` (ada-url): lowercase scheme and host, IDNA to punycode,
   default port dropped, dot segments resolved (``%2e`` spellings included), characters outside the
   WHATWG percent-encode sets encoded.
2. Only ``http`` and ``https`` are kept; anything else, or input that does not parse, gives ``None``.
3. The fragment is dropped.
4. Percent-encoding in path and query is normalized: hex digits uppercased, unreserved characters
   (RFC 3986: ``A-Z a-z 0-9 - . _ ~``) decoded. Reserved characters stay encoded: ``%2F`` is not ``/``.
5. Query: empty ``&&`` pieces and tracking parameters (case-insensitive key match; ``utm_*`` is a prefix
   pattern, others are exact) are removed, the rest sorted by key, stably (equal keys keep their order,
   so ``a=1&a=2`` and ``a=2&a=1`` stay different), and an empty query is dropped together with its ``?``.
   Hosts matching a ``dedup.keep_query_order`` pattern (sites where the order of keys matters) keep
   their keys in the order written. A URL changed by sorting counts in ``CanonStats.collapsed`` like
   any other rewrite.

Bad input (tests/test_fuzz_hostile.py fuzzes it): nothing raises; an href that does not parse (NUL or
invalid characters in the host, a port outside 0-65535 or negative, an invalid IPv4 such as
``1.2.3.4.5``, lone surrogates) gives ``None`` and is counted in ``CanonStats.rejected``. IDN hosts,
homoglyphs included, become their punycode (``apple.com`` with a Cyrillic ``a`` is
``xn--pple-43d.com``): a different host, crawled and judged as such. Time is linear in the href; pages
hand over at most ``parse.guard.MAX_LINKS`` hrefs of at most ``parse.guard.MAX_HREF_CHARS`` characters,
so the memo holds at most ``MEMO_ENTRIES`` x that. URLs longer than ``scope.max_url_length`` are refused
by the frontier, counted.

The host (scheme://userinfo@host:port prefix of the WHATWG serialization) is never touched after step 1,
so canonicalization never changes which server a URL points to, and the output re-parses to itself
(idempotent). The hot path calls ada's C API through cffi directly: one parse, one serialization, one
components read, then string work only where a ``%`` or a ``?`` is present.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import xxhash
from ada_url._ada_wrapper import ffi, lib

from polecat.config import DEFAULT_TRACKING_PARAMS
from polecat.errors import ConfigError
from polecat.frontier.patterns import HostPatternMap

_OMITTED = 0xFFFFFFFF  # ada's url_components marker for an absent part
_HTTP, _HTTPS = 0, 2  # ada SchemeType values

MEMO_ENTRIES = 65_536
"""Bound of the link memo of :meth:`Canonicalizer.canonicalize_links` (a few MB)."""

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _pct_table() -> dict[str, str]:
    """Every two-hex-digit spelling (any case) -> its canonical form: the character if unreserved."""
    table: dict[str, str] = {}
    digits = "0123456789abcdefABCDEF"
    for hi in digits:
        for lo in digits:
            char = chr(int(hi + lo, 16))
            table[hi + lo] = char if char in _UNRESERVED else "%" + (hi + lo).upper()
    return table


_PCT = _pct_table()


def _normalize_pct(part: str) -> str:
    """Uppercase percent-escapes and decode unreserved ones; malformed escapes are left as they are."""
    pieces = part.split("%")
    out = [pieces[0]]
    for piece in pieces[1:]:
        canon = _PCT.get(piece[:2])
        out.append("%" + piece if canon is None else canon + piece[2:])
    return "".join(out)


@dataclass(frozen=True, slots=True)
class CanonStats:
    """Counters since the canonicalizer was built."""

    total: int
    """URLs given to :meth:`Canonicalizer.canonicalize`."""
    collapsed: int
    """Accepted URLs whose canonical form differs from the plain WHATWG-resolved href."""
    rejected: int
    """URLs that did not parse or were not http(s)."""


class Canonicalizer:
    """Turns discovered URLs into their canonical spelling (rules in the module docstring)."""

    __slots__ = ("_collapsed", "_exact", "_keep_order", "_memo", "_prefixes", "_rejected", "_total")

    def __init__(self, tracking_params: Sequence[str] = DEFAULT_TRACKING_PARAMS,
                 keep_query_order: Sequence[str] = ()) -> None:
        """``tracking_params``: query keys to remove; ``name*`` removes every key starting with ``name``.
        ``keep_query_order``: host patterns (``example.com``, ``*.example.com``) whose keys stay unsorted.

        Raises :class:`ConfigError` for a pattern with a ``*`` anywhere but at its end.
        """
        exact: set[str] = set()
        prefixes: list[str] = []
        for pattern in tracking_params:
            stem = pattern.lower().removesuffix("*")
            if "*" in stem or not stem:
                raise ConfigError(f"dedup.tracking_params: unsupported pattern {pattern!r}")
            if pattern.endswith("*"):
                prefixes.append(stem)
            else:
                exact.add(stem)
        self._exact = frozenset(exact)
        self._prefixes = tuple(prefixes)
        self._keep_order: HostPatternMap[bool] = HostPatternMap((p, True) for p in keep_query_order)
        self._total = self._collapsed = self._rejected = 0
        self._memo: dict[tuple[str, str], tuple[str | None, bool]] = {}

    def canonicalize_links(self, hrefs: Iterable[str], base: str) -> list[str]:
        """Canonical forms of a page's hrefs resolved against ``base`` (unparsable ones dropped).

        Pages of one site repeat the same links (navigation, footers), so results are memoized. A
        path-relative or absolute reference resolves the same against every base in one directory, so
        the memo key is ``(base directory, href)`` (``("", href)`` for absolute http(s) hrefs); query-
        and fragment-only references depend on the whole base and are not memoized. The memo is
        bounded (:data:`MEMO_ENTRIES`); counters count every href, memoized or not.
        """
        memo = self._memo
        base_dir = base[: base.rfind("/") + 1]
        out: list[str] = []
        for href in hrefs:
            if not href or href[0] in "?#":
                canonical = self.canonicalize(href, base)
            else:
                key = ("", href) if href.startswith(("http://", "https://")) else (base_dir, href)
                hit = memo.get(key)
                if hit is None:
                    collapsed_before = self._collapsed
                    canonical = self.canonicalize(href, base)
                    if len(memo) >= MEMO_ENTRIES:
                        memo.clear()
                    memo[key] = (canonical, self._collapsed != collapsed_before)
                else:
                    canonical, collapsed = hit
                    self._total += 1
                    self._collapsed += collapsed
                    self._rejected += canonical is None
            if canonical is not None:
                out.append(canonical)
        return out

    def canonicalize(self, url: str, base: str | None = None) -> str | None:
        """The canonical form of ``url`` resolved against ``base``; ``None`` if unparsable or not http(s)."""
        self._total += 1
        try:
            raw = url.encode()
            if base is None:
                obj = lib.ada_parse(raw, len(raw))
            else:
                raw_base = base.encode()
                obj = lib.ada_parse_with_base(raw, len(raw), raw_base, len(raw_base))
        except UnicodeEncodeError:  # lone surrogates: the text was mis-decoded upstream
            self._rejected += 1
            return None
        try:
            if not lib.ada_is_valid(obj) or lib.ada_get_scheme_type(obj) not in (_HTTP, _HTTPS):
                self._rejected += 1
                return None
            ada_href = lib.ada_get_href(obj)
            href: str = ffi.unpack(ada_href.data, ada_href.length).decode("ascii")
            parts = lib.ada_get_components(obj)
            path_start, search_start, hash_start = parts.pathname_start, parts.search_start, parts.hash_start
        finally:
            lib.ada_free(obj)

        end = len(href) if hash_start == _OMITTED else hash_start
        if search_start == _OMITTED:
            path = href[path_start:end]
            query = ""
        else:
            path = href[path_start:search_start]
            sort = not self._keep_order or host_key(href) not in self._keep_order
            query = self._canonical_query(href[search_start + 1 : end], sort)
        if "%" in path:
            path = _normalize_pct(path)
        canonical = href[:path_start] + path + ("?" + query if query else "")
        if canonical != href:
            self._collapsed += 1
        return canonical

    def _canonical_query(self, query: str, sort: bool) -> str:
        if "%" in query:
            query = _normalize_pct(query)
        kept = [param for param in query.split("&") if param and not self._is_tracking(param)]
        if sort and len(kept) > 1:
            kept.sort(key=_param_key)
        return "&".join(kept)

    def _is_tracking(self, param: str) -> bool:
        key = param.partition("=")[0].lower()
        return key in self._exact or key.startswith(self._prefixes)

    def stats(self) -> CanonStats:
        """A snapshot of the counters."""
        return CanonStats(total=self._total, collapsed=self._collapsed, rejected=self._rejected)


def _param_key(param: str) -> str:
    return param.partition("=")[0]


def host_key(canonical_url: str) -> str:
    """The politeness key ``host[:port]`` of a canonical URL (userinfo stripped; no re-parse)."""
    start = canonical_url.index("//") + 2
    end = canonical_url.find("/", start)
    authority = canonical_url[start:] if end < 0 else canonical_url[start:end]
    return authority.rpartition("@")[2]


def url_fingerprint(canonical_url: str) -> bytes:
    """16-byte xxh3-128 digest of an already canonical URL: the key of the seen-URL table.

    128 bits because 64-bit fingerprints start colliding at a few billion URLs.
    """
    return xxhash.xxh3_128_digest(canonical_url.encode())
