"""A breadth crawl at the cap of its TLS connections (polecat/fetch/pool.py rules 12 and 15,
polecat/frontier/leasing.py rule 11, host_table.py rule 25): the frontier stops taking new hosts whose
lease would open a TLS connection when the connections are full, so the hosts in rotation keep theirs (one
handshake a host), and goes on with the plain-HTTP hosts, which need none.

Sans-IO: a real frontier, a fake clock, and a model of the pool's connections (:class:`CappedConnections`)
that counts handshakes and the idle connections closed at the cap; no sockets, no timing."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from itertools import count, pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.fetch.pool import TLS_SHORT, tls_full
from polecat.frontier.host_table import HostTable
from polecat.frontier.leasing import FULL_RECHECK, keeps_connection
from polecat.frontier.records import Idle, Lease, Wait
from tests.frontier_helpers import Rig, canon, politeness

pytestmark = pytest.mark.usefixtures("frontier_backend")

LEAVES = 2
CAP = 32
"""TLS connections the model holds at most (pool rule 12's ``max_tls``, small)."""
IN_FLIGHT = 8
"""Requests in flight at most (the node's concurrency): a quarter of the cap, as 256 is an eighth of 2,048."""
TAKES = 0.02
"""Seconds of the fake clock a request takes: the crawl could make 400 requests a second, the hosts a
full cap keeps in rotation 32."""
MIXED = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1.0))
"""The rigs of the tests of one lease call (a request a second a host)."""


@dataclass
class CappedConnections:
    """Pool rules 2, 11, 12 and 15 as far as they count here: one connection a host, kept idle between its
    requests, let go when the frontier says so; one more past :data:`CAP` closes the idle connection
    released longest ago."""

    idle: dict[str, None] = field(default_factory=dict)
    """Hosts with an idle connection, released longest ago first."""
    in_use: set[str] = field(default_factory=set)
    handshakes: int = 0
    closed_at_cap: int = 0

    def held(self) -> int:
        return len(self.idle) + len(self.in_use)

    def short(self) -> bool:
        return self.held() >= TLS_SHORT * CAP

    def full(self) -> bool:
        return tls_full(self.held(), 0, CAP)  # a request connects as it is leased: none starting

    def take(self, host: str) -> None:
        if host in self.idle:  # reused (rule 2)
            del self.idle[host]
        else:
            self.handshakes += 1
            if self.held() + 1 > CAP and self.idle:  # rule 12: the idle one released longest ago
                del self.idle[next(iter(self.idle))]
                self.closed_at_cap += 1
        self.in_use.add(host)

    def give_back(self, host: str, keep: bool) -> None:
        self.in_use.discard(host)
        if keep:
            self.idle[host] = None


@dataclass
class Crawled:
    conns: CappedConnections
    ended: float
    """The fake clock at the end."""
    starts: dict[str, list[float]]
    """Each host's request starts."""


def crawl(tmp_path: Path, hosts: int, *, full: bool, mixed: bool = False) -> Crawled:
    """Seeds ``hosts`` hosts (``/`` links :data:`LEAVES` leaves each) and crawls them to the end, as the
    node's lease loop does: up to :data:`IN_FLIGHT` requests, each lease told whether the connections are
    short and (with ``full``) whether they are full. ``mixed``: every other host is plain HTTP, and its
    connections are not the model's (no cap of their own here)."""
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1.0),
                 frontier=FrontierConfig(working_hosts=10 * hosts))
    rig = Rig(tmp_path, cfg=cfg)
    for i in range(hosts):
        scheme = "http" if mixed and i % 2 else "https"
        rig.frontier.add_seed(canon(f"{scheme}://h{i}.cap.test/"), 0.0)
    rig.frontier.commit()
    conns = CappedConnections()
    flight: list[tuple[float, int, Lease]] = []
    starts: dict[str, list[float]] = {}
    order = count()  # the heap's tie-break: leases do not compare
    now = committed = 0.0
    for _ in range(10**6):
        got: Lease | Wait | Idle | None = None
        while len(flight) < IN_FLIGHT:
            got = rig.frontier.lease(now, prefer_warm=conns.short(), full=full and conns.full())
            if not isinstance(got, Lease):
                break
            if got.url.startswith("https:"):
                conns.take(got.host)
            starts.setdefault(got.host, []).append(now)
            heapq.heappush(flight, (now + TAKES, next(order), got))
        if not flight and isinstance(got, Idle):
            return Crawled(conns, now, starts)
        until = got.until if isinstance(got, Wait) and got.until is not None else None
        ends = flight[0][0] if flight else None
        now = max(now, min(t for t in (until, ends) if t is not None))
        while flight and flight[0][0] <= now:
            ended, _, lease = heapq.heappop(flight)
            if lease.kind == "robots":
                rig.complete_robots(lease, ended - TAKES, duration=TAKES)
            else:
                if lease.url.endswith(".test/"):
                    for k in range(LEAVES):
                        rig.frontier.add(canon(f"{lease.url}leaf{k}"), 1, 0.5, ended)
                rig.complete(lease, ended - TAKES, duration=TAKES)
            if lease.url.startswith("https:"):
                conns.give_back(lease.host, keeps_connection(rig.frontier.host_state(lease.host), ended))
        if now >= committed + 0.25:
            rig.frontier.commit()
            committed = now
    raise AssertionError("the crawl did not end")


def test_full_connections_keep_the_hosts_in_rotation_connected(tmp_path: Path) -> None:
    """leasing.py rule 11 with pool rule 15: no host in rotation loses its connection at the cap, where
    leasing past it closed hundreds (each reconnected: a handshake, and at the cap the next close)."""
    hosts = 200
    before = crawl(tmp_path / "before", hosts, full=False).conns
    assert before.closed_at_cap > hosts  # the cap runs of benchmarks/README.md, in small
    after = crawl(tmp_path / "after", hosts, full=True)
    assert len(after.starts) == hosts
    assert all(len(s) == 2 + LEAVES for s in after.starts.values())  # robots.txt, / and its leaves
    assert all(b - a >= 1.0 - 1e-9 for s in after.starts.values() for a, b in pairwise(s))  # politeness
    assert after.conns.closed_at_cap == 0
    assert after.conns.handshakes == hosts


def test_full_a_cold_host_waits_for_the_warm_ones(tmp_path: Path) -> None:
    """leasing.py rule 11: with the connections full, a cold host is not leased, the warm ones are; with
    none due, the call waits for the earliest, or :data:`FULL_RECHECK` at most."""
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1.0),
                 frontier=FrontierConfig(working_hosts=1000))
    rig = Rig(tmp_path, cfg=cfg)
    rig.frontier.add_seed(canon("https://warm.test/"), 0.0)
    robots = rig.frontier.lease(0.0)
    assert isinstance(robots, Lease) and robots.host == "warm.test"
    rig.complete_robots(robots, 0.0)
    for i in range(3):
        rig.frontier.add_seed(canon(f"https://cold{i}.test/"), 0.5)
    warm = rig.frontier.lease(2.0, full=True)
    assert isinstance(warm, Lease) and (warm.host, warm.kind) == ("warm.test", "page")
    assert rig.frontier.lease(2.0, full=True) == Wait(2.0 + FULL_RECHECK)  # warm.test is in flight
    rig.frontier.add(canon("https://warm.test/leaf"), 1, 0.5, 2.0)
    rig.complete(warm, 2.0, duration=0.1)
    waits = rig.frontier.lease(2.5, full=True)
    assert isinstance(waits, Wait) and waits.until == pytest.approx(3.05)  # warm.test's next request
    leaf = rig.frontier.lease(3.05, full=True)
    assert isinstance(leaf, Lease) and leaf.host == "warm.test"
    cold = rig.frontier.lease(3.05)  # room again: the cold hosts go, the earliest first
    assert isinstance(cold, Lease) and cold.host == "cold0.test"


def test_full_the_plain_http_hosts_of_a_mixed_crawl_go_on(tmp_path: Path) -> None:
    """leasing.py rule 11 in a mixed crawl at the cap: the plain-HTTP hosts, which need no TLS connection,
    are crawled while the https hosts wait for room, where holding every cold host held them too; the
    hosts in rotation still keep their TLS connections (one handshake an https host)."""
    hosts = 200
    got = crawl(tmp_path, hosts, full=True, mixed=True)
    plain = {f"h{i}.cap.test" for i in range(1, hosts, 2)}
    assert len(got.starts) == hosts
    assert all(len(s) == 2 + LEAVES for s in got.starts.values())
    assert all(b - a >= 1.0 - 1e-9 for s in got.starts.values() for a, b in pairwise(s))  # politeness
    assert got.conns.closed_at_cap == 0 and got.conns.handshakes == hosts - len(plain)
    plain_done = max(got.starts[host][-1] for host in plain)
    waiting = [host for host, s in got.starts.items() if host not in plain and s[0] > plain_done]
    # On the fake clock: the http hosts were done in the first 3.4 s of 12.3, 48 https hosts not started
    # yet; holding every cold host, they were done at 12.3, with every https host started.
    assert plain_done < got.ended / 3 and len(waiting) >= (hosts - len(plain)) // 4


def test_full_a_cold_plain_http_host_is_leased_a_cold_https_host_waits(tmp_path: Path) -> None:
    """leasing.py rule 11: with the TLS connections full, a cold https host (ahead in the heap) is held
    back, a cold plain-HTTP host behind it is leased; with room again the https host goes."""
    rig = Rig(tmp_path, cfg=MIXED)
    rig.frontier.add_seed(canon("https://tls.test/"), 0.0)
    rig.frontier.add_seed(canon("http://plain.test/"), 0.1)
    got = rig.frontier.lease(1.0, prefer_warm=True, full=True)
    assert isinstance(got, Lease) and (got.host, got.url) == ("plain.test", "http://plain.test/robots.txt")
    assert rig.frontier.lease(1.0, prefer_warm=True, full=True) == Wait(1.0 + FULL_RECHECK)
    assert rig.frontier.next_due() == 0.0  # the held host is due: a completion wakes the lease loop
    tls = rig.frontier.lease(1.5, prefer_warm=True)
    assert isinstance(tls, Lease) and (tls.host, tls.url) == ("tls.test", "https://tls.test/robots.txt")


def test_full_the_url_the_lease_would_take_decides_not_the_host(tmp_path: Path) -> None:
    """leasing.py rule 11: a host key has no scheme, and one host may queue both: its queue head decides."""
    rig = Rig(tmp_path, cfg=MIXED)
    rig.frontier.add_seed(canon("https://a.test/"), 0.0)
    rig.frontier.add(canon("http://a.test/x"), 1, 0.5, 0.0)
    rig.frontier.add_seed(canon("http://b.test/"), 0.1)
    rig.frontier.add(canon("https://b.test/x"), 1, 0.5, 0.1)
    got = rig.frontier.lease(1.0, full=True)
    assert isinstance(got, Lease) and got.url == "http://b.test/robots.txt"
    assert isinstance(rig.frontier.lease(1.0, full=True), Wait)  # a.test's head is https


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(hs.tuples(hs.booleans(), hs.integers(0, 20)), min_size=1, max_size=30))
def test_full_leases_every_plain_http_host_then_the_held_ones_earliest_first(
        hosts: list[tuple[bool, int]]) -> None:
    """leasing.py rule 11 and host_table.py rule 25: while full, every due plain-HTTP host is leased and no
    cold https one; with room again, the https hosts held back go in the order they fell due."""
    rig = Rig(Path("/nonexistent"), cfg=MIXED, backend="memory")
    for i, (tls, at) in enumerate(hosts):
        rig.frontier.add_seed(canon(f"{'https' if tls else 'http'}://h{i}.mix.test/"), at + i / 100)
    now = 100.0
    leased = []
    while isinstance(got := rig.frontier.lease(now, prefer_warm=True, full=True), Lease):
        leased.append(got)
    assert sorted(lease.host for lease in leased) == sorted(
        f"h{i}.mix.test" for i, (tls, _) in enumerate(hosts) if not tls)
    assert all(lease.url.startswith("http:") for lease in leased)
    held = sorted((at + i / 100, f"h{i}.mix.test") for i, (tls, at) in enumerate(hosts) if tls)
    if held:
        assert got == Wait(now + FULL_RECHECK) and rig.frontier.next_due() == held[0][0]
    after = []
    while isinstance(got := rig.frontier.lease(now), Lease):
        after.append(got.host)
    assert after == [host for _, host in held]


def test_a_rebuild_of_the_heaps_leaves_the_held_hosts_held(tmp_path: Path) -> None:
    """host_table.py rule 25: the ready heap rebuilt from the scheduled hosts (rules 18, 20 and 23) leaves the
    hosts held back out of it, so the leases while full do not read them again; they stay due."""
    rig = Rig(tmp_path, cfg=MIXED)
    for i in range(3):
        rig.frontier.add_seed(canon(f"https://h{i}.held.test/"), i / 10)
    assert rig.frontier.lease(1.0, full=True) == Wait(1.0 + FULL_RECHECK)
    table: HostTable = rig.raw._table
    assert sorted(table.held_heap) == [(i / 10, f"h{i}.held.test") for i in range(3)] and not table.heap
    table.unschedule("h1.held.test")  # e.g. dropped by the cut: its held entry is stale
    table._rebuild_heaps()
    assert table.held_heap == [(0.0, "h0.held.test"), (0.2, "h2.held.test")] and not table.heap
    assert table.scheduled == {"h0.held.test": 0.0, "h2.held.test": 0.2}
    got = rig.frontier.lease(1.0)
    assert isinstance(got, Lease) and got.host == "h0.held.test"


def test_full_a_warm_https_host_behind_a_cold_one_is_leased_not_held(tmp_path: Path) -> None:
    """leasing.py rules 6 and 11: the warm host taken past a cold one at the heap's head keeps its
    connection's turn while full; nothing is held back on its way (the cold host is not looked at)."""
    rig = Rig(tmp_path, cfg=MIXED)
    rig.frontier.add_seed(canon("https://warm.test/"), 0.0)
    robots = rig.frontier.lease(0.0)
    assert isinstance(robots, Lease)
    rig.complete_robots(robots, 0.0)
    rig.frontier.add_seed(canon("https://cold.test/"), 0.5)
    got = rig.frontier.lease(2.0, prefer_warm=True, full=True)
    assert isinstance(got, Lease) and got.host == "warm.test"
    assert rig.raw._table.held_heap == []


def test_full_no_host_out_of_memory_is_read_in(tmp_path: Path) -> None:
    """leasing.py rule 11: while full, the refill of the working set (host_table.py rule 7) waits: the hosts
    it read in would be held back, and filled memory, whose cut then dropped the hosts in rotation."""
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1.0),
                                   frontier=FrontierConfig(working_hosts=100)))
    for i in range(300):
        rig.frontier.add_seed(canon(f"https://h{i}.out.test/"), 0.0)
    rig.frontier.commit()
    table: HostTable = rig.raw._table
    in_memory = len(table.hosts)
    assert in_memory < 300
    assert isinstance(rig.frontier.lease(1.0, full=True), Wait)
    assert len(table.hosts) == in_memory and len(table.held_heap) == in_memory
    got = rig.frontier.lease(1.0)
    assert isinstance(got, Lease)
