"""What a host is: the politeness key of a canonical URL, its host name, and host patterns.

A host key is ``host[:port]`` of a canonical URL: one politeness unit, in one slice
(polecat/frontier/slices.py).
Host patterns are used by throttle overrides, the blocklist and the canonicalizer's per-host rules.

``example.com`` matches that host exactly (any port); ``*.example.com`` matches ``example.com`` and every
subdomain of it. Matching is case-insensitive. The most specific pattern (longest) wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")
_ABSENT = object()


def host_key(canonical_url: str) -> str:
    """The politeness key ``host[:port]`` of a canonical URL (userinfo stripped; no re-parse)."""
    start = canonical_url.index("//") + 2
    end = canonical_url.find("/", start)
    authority = canonical_url[start:] if end < 0 else canonical_url[start:end]
    return authority.rpartition("@")[2]


def hostname(host_key: str) -> str:
    """Strip a port from ``host[:port]`` (IPv6 literals keep their brackets)."""
    if host_key.startswith("["):
        return host_key[: host_key.index("]") + 1]
    return host_key.rsplit(":", 1)[0] if ":" in host_key else host_key


class HostPatternMap(Generic[T]):
    """Map host patterns to values; look up by host with most-specific-wins semantics."""

    __slots__ = ("_exact", "_suffix")

    def __init__(self, items: Iterable[tuple[str, T]] = ()) -> None:
        self._exact: dict[str, T] = {}
        self._suffix: dict[str, T] = {}
        for pattern, value in items:
            self.set(pattern, value)

    def set(self, pattern: str, value: T) -> None:
        p = pattern.strip().lower()
        if p.startswith("*."):
            self._suffix[p[2:]] = value
        else:
            self._exact[p] = value

    def remove(self, pattern: str) -> bool:
        """Drop exactly ``pattern``; False if it was not set."""
        p = pattern.strip().lower()
        table = self._suffix if p.startswith("*.") else self._exact
        return table.pop(p.removeprefix("*.") if p.startswith("*.") else p, _ABSENT) is not _ABSENT

    def get(self, host_key: str) -> T | None:
        """The value of the most specific pattern matching ``host_key`` (``host`` or ``host:port``)."""
        if not self._exact and not self._suffix:
            return None
        host = hostname(host_key.lower())
        if host_key.lower() in self._exact:
            return self._exact[host_key.lower()]
        if host in self._exact:
            return self._exact[host]
        if self._suffix:
            name = host
            while True:
                if name in self._suffix:
                    return self._suffix[name]
                dot = name.find(".")
                if dot < 0:
                    return None
                name = name[dot + 1 :]
        return None

    def __contains__(self, host_key: str) -> bool:
        return self.get(host_key) is not None

    def empty(self) -> bool:
        """Whether no pattern is set (no host is in it: a batch may skip asking host by host)."""
        return not self._exact and not self._suffix

    def items(self) -> list[tuple[str, T]]:
        return [*self._exact.items(), *((f"*.{k}", v) for k, v in self._suffix.items())]
