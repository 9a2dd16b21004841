"""Leasing during an LMDB commit (polecat/node/commits.py rule 15, polecat/node/leases.py rule 7,
polecat/node/lease_runner.py rule 11, polecat/frontier/leasing.py rule 12): a node whose LMDB commit is
held on its writer thread still sends requests, counted, and at each host's pace, seen where the requests
arrive (the fetcher)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.fetch.http import Response
from polecat.frontier.records import Lease
from polecat.testing.fakes import Canned, FakeClock, FakeFetcher, MemoryPageStore

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

RATE = 20.0
CONCURRENCY = 3
HOSTS = 12
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

        def start_held(txn: Any) -> Any:
            # One periodic LMDB commit, once the robots.txt requests are behind, is held.
            if crawler._commits.periodic and not arrived and len(fetcher.calls) >= 2 * HOSTS:
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
