"""Objects the cyclic garbage collector tracks, kept alive per host (issue 39: a young pass of the
collector traverses every one of them, ~0.7 us each in a 1M-host breadth crawl). Counted, never timed:
polecat/frontier/host_table.py rule 19 (one heap entry a schedule), polecat/frontier/robots.py rule 9
(robots answers shared by the hosts whose rules are one object), polecat/frontier/outcomes.py rule 5 (a
failed robots.txt's error kept without its frames)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from polecat.config import Config, ScopeConfig
from polecat.errors import DnsError, FetchError
from polecat.frontier import robots
from polecat.frontier.outcomes import robots_failed
from polecat.frontier.records import Completion
from polecat.frontier.robots import Ready, RobotsPolicy
from polecat.writes import Write
from tests.frontier_helpers import Rig, canon, politeness

HOSTS = 300
AGENT = "polecat-test/1.0"


@pytest.mark.usefixtures("frontier_backend")
def test_a_host_scheduled_is_one_tuple_in_every_heap(tmp_path: Path) -> None:
    """host_table.py rule 19: 300 warm hosts not yet due are in the three heaps by 300 tuples, not 900,
    and so after the heaps are rebuilt (rule 18)."""
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1.0)))
    table = rig.raw._table
    hosts = [f"h{i}.gc.test" for i in range(HOSTS)]
    for i, host in enumerate(hosts):
        rig.frontier.add_seed(canon(f"http://{host}/"), 0.0)
        table.warm[host] = 0.0
        table.schedule(host, 100.0 + i)
    heaps = (table.heap, table.warm_heap, table.due_heap)
    for heap in heaps:  # the seeds' own entries (due at 0, not warm) are stale now (rule 2)
        heap[:] = [entry for entry in heap if entry[0] >= 100.0]
    assert [len(heap) for heap in heaps] == [HOSTS] * 3
    assert len({id(entry) for heap in heaps for entry in heap}) == HOSTS
    for host in hosts[::2]:  # scheduled again: each heap holds one stale entry more for it
        table.schedule(host, 50.0)
    assert len({id(entry) for heap in heaps for entry in heap}) == HOSTS + HOSTS // 2
    out: list[Write] = []
    # The latest due half is dropped: a quarter of the heap or more, so the heaps are rebuilt (rule 18).
    assert table._evict(HOSTS // 2, out) == HOSTS // 2
    assert [len(heap) for heap in heaps] == [HOSTS // 2] * 3  # the stale entries gone
    assert len({id(entry) for heap in heaps for entry in heap}) == HOSTS // 2


def ready_objects() -> int:
    gc.collect()
    return sum(type(o) is Ready for o in gc.get_objects())


def test_hosts_of_one_robots_txt_share_their_answers() -> None:
    """robots.py rule 9: 300 hosts with the same robots.txt, and 300 whose robots.txt is missing (404), make
    four answers (fresh and stale, two rules objects), not 1,200; lookups give those shared objects."""
    policy = RobotsPolicy(Config().robots, AGENT)
    before = ready_objects()
    for i in range(HOSTS):
        policy.record_response(f"a{i}.gc.test", 200, b"User-agent: *\nDisallow: /private\n", 0.0)
        policy.record_response(f"b{i}.gc.test", 404, b"", 0.0)
    assert ready_objects() - before == 4
    fresh = {id(policy.lookup(f"{kind}{i}.gc.test", 1.0)) for kind in "ab" for i in range(HOSTS)}
    stale = {id(policy.lookup(f"{kind}{i}.gc.test", 10**9)) for kind in "ab" for i in range(HOSTS)}
    assert len(fresh) == len(stale) == 2 and not fresh & stale
    answer = policy.lookup("a0.gc.test", 10**9)
    assert isinstance(answer, Ready) and answer.refresh_due
    assert not answer.rules.allowed("http://a0.gc.test/private")


def test_shared_answers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """robots.py rule 9: at most SHARED_ANSWERS rules objects have answers kept; hosts of distinct files
    past it still get answers of their own rules."""
    monkeypatch.setattr(robots, "SHARED_ANSWERS", 8)
    policy = RobotsPolicy(Config().robots, AGENT)
    for i in range(20):
        policy.record_response(f"h{i}.gc.test", 200, f"User-agent: *\nDisallow: /p{i}\n".encode(), 0.0)
    assert len(policy._answers) <= 8
    for i in range(20):
        answer = policy.lookup(f"h{i}.gc.test", 1.0)
        assert isinstance(answer, Ready) and not answer.rules.allowed(f"http://h{i}.gc.test/p{i}")
        assert answer.rules.allowed(f"http://h{i}.gc.test/p{i + 1}x")


class Marker:
    """An object a lease's frame holds, to see when that frame is freed."""


async def lookup(host: str) -> None:
    try:
        raise OSError(f"{host}: no such name")
    except OSError as exc:
        raise DnsError(f"{host}: lookup failed") from exc


async def robots_lease(host: str, held: list[weakref.ref[Marker]]) -> Completion:
    """The node's shape (lease_runner.py): the error caught in the lease's own frame, which holds the
    completion made of it."""
    marker = Marker()
    held.append(weakref.ref(marker))
    try:
        await lookup(host)
    except FetchError as exc:
        completion = robots_failed(0.0, 1.0, exc, None)
    return completion


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("collector_off")
def test_a_failed_robots_txt_leaves_no_cycle_for_the_collector() -> None:
    """outcomes.py rule 5: with the collector off, 200 robots.txt lookups that failed leave none of their
    leases' frames alive once their completions are dropped (a cycle through the traceback kept each),
    and the error kept still says what failed, with its cause."""
    held: list[weakref.ref[Marker]] = []

    async def crawl() -> list[Completion]:
        return [await robots_lease(f"h{i}.gc.test", held) for i in range(200)]

    completions = asyncio.run(crawl())
    error = completions[0].robots.error if completions[0].robots is not None else None
    assert isinstance(error, DnsError) and error.__traceback__ is None
    assert str(error) == "h0.gc.test: lookup failed" and error.kind == "dns"
    assert isinstance(error.__cause__, OSError) and error.__cause__.__traceback__ is None
    del completions, error
    assert sum(ref() is not None for ref in held) == 0


@pytest.mark.usefixtures("frontier_backend")
def test_host_keys_with_a_port_are_listed_untracked(tmp_path: Path) -> None:
    """host_table.py rule 21: 300 hosts with a port in memory are listed under their names (rule 13)
    by objects the collector does not track once it has met them (a list each was tracked for life)."""
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1.0)))
    table = rig.raw._table
    for i in range(HOSTS):
        rig.frontier.add_seed(canon(f"http://h{i}.gc.test:8080/"), 0.0)
        rig.frontier.add_seed(canon(f"http://h{i}.gc.test:8081/"), 0.0)
    gc.collect()
    assert len(table.ported) == HOSTS
    assert sorted(table.named("h7.gc.test")) == ["h7.gc.test:8080", "h7.gc.test:8081"]
    assert sum(map(gc.is_tracked, table.ported.values())) == 0
    table.forget(["h7.gc.test:8080"])
    assert table.named("h7.gc.test") == ["h7.gc.test:8081"]
    table.forget(["h7.gc.test:8081"])
    assert table.named("h7.gc.test") == [] and "h7.gc.test" not in table.ported
