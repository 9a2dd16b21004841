"""The hot path of robots.txt: does one group's Allow/Disallow list permit a URL?

``RobotsRules.allowed`` runs for every discovered URL, so the rules of the one group that applies to us
are compiled once into a :class:`RuleMatcher`:

- Rules without ``*`` go into hash tables, one per pattern length: the longest literal prefix that
  matches is found with one slice and one dict lookup per distinct length (longest first), instead of
  testing every rule. ``$``-anchored literals are one exact lookup.
- Rules with ``*`` are matched by a left-to-right ``str.find`` scan, linear in the URL length (a hostile
  ``/*a*a*a*a*b`` cannot blow up the way it would as a backtracking regex). Only those that could still
  beat the best literal match are tried.
- Bound per URL, whatever the file: a group of :data:`INDEX_FROM` or more wildcard rules is indexed by
  one 3-character piece of each rule's literal parts (the piece shared by the fewest rules), so a path
  only tries the rules whose piece it contains (and the rules too short to have one). At most
  :data:`MAX_TRIES` wildcard rules are tried for one path: past that the path is disallowed (fail
  closed) and counted in ``exhausted``. A group whose rules alone exceed that for every path (too many
  rules without a 3-character piece, or one piece shared by too many) is ``too_complex``: it disallows
  everything, and the robots policy reports the host. 25,000 rules ``Disallow: /*q<n>*z`` (512 KiB)
  cost 7 ms per URL unbounded; see benchmarks/README.md for the bounded figure.

Precedence is RFC 9309's: the longest pattern (its length as written, ``$`` and ``*`` included) wins,
Allow on a tie.

Paths are compared after RFC 9309 2.2.2 normalization on both sides: ``%XX`` of an unreserved character
is decoded, other escapes are upper-cased, non-ASCII characters are UTF-8 percent-encoded. As Google and
protego do, ``Allow: /dir/index.html`` also allows ``/dir/``.
"""

from __future__ import annotations

import re
from urllib.parse import quote

__all__ = ["INDEX_FROM", "MAX_TRIES", "RuleMatcher", "normalize_path"]

INDEX_FROM = 32
MAX_TRIES = 256
_GRAM = 3

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Everything printable in ASCII stays as written (reserved characters keep their meaning); the rest is
# percent-encoded.
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def _unescape(m: re.Match[str]) -> str:
    char = chr(int(m.group(1), 16))
    return char if char in _UNRESERVED else "%" + m.group(1).upper()


def normalize_path(path: str) -> str:
    """RFC 9309 2.2.2 form of a path (or pattern): see the module docstring. Cheap when already clean."""
    if "%" in path:
        path = _ESCAPE.sub(_unescape, path)
    if not path.isascii() or " " in path:
        # A lone surrogate (never in a canonical URL, but a path handed in may hold one) is escaped as
        # its UTF-8 bytes rather than raising: no input makes a robots check fail.
        path = quote(path, safe=_SAFE + "%", errors="surrogatepass")
    return path


def url_path(url: str) -> str:
    """Path and query of an absolute URL (``/`` if empty), fragment dropped, normalized."""
    start = url.find("//")
    start = url.find("/", start + 2) if start >= 0 else url.find("/")
    if start < 0:
        path = "/"
        query = url.find("?")
        if query >= 0:
            path += url[query:]
    else:
        path = url[start:]
    hash_at = path.find("#")
    if hash_at >= 0:
        path = path[:hash_at]
    return normalize_path(path)


class _Wildcard:
    """A pattern with ``*``: its literal parts, matched greedily left to right."""

    __slots__ = ("anchored", "parts")

    def __init__(self, pattern: str) -> None:
        self.anchored = pattern.endswith("$")
        body = pattern[:-1] if self.anchored else pattern
        self.parts = body.split("*")

    def match(self, path: str) -> bool:
        parts = self.parts
        if not path.startswith(parts[0]):
            return False
        pos = len(parts[0])
        for part in parts[1:-1]:
            found = path.find(part, pos)
            if found < 0:
                return False
            pos = found + len(part)
        last = parts[-1]
        if self.anchored:
            return len(path) - len(last) >= pos and path.endswith(last)
        return path.find(last, pos) >= 0


class RuleMatcher:
    """Compiled Allow/Disallow rules of one group. ``rules``: ``(is_allow, pattern)`` as written."""

    __slots__ = ("_always", "_exact", "_index", "_prefixes", "_wildcards", "exhausted", "too_complex")

    def __init__(self, rules: list[tuple[bool, str]]) -> None:
        entries: list[tuple[int, bool, str]] = []
        for allow, raw in rules:
            pattern = normalize_path(raw)
            if not pattern:
                continue  # "Disallow:" with no value restricts nothing
            entries.append((len(pattern), allow, pattern))
            if allow and pattern.endswith("/index.html") and "*" not in pattern:
                directory = pattern[: -len("index.html")] + "$"
                entries.append((len(directory), True, directory))
        # Literal prefixes, by length: (length, {prefix: allow}), longest first. Equal patterns with
        # both verdicts resolve to Allow (RFC 9309 2.2.2: the least restrictive rule).
        by_len: dict[int, dict[str, bool]] = {}
        # Literal "$"-anchored patterns: {path: (priority, allow)}.
        self._exact: dict[str, tuple[int, bool]] = {}
        wildcards: list[tuple[int, bool, _Wildcard]] = []
        for priority, allow, pattern in entries:
            if "*" in pattern:
                wildcards.append((priority, allow, _Wildcard(pattern)))
            elif pattern.endswith("$"):
                prev = self._exact.get(pattern[:-1])
                self._exact[pattern[:-1]] = (priority, allow or (prev is not None and prev[1]))
            else:
                table = by_len.setdefault(priority, {})
                table[pattern] = allow or table.get(pattern, False)
        self._prefixes = sorted(by_len.items(), reverse=True)
        wildcards.sort(key=lambda w: (-w[0], not w[1]))
        self._wildcards = wildcards
        self._index: dict[str, list[int]] | None = None
        self._always: list[int] = []
        self.exhausted = 0
        """Paths disallowed because they would have tried more than MAX_TRIES wildcard rules."""
        self.too_complex = False
        """The rules cannot be matched within MAX_TRIES for any path: everything is disallowed."""
        if len(wildcards) >= INDEX_FROM:
            self._build_index()

    @property
    def indexed(self) -> bool:
        """The wildcard rules are indexed (the only case in which ``exhausted`` can count)."""
        return self._index is not None

    def _build_index(self) -> None:
        index: dict[str, list[int]] = {}
        for i, (_, _, wildcard) in enumerate(self._wildcards):
            grams = {part[j: j + _GRAM] for part in wildcard.parts for j in range(len(part) - _GRAM + 1)}
            if not grams:
                self._always.append(i)
                continue
            key = min(sorted(grams), key=lambda g: len(index.get(g, ())))
            index.setdefault(key, []).append(i)
        self._index = index
        self.too_complex = len(self._always) > MAX_TRIES

    def _candidates(self, path: str) -> list[tuple[int, bool, _Wildcard]] | None:
        """The wildcard rules ``path`` may match, in priority order; None past MAX_TRIES."""
        index = self._index
        if index is None:
            return self._wildcards
        tried = set(self._always)
        for j in range(len(path) - _GRAM + 1):
            bucket = index.get(path[j: j + _GRAM])
            if bucket is not None:
                tried.update(bucket)
                if len(tried) > MAX_TRIES:
                    return None
        if len(tried) > MAX_TRIES:
            return None
        wildcards = self._wildcards
        return [wildcards[i] for i in sorted(tried)]

    def allowed_path(self, path: str) -> bool:
        """Verdict for a normalized path (see :func:`url_path`): the longest matching pattern wins,
        Allow on a tie; no match allows."""
        best, verdict = -1, True
        n = len(path)
        for length, table in self._prefixes:
            if length <= n:
                hit = table.get(path[:length])
                if hit is not None:
                    best, verdict = length, hit
                    break
        exact = self._exact.get(path)
        if exact is not None and (exact[0] > best or (exact[0] == best and exact[1])):
            best, verdict = exact
        if self.too_complex:
            return False
        candidates = self._candidates(path) if self._wildcards else self._wildcards
        if candidates is None:
            self.exhausted += 1
            return False
        for priority, allow, wildcard in candidates:
            if priority < best or (priority == best and not allow):
                break  # sorted: nothing further can win
            if wildcard.match(path):
                return allow
        return verdict

    def allowed(self, url: str) -> bool:
        return self.allowed_path(url_path(url))
