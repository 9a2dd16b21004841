"""The store flush that deposits ask for (polecat/node/commits.py rule 8): the store's alone, the
frontier's and the outbox's commits left to their own time (rule 3). Counted (flushes, frontier
commits, outbox commits), never timed."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest

from polecat.config import FrontierConfig
from polecat.frontier.db import FrontierDB
from polecat.node.commits import Commits
from polecat.testing.fakes import FakeClock
from polecat.writes import Write

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


class Store:
    """Counts its flushes."""

    def __init__(self) -> None:
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1

    def record_count(self) -> int:
        return 0


class Frontier:
    """A frontier with a change always pending (a crawl goes on), its commits counted."""

    pending_ops = 1

    def __init__(self) -> None:
        self.prepared = 0

    def prepare_commit(self) -> list[Write]:
        self.prepared += 1
        return []

    def late_writes(self) -> list[Write]:
        return []

    def rank_for_commit(self, most: int) -> bool:
        return True

    def rebuild_heaps_in_steps(self) -> None:
        pass

    def heaps_step(self) -> bool:
        return True


class Claims:
    """Deposits stored here, waiting for a store flush to be acknowledged (claims rule 12)."""

    def __init__(self) -> None:
        self.deposited = False
        self.acknowledged = asyncio.Event()
        self.flush_soon = lambda: None

    def flush_wanted(self) -> bool:
        return self.deposited

    def before_flush(self) -> dict[str, list[bytes]]:
        return {"peer": [b"first"]} if self.deposited else {}

    def after_flush(self, stored: dict[str, list[bytes]]) -> None:
        if stored:
            self.deposited = False
            self.acknowledged.set()


class Outbox:
    """The hand-off outbox, its commits counted."""

    def __init__(self) -> None:
        self.commits = 0

    def start_commit(self) -> Future[None]:
        self.commits += 1
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def finish_commit(self) -> None:
        return None


class Link:
    def __init__(self) -> None:
        self.claims = Claims()
        self.handoff = Outbox()


@pytest.fixture
def db(frontier_db: FrontierDB) -> FrontierDB:
    return frontier_db


async def test_deposits_are_acknowledged_after_a_store_flush_alone(db: FrontierDB) -> None:
    """Rule 8: a deposit's wake-up flushes the store and acknowledges it, and commits neither the
    frontier nor the outbox (a whole commit per gathered deposits was ~2x the commits of a crawl
    without claims); a whole commit still comes when one is asked for (rule 3)."""
    clock, store, frontier, link = FakeClock(), Store(), Frontier(), Link()
    commits = Commits(FrontierConfig(commit_ms=600_000), db=db, frontier=frontier,  # type: ignore[arg-type]
                      store=store, seen=None, bloom_path=None,  # type: ignore[arg-type]
                      link=link, clock=clock, fail=pytest.fail, wake=lambda: None)  # type: ignore[arg-type]
    commits._last_bloom_save = clock.wall()  # no Bloom snapshot in these commits
    seq = db.seq
    task = commits.start()
    try:
        for _ in range(3):  # three rounds of deposits, each gathered into one flush
            link.claims.deposited = True
            link.claims.flush_soon()
            link.claims.flush_soon()  # a second deposit shares the first one's flush
            await asyncio.wait_for(link.claims.acknowledged.wait(), 30)
            link.claims.acknowledged.clear()
        assert store.flushes == 3
        assert (db.seq, frontier.prepared, link.handoff.commits) == (seq, 0, 0)
        await asyncio.wait_for(commits.durable(), 30)  # a hand-off's wait, a checkpoint round
        assert store.flushes == 4
        assert (db.seq, frontier.prepared, link.handoff.commits) == (seq + 1, 1, 1)
    finally:
        commits.stop()
        await task
        commits.close()
