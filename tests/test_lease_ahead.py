"""Leasing during an LMDB commit (polecat/node/commits.py rule 15, polecat/node/leases.py rule 7,
polecat/node/lease_runner.py rule 11, polecat/frontier/leasing.py rule 12): a node whose LMDB commit is
held on its writer thread still sends requests, counted, and at each host's pace, seen where the requests
arrive (the fetcher)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.fetch.http import Response
from polecat.frontier.records import Lease, Wait
from polecat.node.leases import AHEAD_SHARE, PARKED_BYTES, LeaseLoop
from polecat.node.run_state import RunCounters, Waker
from polecat.testing.fakes import Canned, FakeClock, FakeFetcher, MemoryPageStore
from polecat.writes import Decided
from tests.lease_fakes import AppliedAsIs, FreeCommits

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

RATE = 20.0
CONCURRENCY = 3
HOSTS = 40
HOLD_MOST = 5.0
"""Real seconds the test holds an LMDB commit at most, should the requests it waits for never come."""


class RunningClock(FakeClock):
    """A fake clock that also runs with real time: a lease held until its host's time comes gets there
    without a reading moving it (the fetcher's :meth:`advance` still adds to it)."""

    def monotonic(self) -> float:
        return super().monotonic() + time.monotonic()


class ArrivalsFetcher(FakeFetcher):
    """Notes when each request arrives, per host, on the crawl's clock."""

    def __init__(self, clock: FakeClock, pages: dict[str, Canned]) -> None:
        super().__init__(clock, pages)
        self.arrivals: dict[str, list[float]] = defaultdict(list)

    def respond(self, url: str) -> Response:
        self.arrivals[url.split("/")[2]].append(self.clock.wall())
        return super().respond(url)


def page(*links: str, text: str) -> Canned:
    anchors = "".join(f'<a href="{u}">link</a>' for u in links)
    return Canned(200, f"<html><body><p>{text}</p>{anchors}</body></html>".encode())


async def test_requests_go_on_during_an_lmdb_commit_at_each_hosts_pace(tmp_path: Path) -> None:
    hosts = [f"h{i}.test" for i in range(HOSTS)]
    pages = {f"http://{h}/": page(*(f"/p{j}" for j in range(6)), text=f"root of {h}") for h in hosts}
    pages |= {f"http://{h}/p{j}": page(text=f"page {j} of {h}") for h in hosts for j in range(6)}
    cfg = config_from_mapping({
        "data_dir": str(tmp_path), "scope": {"seeds": [f"http://{h}/" for h in hosts], "mode": "host"},
        "politeness": {"rate": RATE}, "fetch": {"concurrency": CONCURRENCY},
        "frontier": {"commit_ms": 20.0},
    })
    clock = RunningClock()
    fetcher = ArrivalsFetcher(clock, pages)
    holding = threading.Event()
    """Set on the loop as the held LMDB commit starts, cleared on the writer thread as it is let go."""
    started: list[str] = []
    """The URLs of the leases the node started while the LMDB commit was held."""
    taken: list[str] = []
    """Those of them the held commit waited for (a lease started as it is let go is not)."""
    arrived: list[str] = []
    """The requests that arrived meanwhile."""
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        db: Any = crawler._db
        db.log_bytes = 0  # every commit an LMDB commit (db.py rule 6)
        start_lmdb, commit_txn = db._start_lmdb_commit, db._writer._commit
        runner: Any = crawler._loop._runner
        run = runner.run
        first = [0]

        def noted_run(lease: Lease) -> Any:
            if holding.is_set():
                started.append(lease.url)
            return run(lease)

        def to_hold() -> bool:
            # One periodic LMDB commit, once the robots.txt requests are behind, is held.
            return bool(crawler._commits.periodic) and not arrived and len(fetcher.calls) >= 2 * HOSTS

        loop: Any = crawler._loop
        lease_ahead = loop.lease_ahead

        armed = [False]

        async def ahead_of_a_held_commit(seconds: float) -> None:
            # The commits before it, every one an LMDB commit here, took a few ms each (the hold rule 15
            # expects next): the held one is expected to take a second, as a 10M frontier's does.
            hold = to_hold()
            await lease_ahead(1.0 if hold else seconds)
            # On a loaded machine every host may still be in flight then (their completions applied in
            # steps after the last commit): nothing to take ahead, a later commit is held instead.
            armed[0] = hold and len(loop._held) >= CONCURRENCY

        def start_held(txn: Any) -> Any:
            # Held: a periodic commit that rule 15 leased ahead of (other LMDB commits are not its case).
            if armed[0] and to_hold():
                first[0] = len(fetcher.calls)
                holding.set()
            return start_lmdb(txn)

        def held_commit(*args: Any) -> Any:
            # On the writer thread, until the node started a slot's worth of leases and their requests
            # arrived, or HOLD_MOST.
            if holding.is_set():
                until, seen = time.monotonic() + HOLD_MOST, list(started)
                while time.monotonic() < until and not (
                        len(seen) >= CONCURRENCY and set(seen) <= set(fetcher.calls[first[0]:])):
                    time.sleep(0.002)
                    seen = list(started)
                taken.extend(seen)
                arrived.extend(fetcher.calls[first[0]:])
                holding.clear()
            return commit_txn(*args)

        runner.run = noted_run
        loop.lease_ahead = ahead_of_a_held_commit
        db._start_lmdb_commit = start_held
        db._writer._commit = held_commit
        stats = await crawler.run()
    # Without leases taken ahead the node starts none while the frontier is held.
    assert len(taken) >= CONCURRENCY and set(taken) <= set(arrived)
    assert stats.queued == 0 and stats.politeness_violations == 0
    assert len(fetcher.calls) == len(set(fetcher.calls)) == len(pages) + HOSTS  # each URL, robots.txt once
    for host, arrivals in fetcher.arrivals.items():
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        assert min(gaps) >= 1 / RATE - 1e-6, (host, gaps)


@dataclass
class AheadFrontier:
    """``now`` leases, then none (``Wait(None)``); a lease taken ahead is of a host due far later."""

    now: int
    paused: bool = False
    queued: int = 0
    made: list[str] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)

    def lease(self, now: float, *, prefer_warm: bool = False, full: bool = False,
              ahead: float = 0.0) -> Decided[Lease | Wait]:
        if not ahead and len(self.made) >= self.now:
            return Decided(Wait(None), [])
        self.made.append(url := f"http://h{len(self.made)}.test/")
        return Decided(Lease(url.split("/")[2], url, "page", not_before=now + (100.0 if ahead else 0.0)), [])

    def withdraw(self, lease: Lease, aborted_at: float | None = None, *,
                 hold_until: float | None = None) -> None:
        self.withdrawn.append(lease.url)




class NotedRunner:
    parked = parked_bytes = 0

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def run(self, lease: Lease) -> None:
        self.ran.append(lease.url)


async def test_leases_still_held_when_the_run_stops_are_withdrawn_and_are_no_fetches() -> None:
    """leases.py rule 7's end: the URLs of leases taken ahead and never started stay queued."""
    cfg = config_from_mapping({"data_dir": "/nonexistent", "fetch": {"concurrency": 4}})
    clock, stop, counters = FakeClock(tick=0.001), asyncio.Event(), RunCounters()
    frontier, commits, runner, waker = AheadFrontier(3), FreeCommits(), NotedRunner(), Waker(lambda: None)
    loop = LeaseLoop(cfg, frontier=frontier, db=AppliedAsIs(), commits=commits,  # type: ignore[arg-type]
                     runner=runner, waker=waker, counters=counters, link=None,  # type: ignore[arg-type]
                     clock=clock, stop=stop)
    running = asyncio.create_task(loop.run(serve=True))
    for _ in range(100):  # the loop's turns until it leased the three ready now
        await asyncio.sleep(0)
    assert runner.ran == frontier.made
    assert commits.lease_ahead is not None  # the run offers it (commits.py rule 15)
    await commits.lease_ahead(1.0)
    held = frontier.made[3:]
    assert len(held) == AHEAD_SHARE * 4 and counters.fetches == 3 + len(held)  # counted as fetches
    stop.set()
    waker.set()
    await running
    assert runner.ran == frontier.made[:3] and frontier.withdrawn == held and counters.fetches == 3
    assert commits.lease_ahead is None


async def test_parked_leases_free_their_slots_while_the_frontier_is_held_up_to_parked_bytes() -> None:
    """leases.py rule 7: a lease parked with its response (lease_runner.py rule 11) counts against the
    concurrency once the frontier is free, or while the parked responses hold over PARKED_BYTES."""
    cfg = config_from_mapping({"data_dir": "/nonexistent", "fetch": {"concurrency": 2}})
    commits, runner = FreeCommits(), NotedRunner()
    loop = LeaseLoop(cfg, frontier=AheadFrontier(0), db=AppliedAsIs(), commits=commits,  # type: ignore[arg-type]
                     runner=runner, waker=Waker(lambda: None), counters=RunCounters(),  # type: ignore[arg-type]
                     link=None, clock=FakeClock(), stop=asyncio.Event())
    loop.tasks = {asyncio.create_task(asyncio.sleep(0)) for _ in range(2)}
    runner.parked, runner.parked_bytes = 2, 1000
    assert not loop._slot_free()  # the frontier free: they go on
    commits.frontier_free.clear()
    assert loop._slot_free()
    runner.parked_bytes = PARKED_BYTES + 1
    assert not loop._slot_free()
    await asyncio.gather(*loop.tasks)
