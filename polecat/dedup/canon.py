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

Native kernel: where ``polecat.dedup._canon`` is built (polecat/native.py), :meth:`Canonicalizer.
canonicalize_links` and :meth:`Canonicalizer.canonicalize` run in C (polecat/dedup/_canon.c), with the
same memo, results and counters as the Python code here, which is the specification. The kernel calls
ada through the function addresses of its cffi module, checked on known URLs when it is bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType

import xxhash
from ada_url._ada_wrapper import ffi, lib

from polecat import native
from polecat.config import DEFAULT_TRACKING_PARAMS
from polecat.errors import ConfigError
from polecat.hosts import HostPatternMap, host_key

# ada's C API, bound once: an attribute read on the cffi lib costs as much as a short call.
_parse, _parse_with_base, _free = lib.ada_parse, lib.ada_parse_with_base, lib.ada_free
_is_valid, _scheme_type, _get_href = lib.ada_is_valid, lib.ada_get_scheme_type, lib.ada_get_href
_get_components, _can_parse, _unpack = lib.ada_get_components, lib.ada_can_parse, ffi.unpack
_ADA_KERNEL_API = ("ada_parse", "ada_parse_with_base", "ada_can_parse", "ada_free", "ada_is_valid",
                   "ada_get_scheme_type", "ada_get_href", "ada_get_components")
"""The functions of ada's C API the native kernel calls, in the order its ``bind_ada`` takes them."""
_OMITTED = 0xFFFFFFFF  # ada's url_components marker for an absent part
_HTTP, _HTTPS = 0, 2  # ada SchemeType values

MEMO_ENTRIES = 65_536
"""Bound of the link memo of :meth:`Canonicalizer.canonicalize_links` (a few MB)."""
ORIGIN_ENTRIES = 4_096
"""Bound of the memo of absolute hrefs' origins (``scheme://authority`` as written -> as serialized)."""

_SIMPLE_PATH = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%(?!2[eE])[0-9A-Fa-f]{2})*")
"""Path characters the WHATWG parser copies as they are (no percent-encoding, no ``\\``, no ``%2e`` that
could make a dot segment, no tab or newline it would strip)."""
_SIMPLE_QUERY = re.compile(r"(?:[A-Za-z0-9\-._~!$&()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
"""Query characters the WHATWG parser copies as they are in an http(s) URL (``'`` it would encode)."""

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


def _load_kernel() -> ModuleType | None:
    """The native kernel bound to ada's C API, or None (not built, POLECAT_PURE_PYTHON=1, or an ada_url
    whose functions are missing or do not behave as the kernel expects)."""
    kernel = native.load("polecat.dedup._canon")
    if kernel is None:
        return None
    try:
        addresses = tuple(int(ffi.cast("uintptr_t", ffi.addressof(lib, name))) for name in _ADA_KERNEL_API)
    except (AttributeError, TypeError, ffi.error):
        return None
    return kernel if kernel.bind_ada(addresses) else None


_KERNEL = _load_kernel()


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

    __slots__ = ("_collapsed", "_exact", "_keep_order", "_kernel", "_memo", "_origins", "_prefixes",
                 "_rejected", "_total")

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
        """(key part of the base, href) -> (canonical or None, rewritten): see canonicalize_links."""
        self._origins: dict[str, str | None] = {}
        """An absolute href's ``scheme://authority`` as written -> as ada serializes it (None: the plain
        serialization rule does not apply); see :meth:`_plain`."""
        self._kernel = None if _KERNEL is None else _KERNEL.Kernel(
            self._memo, MEMO_ENTRIES, tuple(self._exact), self._prefixes,
            self._keep_order.__contains__ if self._keep_order.items() else None)
        """The native loop (the same memo, its own counters), or None: the Python code below runs."""

    def canonicalize_links(self, hrefs: Iterable[str], base: str) -> list[str]:
        """Canonical forms of a page's hrefs resolved against ``base`` (unparsable ones dropped).

        Pages of one site repeat the same links (navigation, footers), so results are memoized, keyed
        by what the result depends on:

        - the fragment never matters (rule 3): the key is the href without it (ASCII hrefs only: the
          fragment of another may hold a lone surrogate, which rejects the whole href; and not after a
          space or control character, which the cut would leave trailing, to be stripped);
        - an absolute http(s) href depends on nothing else: ``("", href)``;
        - a ``/``-rooted one (``/path``, ``//host``) on the base's scheme and authority only:
          ``(scheme://authority, href)`` for an http(s) base, so every page of a site shares it;
        - a path-relative one on the base's directory: ``(base directory, href)``, unless it holds a
          ``:`` (``http:?x`` is relative to the whole of an http base);
        - a fragment-only one (``#top``) is the base itself: ``(base, "")``.

        Query-only references (``?x``) depend on the base's path and are not memoized, nor are hrefs
        that start with a control character or space (the parser strips it: ``"\\t?x"`` is query-only),
        nor is anything resolved against a base that does not parse. The memo is
        bounded (:data:`MEMO_ENTRIES`); counters count every href as :meth:`canonicalize` would.

        Nor are simple hrefs (:meth:`_plain`) on a page whose base is its own serialization: most links
        of a page (``/a/b.html``, ``../c?d=1``, ``http://host/e``) are, and their WHATWG serialization is
        string work (the base's origin or directory, the href, dot segments removed), cheaper than a
        lookup in a memo too large for the CPU's caches; rules 3-5 then run as for any other.
        """
        if self._kernel is not None:
            links: list[str] = self._kernel.links(hrefs, base)
            return links
        try:
            raw_base = base.encode()
        except UnicodeEncodeError:
            raw_base = b""
        if not _can_parse(raw_base, len(raw_base)):  # nothing resolves against it, absolute hrefs included
            return [c for href in hrefs if (c := self.canonicalize(href, base)) is not None]
        memo = self._memo
        base_dir = base[: base.rfind("/") + 1]
        origin = _authority_prefix(base)
        plain_base = _plain_base(raw_base, base)
        out: list[str] = []
        for href in hrefs:
            ascii_href = href.isascii()
            cut = href.find("#") if ascii_href else -1
            if cut > 0 and href[cut - 1] <= " ":
                cut = -1  # the parser would strip what precedes the fragment once it is cut
            key_href = href if cut < 0 else href[:cut]
            if plain_base is not None and ascii_href:
                plain = self._plain(key_href, *plain_base)
                if plain is not None:
                    url, rewritten = self._canonical_form(*plain)
                    self._total += 1
                    self._collapsed += rewritten or cut >= 0
                    out.append(url)
                    continue
            key = _memo_key(key_href, cut == 0, base, base_dir, origin)
            if key is None:
                canonical = self.canonicalize(href, base)
                if canonical is not None:
                    out.append(canonical)
                continue
            hit = memo.get(key)
            if hit is None:
                hit = self._resolve(key_href, raw_base if key[0] else None)
                if len(memo) >= MEMO_ENTRIES:
                    memo.clear()
                memo[key] = hit
            canonical, collapsed = hit
            self._total += 1
            if canonical is None:
                self._rejected += 1
                continue
            # A fragment is always dropped, so an href that had one was always rewritten.
            self._collapsed += collapsed or cut >= 0
            out.append(canonical)
        return out

    def canonicalize(self, url: str, base: str | None = None) -> str | None:
        """The canonical form of ``url`` resolved against ``base``; ``None`` if unparsable or not http(s)."""
        if self._kernel is not None:
            result: str | None = self._kernel.canonicalize(url, base)
            return result
        try:
            raw_base = None if base is None else base.encode()
        except UnicodeEncodeError:
            raw_base = b"\xff"  # a base that does not parse: nothing resolves against it
        canonical, collapsed = self._resolve(url, raw_base)
        self._total += 1
        self._rejected += canonical is None
        self._collapsed += collapsed
        return canonical

    def _resolve(self, url: str, base: bytes | None) -> tuple[str | None, bool]:
        """(canonical form or None, whether it differs from the plain WHATWG serialization) of ``url``
        resolved against the UTF-8 ``base``; counts nothing."""
        try:
            raw = url.encode()
        except UnicodeEncodeError:  # lone surrogates: the text was mis-decoded upstream
            return None, False
        obj = _parse(raw, len(raw)) if base is None else _parse_with_base(raw, len(raw), base, len(base))
        try:
            if not _is_valid(obj) or _scheme_type(obj) not in (_HTTP, _HTTPS):
                return None, False
            ada_href = _get_href(obj)
            href: str = _unpack(ada_href.data, ada_href.length).decode("ascii")
            if "?" not in href and "#" not in href and "%" not in href:
                return href, False  # nothing below would change it: skip the components read
            parts = _get_components(obj)
            path_start, search_start, hash_start = parts.pathname_start, parts.search_start, parts.hash_start
        finally:
            _free(obj)
        return self._canonical_form(href, path_start, search_start, hash_start)

    def _canonical_form(self, href: str, path_start: int, search_start: int = _OMITTED,
                        hash_start: int = _OMITTED) -> tuple[str, bool]:
        """Rules 3-5 on ``href``, a WHATWG serialization with those components (``_OMITTED``: absent):
        (canonical form, whether it differs from ``href``)."""
        if "?" not in href and "#" not in href and "%" not in href:
            return href, False
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
        return canonical, canonical != href

    def _plain(self, href: str, origin: str, directory: str) -> tuple[str, int, int] | None:
        """The WHATWG serialization of the ASCII ``href`` (fragment cut) on a page whose base is its own
        serialization, with ``origin`` (``scheme://authority``) and ``directory`` (its path up to its
        last ``/``), as (serialization, path start, query start or ``_OMITTED``); None unless ``href`` is
        simple: an http(s) URL written ``http[s]://authority/path``, a ``/path`` (not ``//``) or a
        ``path`` with no ``:``, whose path and query hold only the characters the parser copies
        (:data:`_SIMPLE_PATH`, :data:`_SIMPLE_QUERY`). The authority (host case, IDNA, IPv4 forms, default
        port) is ada's serialization of ``http[s]://authority/`` (:data:`ORIGIN_ENTRIES` memoized): the
        parser ends an authority at its first ``/`` and reads the path after it alone."""
        path, sep, query = href.partition("?")
        if path.startswith(("http://", "https://")):
            slash = path.find("/", path.index("//") + 2)
            if slash < 0:
                return None
            origin_as_written = path[:slash]
            known = self._origins.get(origin_as_written, _NO_ORIGIN)
            if known is _NO_ORIGIN:
                known = _serialized_origin(origin_as_written)
                if len(self._origins) >= ORIGIN_ENTRIES:
                    self._origins.clear()
                self._origins[origin_as_written] = known
            if known is None:
                return None
            origin = known
            path = tail = path[slash:]
        elif path[:1] == "/":
            if path[1:2] == "/":
                return None  # scheme-relative: //host
            tail = path
        else:
            if not path or ":" in path:  # a scheme, or only a query
                return None
            tail = path
            path = directory + path
        if not _SIMPLE_PATH.fullmatch(tail) or (sep and not _SIMPLE_QUERY.fullmatch(query)):
            return None
        if "/." in path:
            path = _remove_dot_segments(path)
        start = len(origin)
        return origin + path + sep + query, start, start + len(path) if sep else _OMITTED

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
        if self._kernel is not None:
            total, collapsed, rejected = self._kernel.counts()
            return CanonStats(total=total, collapsed=collapsed, rejected=rejected)
        return CanonStats(total=self._total, collapsed=self._collapsed, rejected=self._rejected)


_NO_ORIGIN = ""
"""Marks an origin not yet in :attr:`Canonicalizer._origins` (a serialized origin is never empty)."""


def _plain_base(raw_base: bytes, base: str) -> tuple[str, str] | None:
    """(origin, directory path) of an http(s) ``base`` that is its own WHATWG serialization, else None
    (see :meth:`Canonicalizer._plain`)."""
    obj = _parse(raw_base, len(raw_base))
    try:
        if not _is_valid(obj) or _scheme_type(obj) not in (_HTTP, _HTTPS):
            return None
        ada_href = _get_href(obj)
        if _unpack(ada_href.data, ada_href.length) != raw_base:
            return None
        parts = _get_components(obj)
        path_start, search_start, hash_start = parts.pathname_start, parts.search_start, parts.hash_start
    finally:
        _free(obj)
    end = search_start if search_start != _OMITTED else hash_start if hash_start != _OMITTED else len(base)
    path = base[path_start:end]
    return base[:path_start], path[: path.rfind("/") + 1]


def _serialized_origin(origin: str) -> str | None:
    """ada's serialization of the http(s) ``scheme://authority`` (ASCII, no ``/``, ``?`` or ``#``), or
    None if ``origin + "/"`` does not parse as that origin with the path ``/`` (e.g. a ``\\`` in it)."""
    raw = origin.encode() + b"/"
    obj = _parse(raw, len(raw))
    try:
        if not _is_valid(obj) or _scheme_type(obj) not in (_HTTP, _HTTPS):
            return None
        ada_href = _get_href(obj)
        href: str = _unpack(ada_href.data, ada_href.length).decode("ascii")
        path_start = _get_components(obj).pathname_start
    finally:
        _free(obj)
    return href[:path_start] if path_start == len(href) - 1 else None


def _remove_dot_segments(path: str) -> str:
    """The WHATWG path parser's handling of ``.`` and ``..`` segments in ``path`` (which starts with
    ``/``), for http(s): ``..`` drops the segment before it, and either at the end leaves a ``/``."""
    segments: list[str] = []
    parts = path.split("/")[1:]
    for i, segment in enumerate(parts, 1):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment != ".":
            segments.append(segment)
            continue
        if i == len(parts):
            segments.append("")
    return "/" + "/".join(segments)


def _memo_key(href: str, fragment_only: bool, base: str, base_dir: str,
              origin: str) -> tuple[str, str] | None:
    """The memo key of ``href`` (its fragment cut) on a page of ``base``: the part of the base its
    resolution depends on, and the href; None when it is not memoized (see canonicalize_links).
    The base part is ``""`` only for an absolute href, which resolves without the base."""
    if fragment_only:
        return base, ""
    if not href or href[0] in "?#" or href[0] <= " ":  # the parser strips a leading C0/space: "\t?x"
        return None
    if href.startswith(("http://", "https://")):
        return "", href
    if href[0] == "/" and origin:
        return origin, href
    if ":" in href or not base_dir:  # "http:?x" is relative to the whole of an http base
        return None
    return base_dir, href


def _authority_prefix(base: str) -> str:
    """``scheme://authority`` of an http(s) base as ada serializes it (no raw ``/`` before the path),
    or ``""`` for any other base."""
    if not base.startswith(("http://", "https://")):
        return ""
    end = base.find("/", base.index("//") + 2)
    return base if end < 0 else base[:end]


def _param_key(param: str) -> str:
    return param.partition("=")[0]


def url_fingerprint(canonical_url: str) -> bytes:
    """16-byte xxh3-128 digest of an already canonical URL: the key of the seen-URL table.

    128 bits because 64-bit fingerprints start colliding at a few billion URLs.
    """
    return xxhash.xxh3_128_digest(canonical_url.encode())
