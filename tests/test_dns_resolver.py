"""CachingResolver against a real DNS server on loopback (dnslib, polecat.testing.dns)."""

from __future__ import annotations

import asyncio
import gc
import socket
import time
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import aiodns
import pytest

from polecat.config import Config, DnsConfig
from polecat.config.validation import validate
from polecat.errors import BlockedAddressError, ConfigError, DnsError
from polecat.fetch import dns as dns_module
from polecat.fetch.dns import CachingResolver, ipv6_usable
from polecat.testing.dns import LocalDnsServer, query
from polecat.testing.failover import until
from polecat.testing.fakes import FakeClock


@pytest.fixture(scope="module")
def dns() -> Iterator[LocalDnsServer]:
    """One server for the module (stopping one takes a second); every test uses its own names."""
    with LocalDnsServer() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(monotonic=1000.0)


def config(dns: LocalDnsServer, **kw: object) -> DnsConfig:
    base: dict[str, object] = {
        "nameservers": (dns.address,), "min_ttl": 60.0, "max_ttl": 600.0, "negative_ttl": 30.0,
        "timeout": 1.0, "allow_private": True, "ipv6": "on",
    }
    base.update(kw)
    return DnsConfig(**base)  # type: ignore[arg-type]


@pytest.fixture
async def resolver(dns: LocalDnsServer, clock: FakeClock) -> AsyncIterator[CachingResolver]:
    r = CachingResolver(config(dns), clock=clock)
    yield r
    await r.close()


async def test_resolves_a_and_aaaa_ipv4_first(dns: LocalDnsServer, resolver: CachingResolver) -> None:
    dns.add("h01.test", ["::1", "127.0.0.1"])
    assert await resolver.lookup("h01.test") == (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6))
    assert await resolver.lookup("H01.test.") == await resolver.lookup("h01.test")  # one name, one entry


@pytest.mark.parametrize(("ttl", "kept"), [(120, 120.0), (5, 60.0), (100_000, 600.0)])
async def test_ttl_honoured_within_clamp(
    dns: LocalDnsServer, resolver: CachingResolver, clock: FakeClock, ttl: int, kept: float
) -> None:
    """Our cache keeps an answer for its TTL clamped to [min_ttl, max_ttl]."""
    name = f"t{ttl}.test"
    dns.add(name, ["127.0.0.1"], ttl=ttl)
    await resolver.lookup(name)
    assert dns.queries[name] == 2  # A + AAAA
    assert resolver.ttl_left(name) == kept
    clock.advance(kept - 0.5)
    assert resolver.ttl_left(name) == 0.5
    await resolver.lookup(name)
    assert resolver.stats().misses == 1
    clock.advance(1.0)
    await resolver.lookup(name)
    assert resolver.stats().misses == 2


async def test_a_name_asked_again_reaches_the_server_again(dns: LocalDnsServer, resolver: CachingResolver,
                                                             clock: FakeClock) -> None:
    """This cache is the only one (module docstring): once its entry, kept max_ttl, is gone, the name is
    asked at the server again, though its TTL (an hour) has not run out; c-ares' own query cache would
    answer it, holding ~1.3 KB a name for that hour."""
    dns.add("hour.test", ["127.0.0.1"], ttl=3600)
    await resolver.lookup("hour.test")
    clock.advance(601.0)
    await resolver.lookup("hour.test")
    assert dns.queries["hour.test"] == 4  # A and AAAA, twice


async def test_localhost_names_are_loopback_and_never_asked(dns: LocalDnsServer, clock: FakeClock) -> None:
    r = CachingResolver(config(dns), clock=clock)
    v4 = CachingResolver(config(dns, ipv6="off"), clock=clock)
    guarded = CachingResolver(config(dns, allow_private=False), clock=clock)
    try:
        assert await r.lookup("localhost") == (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6))
        assert await v4.lookup("Docs.LOCALHOST.") == (("127.0.0.1", socket.AF_INET),)
        with pytest.raises(BlockedAddressError):
            await guarded.lookup("localhost")
        assert dns.queries["localhost"] == dns.queries["docs.localhost"] == 0
        assert r.stats().queries == v4.stats().queries == 0
    finally:
        for resolver in (r, v4, guarded):
            await resolver.close()


def test_the_query_cache_is_turned_off_only_where_c_ares_has_one() -> None:
    """pycares 4's c-ares (before 1.23) has no query cache and no option for it: its channel is made as
    asked, not refused by the option's absence."""
    calls: list[int] = []

    class Lib:
        def ares_init_options(self, channel: object, options: object, optmask: int) -> int:
            calls.append(optmask)
            return 0

    class Options:  # c-ares 1.23 on
        qcache_max_ttl = 3600

    class OldOptions:
        __slots__ = ()

    off = dns_module._QueryCacheOff(Lib())
    options = Options()
    assert off.ares_init_options(None, options, 1) == 0 and options.qcache_max_ttl == 0
    assert off.ares_init_options(None, OldOptions(), 1) == 0
    assert calls == [1 | dns_module._ARES_OPT_QUERY_CACHE, 1]


async def test_expired_names_at_the_least_recently_used_end_go_when_an_answer_is_stored(
        dns: LocalDnsServer, resolver: CachingResolver, clock: FakeClock) -> None:
    """A breadth crawl's names, each used once: those expired go, not only past max_entries."""
    for i in range(5):
        dns.add(f"used-once{i}.test", ["127.0.0.1"], ttl=60)
        await resolver.lookup(f"used-once{i}.test")
    clock.advance(30.0)
    dns.add("later.test", ["127.0.0.1"], ttl=120)
    await resolver.lookup("later.test")
    assert resolver.stats().entries == 6  # none expired yet
    clock.advance(31.0)  # the first five have
    dns.add("last.test", ["127.0.0.1"], ttl=60)
    await resolver.lookup("last.test")
    assert resolver.stats().entries == 2 and resolver.stats().evictions == 0
    assert resolver.ttl_left("later.test") == 89.0


async def test_expired_answer_is_asked_again(dns: LocalDnsServer) -> None:
    """End to end on the real clock: a 1 s TTL under a 1 s floor is re-queried at the server."""
    dns.add("short.test", ["127.0.0.5"], ttl=1)
    r = CachingResolver(config(dns, min_ttl=1.0))
    try:
        await r.lookup("short.test")
        await r.lookup("short.test")
        assert dns.queries["short.test"] == 2
        dns.add("short.test", ["127.0.0.6"], ttl=1)
        await asyncio.sleep(1.1)
        assert await r.lookup("short.test") == (("127.0.0.6", socket.AF_INET),)
    finally:
        await r.close()


@pytest.mark.parametrize("fail", ["NXDOMAIN", "SERVFAIL"])
async def test_negative_caching(
    dns: LocalDnsServer, resolver: CachingResolver, clock: FakeClock, fail: str
) -> None:
    name = f"gone-{fail.lower()}.test"
    dns.fail(name, fail)
    with pytest.raises(DnsError):
        await resolver.lookup(name)
    asked = dns.queries[name]
    assert asked >= 2  # c-ares retries a SERVFAIL once
    for _ in range(2):
        with pytest.raises(DnsError):
            await resolver.lookup(name)
    assert dns.queries[name] == asked
    dns.add(name, ["127.0.0.1"])
    clock.advance(29.0)
    with pytest.raises(DnsError):
        await resolver.lookup(name)
    clock.advance(2.0)
    assert await resolver.lookup(name) == (("127.0.0.1", socket.AF_INET),)
    s = resolver.stats()
    assert (s.hits, s.misses) == (3, 2)


async def test_a_cached_failure_keeps_no_frame_of_those_it_failed(
        dns: LocalDnsServer, resolver: CachingResolver) -> None:
    # A cached error raised as itself kept its last raise's traceback, and so every frame of the
    # task that raised it (a 10M-host breadth crawl: 4.2 GB), as long as its entry lived.
    dns.fail("gone.test", "NXDOMAIN")

    class Held:
        pass

    async def lease_of_a_dead_host() -> None:
        held = Held()  # a lease's state, in the frames the lookup's traceback runs through
        assert held
        await resolver.lookup("gone.test")

    raised = []
    for _ in range(2):
        with pytest.raises(DnsError) as failed:
            await lease_of_a_dead_host()
        raised.append(failed.value)
    assert raised[0] is not raised[1] and str(raised[0]) == str(raised[1])
    del raised, failed
    gc.collect()
    assert not any(isinstance(o, Held) for o in gc.get_objects())


async def test_name_without_addresses_is_negative(dns: LocalDnsServer, resolver: CachingResolver) -> None:
    dns.add("empty.test", [])
    with pytest.raises(DnsError):
        await resolver.lookup("empty.test")
    with pytest.raises(DnsError):
        await resolver.lookup("empty.test")
    assert dns.queries["empty.test"] == 2


async def test_concurrent_lookups_coalesce(dns: LocalDnsServer, resolver: CachingResolver) -> None:
    dns.add("busy.test", ["127.0.0.3"])
    results = await asyncio.gather(*(resolver.lookup("busy.test") for _ in range(50)))
    assert {r for r in results} == {(("127.0.0.3", socket.AF_INET),)}
    assert dns.queries["busy.test"] == 2
    s = resolver.stats()
    assert (s.misses, s.coalesced, s.hits) == (1, 49, 0)


async def test_prefetch_warms_cache(dns: LocalDnsServer, resolver: CachingResolver) -> None:
    dns.add("soon.test", ["127.0.0.4"])
    resolver.prefetch("soon.test")
    resolver.prefetch("soon.test")  # already in flight: no second query
    resolver.prefetch("127.0.0.1")  # literal: nothing to do
    for _ in range(200):
        if resolver.stats().entries:
            break
        await asyncio.sleep(0.005)
    assert await resolver.lookup("soon.test") == (("127.0.0.4", socket.AF_INET),)
    s = resolver.stats()
    assert (s.misses, s.hits) == (1, 1)
    assert dns.queries["soon.test"] == 2
    assert s.hit_ratio == 0.5


async def test_prefetch_failure_is_quiet(dns: LocalDnsServer, resolver: CachingResolver) -> None:
    resolver.prefetch("nope.test")
    await asyncio.sleep(0.05)
    with pytest.raises(DnsError):
        await resolver.lookup("nope.test")


async def test_guard_refuses_private_answers(dns: LocalDnsServer, clock: FakeClock) -> None:
    dns.add("inside.test", ["127.0.0.1", "10.0.0.1"])
    dns.add("mixed.test", ["10.0.0.1", "93.184.216.34"])  # resolution only: nothing connects to it
    r = CachingResolver(config(dns, allow_private=False), clock=clock)
    try:
        with pytest.raises(BlockedAddressError, match="loopback"):
            await r.lookup("inside.test")
        with pytest.raises(BlockedAddressError):  # cached like any answer
            await r.lookup("inside.test")
        assert dns.queries["inside.test"] == 2
        assert await r.lookup("mixed.test") == (("93.184.216.34", socket.AF_INET),)
        with pytest.raises(BlockedAddressError):
            r.check_host("127.0.0.1")
        with pytest.raises(BlockedAddressError):
            r.check_host("::1")
        r.check_host("inside.test")  # names are judged at resolution, not here
    finally:
        await r.close()


async def test_metadata_literal_refused_even_when_private_allowed(resolver: CachingResolver) -> None:
    with pytest.raises(BlockedAddressError, match="metadata"):
        resolver.check_host("169.254.169.254")
    resolver.check_host("127.0.0.1")  # allowed: no error


async def test_unreachable_nameserver_is_dns_error_not_cached(clock: FakeClock) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but never answers
        r = CachingResolver(DnsConfig(nameservers=(f"127.0.0.1:{port}",), timeout=0.2), clock=clock)
        try:
            with pytest.raises(DnsError):
                await r.lookup("slow.test")
            with pytest.raises(DnsError):
                await r.lookup("slow.test")
            assert r.stats().misses == 2 and r.stats().failures == 2
        finally:
            await r.close()


async def test_a_name_c_ares_gives_up_on_early_is_asked_again_within_the_timeout(
        dns: LocalDnsServer, clock: FakeClock) -> None:
    """Rule 11, against c-ares itself: once it has timed 3 answers of a millisecond, it ends a query after
    250 + 500 ms (its two tries) whatever timeout it was given; a name the nameserver is late on is asked
    again, within ``dns.timeout`` (here the fake clock never gets there)."""
    quick = [f"timed{i}.test" for i in range(3)]
    for name in [*quick, "late.test"]:
        dns.add(name, ["127.0.0.7"])
    r = CachingResolver(config(dns, ipv6="off", timeout=10.0), clock=clock)
    try:
        for name in quick:
            await r.lookup(name)
        dns.drop("late.test", 2)  # both of c-ares' tries unanswered: a nameserver's pause of ~1 s
        assert await r.lookup("late.test") == (("127.0.0.7", socket.AF_INET),)
        assert dns.queries["late.test"] == 3
        s = r.stats()
        assert (s.queries, s.failures) == (5, 0)
    finally:
        await r.close()


class _Failing:
    """A c-ares channel whose every query fails with ``code`` after ``took`` seconds of ``clock``."""

    def __init__(self, clock: FakeClock, took: float, code: int) -> None:
        self.clock = clock
        self.took = took
        self.code = code
        self.asked = 0

    async def query_dns(self, name: str, qtype: str) -> object:
        self.asked += 1
        self.clock.advance(self.took)
        raise aiodns.error.DNSError(self.code, f"c-ares error {self.code}")

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(("code", "asks"), [(aiodns.error.ARES_ETIMEOUT, 3),
                                            (aiodns.error.ARES_ECONNREFUSED, 1)])
async def test_a_lookup_is_given_up_once_the_timeout_passed_and_other_errors_at_once(
        clock: FakeClock, monkeypatch: pytest.MonkeyPatch, code: int, asks: int) -> None:
    """Rule 11: c-ares' timeouts of 0.75 s are asked again until 2 s have passed (asks at 0, 0.75 and
    1.5 s), not cached (rule 3); an error that is not c-ares' timeout is the answer."""
    channel = _Failing(clock, 0.75, code)
    monkeypatch.setattr(dns_module, "_uncached_resolver", lambda **_kw: channel)
    r = CachingResolver(DnsConfig(nameservers=("127.0.0.1:53",), timeout=2.0, ipv6="off"), clock=clock)
    try:
        for lookups in (1, 2):
            with pytest.raises(DnsError):
                await r.lookup("dead.test")
            assert channel.asked == asks * lookups
        assert r.stats().failures == 2
    finally:
        await r.close()


@pytest.mark.parametrize("form", ["nat64", "nat64-local/96", "ipv4-compatible", "ipv4-translated", "6to4",
                                  "teredo", "isatap"])
async def test_a_hostile_dns_answer_in_every_embedded_form_is_refused(dns: LocalDnsServer, clock: FakeClock,
                                                                       form: str) -> None:
    from tests.test_dns_guard import EMBEDDED

    metadata, loopback = EMBEDDED[form]
    name = f"{form.replace('/', '-')}.hostile.test"
    dns.add("meta-" + name, [metadata])
    dns.add("lo-" + name, [loopback])
    for allow_private in (False, True):
        r = CachingResolver(config(dns, allow_private=allow_private), clock=clock)
        try:
            with pytest.raises(BlockedAddressError, match="metadata"):
                await r.lookup("meta-" + name)
            if not allow_private:
                with pytest.raises(BlockedAddressError, match="loopback"):
                    await r.lookup("lo-" + name)
        finally:
            await r.close()


# --- at scale (issue 39): one A query per name per TTL, AAAA only where IPv6 is usable, bounds ------


async def test_one_a_query_per_name_per_ttl_and_no_aaaa_without_ipv6(
        dns: LocalDnsServer, clock: FakeClock) -> None:
    names = [f"once{i}.test" for i in range(10)]
    for name in names:
        dns.add(name, ["127.0.0.1", "::1"], ttl=120)
    aaaa_before = dns.query_types["AAAA"]
    r = CachingResolver(config(dns, ipv6="off"), clock=clock)
    try:
        for _ in range(3):
            got = await asyncio.gather(*(r.lookup(n) for n in names for _ in range(5)))
            assert set(got) == {(("127.0.0.1", socket.AF_INET),)}
        assert [dns.queries[n] for n in names] == [1] * 10
        assert dns.query_types["AAAA"] == aaaa_before
        assert r.stats().queries == 10
        clock.advance(121)
        await r.lookup(names[0])  # re-asked, at the server (c-ares' own cache is off)
        assert r.stats().queries == 11 and r.stats().misses == 11 and dns.queries[names[0]] == 2
    finally:
        await r.close()


async def test_auto_asks_aaaa_exactly_when_this_machine_has_global_ipv6(
        dns: LocalDnsServer, clock: FakeClock) -> None:
    dns.add("auto6.test", ["127.0.0.1", "::1"])
    r = CachingResolver(config(dns, ipv6="auto"), clock=clock)
    try:
        await r.lookup("auto6.test")
        assert dns.queries["auto6.test"] == (2 if ipv6_usable() else 1)
    finally:
        await r.close()


@pytest.mark.parametrize("usable", [False, True])
async def test_auto_follows_the_probe_asked_once_at_start(
        dns: LocalDnsServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, usable: bool) -> None:
    probes: list[bool] = []

    def probe() -> bool:
        probes.append(usable)
        return usable

    monkeypatch.setattr(dns_module, "ipv6_usable", probe)
    names = [f"probe{int(usable)}-{i}.test" for i in range(20)]
    for name in names:
        dns.add(name, ["127.0.0.1", "::1"])
    aaaa_before = dns.query_types["AAAA"]
    r = CachingResolver(config(dns, ipv6="auto"), clock=clock)
    try:
        await asyncio.gather(*(r.lookup(n) for n in names))
        assert probes == [usable]  # at the resolver's start, not per lookup
        assert dns.query_types["AAAA"] - aaaa_before == (20 if usable else 0)
        assert r.stats().queries == (40 if usable else 20)
    finally:
        await r.close()


class _ProbeSocket:
    """A UDP socket whose connect picks ``source`` (or fails with ``error``), as the kernel would."""

    def __init__(self, source: str, error: OSError | None) -> None:
        self._source, self._error = source, error

    def __enter__(self) -> _ProbeSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def connect(self, addr: tuple[str, int]) -> None:
        if self._error is not None:
            raise self._error

    def getsockname(self) -> tuple[str, int, int, int]:
        return (self._source, 4242, 0, 0)


@pytest.mark.parametrize(("source", "error", "usable"), [
    ("2a01:4f8::1", None, True),  # a global source address
    ("fd00::1", None, False),  # unique-local: NAT66 at best, below IPv4 (RFC 6724)
    ("fe80::1", None, False),
    ("::1", None, False),
    ("", OSError(101, "Network is unreachable"), False),  # a v4-only machine
])
def test_ipv6_usable_asks_the_kernel_for_a_global_route(monkeypatch: pytest.MonkeyPatch, source: str,
                                                        error: OSError | None, usable: bool) -> None:
    probe = SimpleNamespace(socket=lambda *a: _ProbeSocket(source, error), AF_INET6=socket.AF_INET6,
                            SOCK_DGRAM=socket.SOCK_DGRAM)
    monkeypatch.setattr(dns_module, "socket", probe)  # this module's name only: no other socket changes
    ipv6_usable.cache_clear()
    try:
        assert ipv6_usable() is usable
    finally:
        ipv6_usable.cache_clear()  # the real machine's answer again for the other tests


async def test_the_cache_is_bounded_least_recently_used_first(dns: LocalDnsServer, clock: FakeClock) -> None:
    names = [f"lru{i}.test" for i in range(4)]
    for name in names:
        dns.add(name, ["127.0.0.1"])
    r = CachingResolver(config(dns, ipv6="off", max_entries=3), clock=clock)
    try:
        for name in names[:3]:
            await r.lookup(name)
        await r.lookup(names[0])  # a hit: names[0] is now the most recently used
        await r.lookup(names[3])  # evicts names[1]
        assert r.stats().entries == 3 and r.stats().evictions == 1
        for name in (names[0], names[2], names[3]):
            await r.lookup(name)
        assert [dns.queries[n] for n in names] == [1, 1, 1, 1] and r.stats().misses == 4
        await r.lookup(names[1])  # asked again, at the server
        assert r.stats().misses == 5 and dns.queries[names[1]] == 2
    finally:
        await r.close()


async def test_prefetches_in_flight_are_bounded(dns: LocalDnsServer, clock: FakeClock,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dns_module, "MAX_PREFETCH", 2)
    names = [f"pre{i}.test" for i in range(5)]
    for name in names:
        dns.add(name, ["127.0.0.1"])
    r = CachingResolver(config(dns, ipv6="off"), clock=clock)
    try:
        for name in names:
            r.prefetch(name)
        assert r.stats().prefetch_skipped == 3
        assert await r.lookup(names[0]) == (("127.0.0.1", socket.AF_INET),)
        for _ in range(200):  # bounded: the second prefetch ends and frees its place
            if r.stats().entries == 2:
                break
            await asyncio.sleep(0.01)
        r.prefetch(names[4])
        assert r.stats().prefetch_skipped == 3
        assert await r.lookup(names[4]) and dns.queries[names[4]] == 1
    finally:
        await r.close()


async def test_a_cached_answer_holds_no_tracked_address(dns: LocalDnsServer,
                                                        resolver: CachingResolver) -> None:
    """Module docstring, last point: the addresses of a cached answer are tuples of a string and a plain
    int, which the collector untracks, not of an enum member it tracks; they still equal the families."""
    dns.add("gc.test", ["::1", "127.0.0.1"])
    addrs = await resolver.lookup("gc.test")
    assert addrs == (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6))
    assert all(type(family) is int for _, family in addrs)
    gc.collect()
    gc.collect()  # the outer tuple is untracked once the pass before has untracked the inner ones
    assert not gc.is_tracked(addrs) and not any(map(gc.is_tracked, addrs))


def test_the_test_nameserver_holds_its_answers_from_the_query_it_is_told(dns: LocalDnsServer) -> None:
    """polecat.testing.dns ``hold`` (bench_stalls' starved nameserver): the answer to the ``at``-th query
    from the call on waits the hold out (a sleep's lower bound: no load makes it shorter), and is still
    an answer."""
    dns.add("held.test", ["127.0.0.8"])
    dns.hold(0.3, at=2)
    assert query(dns.address, "held.test").rr
    started = time.monotonic()
    assert query(dns.address, "held.test").rr
    assert time.monotonic() - started >= 0.3


async def test_names_that_never_answer_hold_at_most_their_places_and_others_pass(
        dns: LocalDnsServer, clock: FakeClock) -> None:
    """Rule 12: lookups of silenced names (a lame delegation) each hold one of ``concurrency`` places
    while they are asked again (rule 11; the fake clock never reaches their timeout); a name asked while
    a place is free is answered at once, and one asked while every place is held waits its turn."""
    lame = [f"lame{i}.test" for i in range(3)]
    for name in lame:
        dns.silence(name)
    dns.add("answers.test", ["127.0.0.8"])
    dns.add("waits.test", ["127.0.0.9"])
    r = CachingResolver(config(dns, ipv6="off", timeout=10.0, concurrency=4), clock=clock)
    try:
        held = [asyncio.ensure_future(r.lookup(name)) for name in lame]
        await until(lambda: all(dns.queries[name] for name in lame), 30, "each lame name asked")
        assert await asyncio.wait_for(r.lookup("answers.test"), 10) == (("127.0.0.8", socket.AF_INET),)
        dns.silence("lame0-again.test")
        held.append(asyncio.ensure_future(r.lookup("lame0-again.test")))
        await until(lambda: dns.queries["lame0-again.test"] > 0, 30, "the fourth lame name asked")
        waiting = asyncio.ensure_future(r.lookup("waits.test"))
        await asyncio.sleep(1.0)
        assert not waiting.done() and dns.queries["waits.test"] == 0  # every place held
        assert not any(task.done() for task in held)
        waiting.cancel()
    finally:
        await r.close()
    for task in [*held, waiting]:
        with pytest.raises((DnsError, asyncio.CancelledError)):
            await task


def test_a_lookup_concurrency_outside_its_range_is_refused() -> None:
    for bad in (0, 65_537):
        with pytest.raises(ConfigError, match=r"dns\.concurrency: must be in \[1, 65536\]"):
            validate(Config(dns=DnsConfig(concurrency=bad)))
