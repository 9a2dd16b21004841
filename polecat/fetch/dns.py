"""A caching DNS resolver for the fetch pool, built on aiodns (c-ares), with the SSRF guard applied.

Rules:
1. One lookup of a name per TTL: A, and AAAA with it only when IPv6 is usable (``cfg.ipv6``; ``auto``
   asks :func:`ipv6_usable` once per process), queried together with ``query_dns``, which reports record
   TTLs. A positive answer is cached for the smallest TTL in it, clamped to ``[cfg.min_ttl, cfg.max_ttl]``.
2. The cache holds at most ``cfg.max_entries`` names; a new one past that evicts the least recently
   used (a breadth crawl touches each of a million hosts for a minute, then never again). Storing an
   answer also drops the expired entries at the least recently used end: a breadth crawl's names would
   otherwise stay, ~500 B each, until ``max_entries`` of them (~100 MB at the default).
3. NXDOMAIN, SERVFAIL, REFUSED and "no address records" are cached for ``cfg.negative_ttl``; timeouts and
   unreachable nameservers are not cached (the host's backoff in the frontier handles those).
4. Concurrent lookups of one name share one query. :meth:`CachingResolver.prefetch` starts a lookup
   without waiting, so a host that is about to become ready finds its name in the cache; at most
   :data:`MAX_PREFETCH` prefetches are in flight (the rest are skipped and counted: a prefetch is a
   hint, and an unbounded window is unbounded tasks and memory).
5. Every address passes :func:`polecat.fetch.guard.blocked_reason`; blocked ones are dropped, and a name
   with no address left raises :class:`BlockedAddressError` (cached like any answer). IP literals skip
   DNS but not the guard (:meth:`CachingResolver.check_host`, which the pool calls for them).
6. ``localhost`` and the names under it are the loopback addresses, never asked of a nameserver (RFC 6761
   6.3; a query would go to the system's resolver, which is the hosts file's job): what a newcomer's
   ``polecat crawl http://localhost:8000/`` needs, and, like any loopback address, refused without
   ``allow_private``.
7. aiodns errors become :class:`DnsError` here, once. Nothing else escapes ``lookup``.
8. A cached failure is raised as a new exception each time (its type and message): the cached object
   raised itself would keep the traceback of its last raise, and with it every frame of that lease's task
   (its lease, deadlines, timers: ~30 KB), for as long as the entry lives. A breadth crawl of 10,000,000
   dead hosts held 4.2 GB of anonymous memory so (benchmarks/README.md, "Issue 39: dead hosts' failures
   held in the DNS cache").
9. This cache is the only one: the c-ares channel is made with c-ares' own query cache off. c-ares (1.23
   on; 1.34 here) keeps every answer for its TTL (up to one hour), with no bound on how many: ~1.3 KB of
   anonymous memory a name (benchmarks/README.md, "Issue 39: c-ares' own DNS cache"), so a breadth crawl
   that meets 100 new hosts a second under one-hour TTLs would hold ~470 MB of answers no lookup reads
   again (this cache answers repeats first). pycares (5.2) has no setting for it, so
   :func:`_uncached_resolver` sets it in c-ares' init call (``ARES_OPT_QUERY_CACHE``, max TTL 0);
   tests/test_dns_resolver.py sees a name asked again reach the server, and fails should a pycares
   release make its channels some other way.
10. An entry's addresses are ``(address, family)`` tuples whose family is a plain ``int``, not a
    ``socket.AddressFamily`` member: an enum member is an object the cyclic collector tracks, so each
    address tuple and the tuple of them stayed tracked for the entry's life, two objects a cached name
    for every pass of the collector to traverse (issue 39: ~44,000 of the ~240,000 tracked objects of a
    1M-host breadth crawl at 245 s); tuples of plain strings and ints the collector untracks as its
    passes meet them (the inner ones first, then the tuple of them).
11. A lookup is given up as timed out only once ``cfg.timeout`` seconds have passed since its first
    query: while no address came back and a query ended in c-ares' timeout, the name is asked again.
    c-ares (1.32 on; 1.34 here) ends a query after 5 times its nameserver's recent mean latency, never
    under 250 ms, whatever timeout the channel was given (its ares_metrics.c); with ``tries=2`` a
    nameserver that answers in a millisecond so had 0.75 s, not ``cfg.timeout``, to answer. A pause of
    it under a second (a loaded machine; a local resolver recursing for a name it has not cached) failed
    every name asked meanwhile, and a robots.txt whose name failed closes its host for
    ``robots.retry_base`` (polecat/frontier/robots.py rule 5; 60 s on a node): a 3-node crawl of 200
    hosts on a loaded machine took ~65 s instead of 3 (benchmarks/README.md "A 3-node crawl that stalled
    ~60 s"). Other errors (refused, SERVFAIL) are answered at once, as before.
12. At most ``cfg.concurrency`` names (256 by default) are asked at once; the rest wait their turn, their
    own timeout starting when they are asked (a crawl's start makes every host's lookup due at once).
    A name whose nameservers never answer (a lame delegation: a share of any big domain list) holds its
    place for ``cfg.timeout`` (rule 11), so the bound is what a breadth crawl's rate of new hosts needs
    with such names among them: at 32, a breadth crawl of 5,000 hosts whose every tenth name went
    unanswered ran at ~25 requests/s for its first 150 s, waiting on them, against ~450 with every name
    answered (benchmarks/README.md "Names that never answer in a breadth crawl").
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import socket
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiodns
import pycares

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.config import DnsConfig
from polecat.errors import BlockedAddressError, DnsError, FetchError
from polecat.fetch.guard import blocked_reason, is_ip_literal

__all__ = ["MAX_PREFETCH", "CachingResolver", "DnsStats", "ipv6_usable"]

log = logging.getLogger(__name__)

_NEGATIVE = frozenset({
    aiodns.error.ARES_ENOTFOUND,
    aiodns.error.ARES_ENODATA,
    aiodns.error.ARES_ESERVFAIL,
    aiodns.error.ARES_EREFUSED,
    aiodns.error.ARES_EBADNAME,
})
MAX_PREFETCH = 256
"""Prefetches in flight at most (rule 4)."""
_ARES_OPT_QUERY_CACHE = 1 << 21
"""c-ares' ``ARES_OPT_QUERY_CACHE`` (ares.h, 1.23 on), which pycares' cffi module does not export."""
_ROUTE_PROBE = "2001:db8::1"
"""A global-scope address (the documentation prefix) whose route :func:`ipv6_usable` asks the kernel
for; a UDP connect picks a route and a source address and sends nothing."""


class _QueryCacheOff:
    """pycares' cffi library, its ``ares_init_options`` setting c-ares' query cache off (rule 9);
    everything else is the library's own."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)

    def ares_init_options(self, channel: Any, options: Any, optmask: int) -> Any:
        try:
            options.qcache_max_ttl = 0
        except AttributeError:  # a c-ares before 1.23 (pycares 4): it has no query cache to turn off
            return self._lib.ares_init_options(channel, options, optmask)
        return self._lib.ares_init_options(channel, options, optmask | _ARES_OPT_QUERY_CACHE)


def _uncached_resolver(**kwargs: Any) -> aiodns.DNSResolver:
    """``aiodns.DNSResolver(**kwargs)`` over a c-ares channel without c-ares' own query cache (rule
    9). pycares makes the channel in the resolver's constructor with its module's ``_lib``, which
    is that library wrapped for the length of the call. A pycares without it is used as it is, logged."""
    lib = getattr(pycares, "_lib", None)
    if lib is None or not hasattr(lib, "ares_init_options"):
        log.warning("dns: this pycares makes its channels another way: c-ares' own query cache stays on "
                    "(~1.3 KB a name for up to an hour)")
        return aiodns.DNSResolver(**kwargs)
    setattr(pycares, "_lib", _QueryCacheOff(lib))  # noqa: B010 - a private name mypy does not know
    try:
        return aiodns.DNSResolver(**kwargs)
    finally:
        setattr(pycares, "_lib", lib)  # noqa: B010


@dataclass(frozen=True, slots=True)
class DnsStats:
    hits: int
    """Lookups answered from the cache (positive or negative)."""
    misses: int
    """Lookups that sent queries."""
    coalesced: int
    """Lookups that joined a query already in flight for the same name."""
    failures: int
    """Queries that ended in an error (cached negative answers are hits, not failures)."""
    entries: int
    hit_ratio: float
    """hits / all lookups (0.0 before any)."""
    queries: int = 0
    """DNS queries sent (A, and AAAA where IPv6 is usable): one or two per miss."""
    evictions: int = 0
    """Names dropped to keep the cache within ``dns.max_entries``."""
    prefetch_skipped: int = 0
    """Prefetches not started because :data:`MAX_PREFETCH` were in flight."""


@dataclass(frozen=True, slots=True)
class _Entry:
    addrs: tuple[tuple[str, int], ...]
    """(address, family), IPv4 first; empty when ``error`` is set."""
    error: FetchError | None
    expires: float


def _records(results: Sequence[Any]) -> tuple[list[tuple[str, int]], float | None, list[BaseException]]:
    """The ``(address, family)`` pairs of one ask's ``query_dns`` results, their smallest TTL (None without
    any), and the errors among them."""
    addrs: list[tuple[str, int]] = []
    ttl: float | None = None
    errors: list[BaseException] = []
    for res in results:
        if isinstance(res, BaseException):
            errors.append(res)
            continue
        for rr in res.answer:
            if isinstance(rr.data, pycares.ARecordData | pycares.AAAARecordData):
                fam = socket.AF_INET if isinstance(rr.data, pycares.ARecordData) else socket.AF_INET6
                addrs.append((rr.data.addr, fam))
                ttl = rr.ttl if ttl is None else min(ttl, rr.ttl)
    return addrs, ttl, errors


def _timed_out(error: BaseException) -> bool:
    """Whether ``error`` is c-ares giving up on its own timer (rule 11: asked again)."""
    return (isinstance(error, aiodns.error.DNSError) and bool(error.args)
            and error.args[0] == aiodns.error.ARES_ETIMEOUT)


@functools.cache
def ipv6_usable() -> bool:
    """Whether this machine can reach the IPv6 internet: the kernel has a route to a global address and
    picks a global source address for it. A unique-local source (fc00::/7) does not count: it reaches
    the internet only through NAT66, and RFC 6724 ranks it below IPv4 for a global destination (glibc's
    AI_ADDRCONFIG is looser: any address but loopback and link-local). Nothing is sent. Asked once per
    process (a machine that gains IPv6 while a node runs is picked up at its next start)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.connect((_ROUTE_PROBE, 9))
            source = ipaddress.ip_address(probe.getsockname()[0])
    except OSError:  # no IPv6 stack, or no route ("Network is unreachable")
        return False
    return source.is_global


class CachingResolver:
    """A TTL-honouring shared DNS cache with the SSRF guard; the rules of the module docstring."""

    def __init__(self, cfg: DnsConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._cfg = cfg
        self._clock = clock
        ipv6 = cfg.ipv6 == "on" or (cfg.ipv6 == "auto" and ipv6_usable())
        self._types: tuple[str, ...] = ("A", "AAAA") if ipv6 else ("A",)
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        """Least recently used first."""
        self._inflight: dict[str, asyncio.Future[_Entry]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(cfg.concurrency)  # rule 12
        self._aiodns: aiodns.DNSResolver | None = None
        self._hits = self._misses = self._coalesced = self._failures = 0
        self._queries = self._evictions = self._prefetch_skipped = self._prefetching = 0

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._aiodns is not None:
            await self._aiodns.close()
            self._aiodns = None

    # --- polecat's interface -----------------------------------------------------------------------

    def check_host(self, host: str) -> None:
        """Raise BlockedAddressError if ``host`` is an IP literal the guard refuses (names pass)."""
        if is_ip_literal(host):
            reason = blocked_reason(host, self._cfg.allow_private)
            if reason is not None:
                raise BlockedAddressError(f"{host}: refused: {reason}")

    async def lookup(self, host: str) -> tuple[tuple[str, int], ...]:
        """Allowed ``(address, family)`` pairs of a name, IPv4 first, from the cache or a fresh query;
        raises DnsError or BlockedAddressError (also when that answer is cached)."""
        key = host.rstrip(".").lower()
        entry = self._cache.get(key)
        if entry is not None and entry.expires > self._clock.monotonic():
            self._hits += 1
            self._cache.move_to_end(key)
        else:
            fut = self._inflight.get(key)
            if fut is None:
                self._misses += 1
                fut = self._start(key)
            else:
                self._coalesced += 1
            entry = await asyncio.shield(fut)
        if entry.error is not None:
            raise type(entry.error)(*entry.error.args)  # a new one: rule 8
        return entry.addrs

    def prefetch(self, host: str) -> None:
        """Warm the cache for ``host`` without waiting (no-op when cached, in flight, or a literal)."""
        key = host.rstrip(".").lower()
        if is_ip_literal(key) or key in self._inflight:
            return
        entry = self._cache.get(key)
        if entry is not None and entry.expires > self._clock.monotonic():
            return
        if self._prefetching >= MAX_PREFETCH:
            self._prefetch_skipped += 1
            return
        self._misses += 1
        self._prefetching += 1
        self._start(key).add_done_callback(self._prefetch_done)

    def _prefetch_done(self, _fut: asyncio.Future[_Entry]) -> None:
        self._prefetching -= 1

    def ttl_left(self, host: str) -> float | None:
        """Seconds the cached answer for ``host`` stays valid; None when nothing valid is cached."""
        entry = self._cache.get(host.rstrip(".").lower())
        left = entry.expires - self._clock.monotonic() if entry is not None else 0.0
        return left if left > 0 else None

    def stats(self) -> DnsStats:
        total = self._hits + self._misses + self._coalesced
        return DnsStats(
            hits=self._hits,
            misses=self._misses,
            coalesced=self._coalesced,
            failures=self._failures,
            entries=len(self._cache),
            hit_ratio=self._hits / total if total else 0.0,
            queries=self._queries,
            evictions=self._evictions,
            prefetch_skipped=self._prefetch_skipped,
        )

    # --- internals ---------------------------------------------------------------------------------

    def _start(self, key: str) -> asyncio.Future[_Entry]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_Entry] = loop.create_future()
        self._inflight[key] = fut
        task = loop.create_task(self._query(key, fut))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return fut

    async def _query(self, key: str, fut: asyncio.Future[_Entry]) -> None:
        try:
            # Queued here rather than in c-ares, each lookup's timeout is its own (rule 12). The guard
            # bounds the whole lookup: rule 11 asks for cfg.timeout, and the last ask's c-ares tries
            # may run past it.
            async with self._slots, asyncio.timeout(self._cfg.timeout * 3):
                entry = await self._ask(key)
        except asyncio.CancelledError:  # close(): waiters must not hang
            fut.set_exception(DnsError(f"{key}: lookup abandoned (resolver closed)"))
            fut.exception()  # mark retrieved: a prefetch has nobody waiting
            raise
        except TimeoutError:
            self._failures += 1
            entry = _Entry((), DnsError(f"{key}: lookup timed out"), 0.0)
        except Exception as exc:  # e.g. a nameserver string c-ares rejects: still answer every waiter
            self._failures += 1
            entry = _Entry((), DnsError(f"{key}: resolver error: {exc!r}"), 0.0)
        finally:
            self._inflight.pop(key, None)
        if entry.expires > 0:
            self._store(key, entry)
        fut.set_result(entry)

    async def _ask(self, key: str) -> _Entry:
        """Query A (and AAAA where IPv6 is usable), again while c-ares times out within ``cfg.timeout``
        (rule 11); build the entry (expires 0 means: do not cache)."""
        if key == "localhost" or key.endswith(".localhost"):  # RFC 6761 6.3 (rule 6)
            loopback = [("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)]
            return self._answer(key, loopback[: len(self._types)], None, self._clock.monotonic())
        if self._aiodns is None:
            self._aiodns = _uncached_resolver(
                nameservers=list(self._cfg.nameservers) or None, timeout=self._cfg.timeout, tries=2
            )
        resolver = self._aiodns
        deadline = self._clock.monotonic() + self._cfg.timeout
        while True:
            self._queries += len(self._types)
            results = await asyncio.gather(*(resolver.query_dns(key, t) for t in self._types),
                                           return_exceptions=True)
            now = self._clock.monotonic()
            addrs, ttl, errors = _records(results)
            if addrs or now >= deadline or not any(_timed_out(e) for e in errors):
                break
        if not addrs:
            self._failures += 1
            return self._negative(key, errors, now)
        return self._answer(key, addrs, ttl, now)

    def _answer(self, key: str, addrs: Sequence[tuple[str, int]], ttl: float | None, now: float) -> _Entry:
        """The entry of ``key``'s addresses, those the SSRF guard refuses dropped (rule 5)."""
        # Plain ints, not socket.AddressFamily members (objects the collector tracks): rule 10.
        allowed = tuple((addr, int(family)) for addr, family in addrs
                        if blocked_reason(addr, self._cfg.allow_private) is None)
        expires = now + min(max(float(ttl or 0), self._cfg.min_ttl), self._cfg.max_ttl)
        if not allowed:
            reason = blocked_reason(addrs[0][0], self._cfg.allow_private)
            return _Entry((), BlockedAddressError(f"{key}: refused: {reason}"), expires)
        return _Entry(allowed, None, expires)

    def _negative(self, key: str, errors: list[BaseException], now: float) -> _Entry:
        codes = [e.args[0] for e in errors if isinstance(e, aiodns.error.DNSError) and e.args]
        if not errors:
            return _Entry((), DnsError(f"{key}: no address records"), now + self._cfg.negative_ttl)
        exc = errors[0]
        message = exc.args[1] if isinstance(exc, aiodns.error.DNSError) and len(exc.args) > 1 else exc
        error = DnsError(f"{key}: {message}")
        cacheable = bool(codes) and len(codes) == len(errors) and all(c in _NEGATIVE for c in codes)
        return _Entry((), error, now + self._cfg.negative_ttl if cacheable and self._cfg.negative_ttl else 0)

    def _store(self, key: str, entry: _Entry) -> None:
        cache = self._cache
        cache[key] = entry
        cache.move_to_end(key)
        while len(cache) > self._cfg.max_entries:
            cache.popitem(last=False)
            self._evictions += 1
        now = self._clock.monotonic()
        while cache and next(iter(cache.values())).expires <= now:  # rule 2
            cache.popitem(last=False)
