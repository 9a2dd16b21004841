"""The node's view of the fetch layer, as Protocols: what it calls, so tests can hand it a fake
(:class:`polecat.testing.fakes.FakeFetcher`) and the real :class:`polecat.fetch.http.Fetcher` fits."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol

from polecat.fetch.dns import DnsStats
from polecat.fetch.http import RedirectPacer, Response, StreamChoice
from polecat.fetch.pool import SendGate, TlsStats


class Resolving(Protocol):
    """The resolver calls the node makes (per-IP politeness, DNS prefetch, stats)."""

    async def lookup(self, host: str) -> tuple[tuple[str, int], ...]: ...

    def prefetch(self, host: str) -> None: ...

    def stats(self) -> DnsStats: ...

    def ttl_left(self, host: str) -> float | None: ...


class PageFetcher(Protocol):
    """GETs for the node: pages (conditional when validators are given) and robots.txt."""

    @property
    def resolver(self) -> Resolving: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None: ...

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None,
                    stream: StreamChoice | None = None, max_bytes: int | None = None,
                    gate: SendGate | None = None) -> Response: ...

    async def fetch_robots(self, url: str, *, pacer: RedirectPacer | None = None,
                           gate: SendGate | None = None) -> Response: ...

    def connections_short(self) -> bool:
        """Whether connections are near their descriptor cap (polecat/fetch/pool.py rule 9)."""
        ...

    def connections_full(self, leases: int) -> bool:
        """Whether the TLS connections held and those the https ``leases`` in flight may open reach their
        cap (polecat/fetch/pool.py rule 15)."""
        ...

    def let_go(self, url: str) -> None:
        """Close the idle connections kept for ``url``'s origin (polecat/fetch/pool.py rule 11)."""
        ...

    def tls_stats(self) -> TlsStats:
        """TLS handshakes so far and those resumed (polecat/fetch/pool.py rule 10)."""
        ...
