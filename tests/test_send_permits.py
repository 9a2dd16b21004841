"""Requests under a send permit (polecat/cluster/ownership.py rule 10; polecat/node/lease_runner.py rules
6-7): a gate asked just before the bytes go out, and an abort of what is in flight when the permit ends.
Fake clock, fake fetcher, no sockets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import NamedTuple

from polecat import Crawler
from polecat.cluster.batch import Batch
from polecat.cluster.handoff import Handoff
from polecat.cluster.link import ClusterLink, SendLeave
from polecat.cluster.membership import Member
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver
from polecat.config import config_from_mapping
from polecat.errors import PolecatError
from polecat.frontier.slices import SLICES
from polecat.testing.cluster import FakeMembership, FakeTransport
from polecat.testing.fakes import Canned, FakeClock, FakeFetcher, MemoryPageStore

ROBOTS = "http://a.test/robots.txt"
PAGES = {ROBOTS: Canned(200, b"User-agent: *\n"), "http://a.test/": Canned(200, b"a")}
RATE = 2.0
"""One request every 0.5 s to a host (the interval an aborted request makes its host wait)."""


async def _refuse(batch: Batch) -> None:
    raise PolecatError("no hand-offs in this test")


class Permits:
    """The cluster node's side, played by the test: leave to send is ``open`` at the time it is asked."""

    def __init__(self) -> None:
        self.open = True
        self.asked: list[str] = []

    def permit(self, host: str) -> SendLeave | None:
        self.asked.append(host)
        return SendLeave(lambda: self.open, lambda: self.open) if self.open else None


class Rig(NamedTuple):
    crawler: Crawler
    fetcher: FakeFetcher
    permits: Permits
    clock: FakeClock


async def until(clock: FakeClock, check: Callable[[], bool], what: str) -> None:
    """Wait for ``check``, the fake clock moving 5 ms a turn (politeness waits pass)."""
    for _ in range(2000):  # bounded: 2000 turns
        if check():
            return
        clock.advance(0.005)
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")  # pragma: no cover


@contextlib.asynccontextmanager
async def crawling(tmp_path: Path, *, connecting: asyncio.Event | None = None,
                   answering: asyncio.Event | None = None) -> AsyncIterator[Rig]:
    """A member crawling ``a.test`` under the test's permits, its requests held where the test says."""
    clock = FakeClock(tick=0.0005)
    fetcher = FakeFetcher(clock, dict(PAGES), connecting=connecting, answering=answering)
    permits = Permits()
    cfg = config_from_mapping({
        "data_dir": str(tmp_path), "scope": {"seeds": ["http://a.test/"], "mode": "host"},
        "politeness": {"rate": RATE}, "frontier": {"commit_ms": 20.0},
    })
    link = ClusterLink(FakeMembership("w1", [Member("w1", "unix:/tmp/w1.sock")]),
                       Handoff("w1", Outbox(tmp_path / "handoff"), FakeTransport({}), {}),
                       HandoffReceiver(_refuse), max_backlog=10**6)
    link.permit = permits.permit
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore(), link=link) as crawler:
        run = asyncio.create_task(crawler.run())
        try:
            yield Rig(crawler, fetcher, permits, clock)
        finally:
            crawler.stop()
            await asyncio.wait_for(run, 30)


async def test_a_gate_that_closes_during_the_connect_sends_nothing_and_keeps_the_url(tmp_path: Path) -> None:
    connecting = asyncio.Event()
    async with crawling(tmp_path, connecting=connecting) as (crawler, fetcher, permits, clock):
        frontier = crawler.frontier
        await until(clock, lambda: frontier.in_flight_in(range(SLICES)) == 1, "the robots.txt lease")
        # The fence falls while the request connects (a process frozen there wakes fenced).
        permits.open = False
        crawler.member.set_owned(frozenset())
        connecting.set()
        await until(clock, lambda: frontier.in_flight_in(range(SLICES)) == 0, "the lease withdrawn")
        assert fetcher.sent == [] and fetcher.calls == []
        assert frontier.queued == 1  # the seed waits for its host's owner
        # Owned again: the same URL goes out, once.
        permits.open = True
        crawler.member.set_owned(frozenset(range(SLICES)))
        await until(clock, lambda: "http://a.test/" in fetcher.calls, "the page after the fence lifted")
        assert fetcher.sent == [ROBOTS, "http://a.test/"]


async def test_a_request_in_flight_whose_permit_ends_is_aborted_and_its_host_waits_an_interval(
        tmp_path: Path) -> None:
    answering = asyncio.Event()
    async with crawling(tmp_path, answering=answering) as (crawler, fetcher, permits, clock):
        frontier, member = crawler.frontier, crawler.member
        await until(clock, lambda: fetcher.sent == [ROBOTS], "the robots.txt request in flight")
        assert member.abort_unpermitted() == 0  # its permit holds: it goes on
        permits.open = False  # the fence
        member.set_owned(frozenset())
        aborted_at = clock.wall()
        assert member.abort_unpermitted() == 1
        await until(clock, lambda: frontier.in_flight_in(range(SLICES)) == 0, "the lease withdrawn")
        assert fetcher.calls == []  # no response was taken in: nothing recorded
        state = frontier.host_state("a.test")
        assert state is not None and state.next_allowed >= aborted_at + 1 / RATE  # it may have arrived
        assert frontier.queued == 1
        # The slice comes back: robots.txt and the page are fetched, each once more.
        permits.open = True
        answering.set()
        member.set_owned(frozenset(range(SLICES)))
        await until(clock, lambda: "http://a.test/" in fetcher.calls, "the page after the abort")
        assert fetcher.sent == [ROBOTS, ROBOTS, "http://a.test/"]
        assert crawler.stats().politeness_violations == 0
