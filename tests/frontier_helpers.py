"""Building a frontier on a temp dir (or in memory) with a fake clock, for the sans-IO frontier tests."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from polecat.config import Config, PolitenessConfig
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.seen import SeenSet
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.keys import host_of_row, queue_key_num
from polecat.frontier.opener import log_options
from polecat.frontier.politeness import Attempt, HostState
from polecat.frontier.records import Completion, Lease, Outcome, QueuedUrl, RobotsOutcome, decode_host
from polecat.frontier.robots import RobotsPolicy
from polecat.testing.fakes import MemoryFrontierDB
from polecat.writes import Decided, Delete, DeleteSlices, Put

BACKEND = "lmdb"
"""The database under the rigs a test builds: ``"lmdb"`` (a :class:`FrontierDB` in the rig's path) or
``"memory"`` (a :class:`MemoryFrontierDB`). The ``frontier_backend`` fixture (tests/conftest.py) sets it."""

CANON = Canonicalizer()


def canon(url: str) -> str:
    c = CANON.canonicalize(url)
    assert c is not None
    return c


class Applying:
    """A frontier whose decisions are applied as they are made, as the node does with each call: a
    :class:`Decided` answers its value once its writes are applied, a list of writes is applied; reads
    pass through. The frontier itself is :attr:`raw` (tests of the writes a decision returns use it)."""

    def __init__(self, frontier: Frontier, db: FrontierDB | MemoryFrontierDB) -> None:
        self.raw = frontier
        self._db = db

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.raw, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            got = attr(*args, **kwargs)
            if isinstance(got, Decided):
                return self._db.applied(got)
            if isinstance(got, list) and got and all(isinstance(w, Put | Delete | DeleteSlices) for w in got):
                self._db.apply(got)
                return None
            return got

        return call


@dataclass
class Rig:
    """A frontier over a real LMDB in ``path`` (or over :class:`MemoryFrontierDB`, see :data:`BACKEND`),
    its robots policy, and helpers to drive it."""

    path: Path
    cfg: Config = field(default_factory=lambda: Config(scope=replace(Config().scope, mode="any")))
    seed: int = 0
    now: float = 0.0
    """The wall-clock time the frontier is (re)opened at."""
    params: dict[str, object] = field(default_factory=lambda: {"t": 1})
    backend: str = field(default_factory=lambda: BACKEND)

    def __post_init__(self) -> None:
        self.memory = MemoryFrontierDB()
        """The memory backend's database: it outlives a crash, as the path does."""
        self.open()

    def open(self) -> None:
        self.db: FrontierDB | MemoryFrontierDB
        if self.backend == "memory":
            self.db = self.memory
            self.seen = SeenSet.rebuild((key for key, _ in self.db.items("seen")), self.db.count("seen"),
                                        10_000, 0.01)
        else:
            self.db = FrontierDB(self.path / "frontier", map_size=1 << 28, params=self.params,
                                 **log_options(self.cfg.frontier))
            self.seen = SeenSet.restore(self.db.seen_keys, self.db.count("seen"), self.path / "seen.bloom",
                                        self.db.seq, 10_000, 0.01, self.db.seen_keys_after)
        self.robots = RobotsPolicy(self.cfg.robots, self.cfg.fetch.user_agent)
        self.raw = Frontier(self.db, self.cfg, self.robots, self.seen, self.now, rng=random.Random(self.seed))
        self.frontier: Any = Applying(self.raw, self.db)
        """The frontier, each decision applied as made (:class:`Applying`)."""

    def crash(self) -> None:
        """Drop everything since the last commit, as kill -9 would."""
        self.db.close()

    def reopen(self, now: float = 0.0) -> None:
        self.now = now
        self.open()

    def complete_robots(self, lease: Lease, now: float, *, status: int = 200, body: bytes = b"",
                        duration: float = 0.01) -> None:
        assert lease.kind == "robots"
        result = replace(done(now, duration=duration, status=status), robots=RobotsOutcome(status, body))
        self.db.apply(self.raw.complete(lease, result, now + duration))

    def complete(self, lease: Lease, now: float, outcome: Outcome = "fetched", *, status: int = 200,
                 duration: float = 0.01, retry_after: float | None = None, failed: bool = False) -> None:
        self.db.apply(self.raw.complete(
            lease, done(now, duration=duration, status=status, retry_after=retry_after, failed=failed,
                        outcome=outcome), now + duration))


def done(now: float, *, duration: float = 0.01, status: int | None = 200, retry_after: float | None = None,
         failed: bool = False, outcome: Outcome = "fetched") -> Completion:
    headers_at = None if failed else now + duration / 2
    return Completion(Attempt(now, now + duration, headers_at, None if failed else status, retry_after,
                              failed), outcome, str(status))


def queued_urls_in(hosts: Iterable[tuple[bytes, bytes]], queue: Iterable[tuple[bytes, bytes]],
                   memory: Mapping[str, HostState] | None = None) -> list[str]:
    """The URLs of the ``queue`` rows ``queue``, named through the ``hosts`` rows ``hosts`` and the records
    in ``memory`` (a frontier's, not all written yet: a queue key holds its host's number,
    polecat/frontier/keys.py rule 1)."""
    names = {decode_host(raw).num: host_of_row(bytes(key)) for key, raw in hosts}
    names.update((st.num, host) for host, st in (memory or {}).items())
    return [QueuedUrl.decode(bytes(raw), bytes(key), names[queue_key_num(bytes(key))]).url
            for key, raw in queue]


def politeness(**kw: object) -> PolitenessConfig:
    return replace(PolitenessConfig(), **kw)  # type: ignore[arg-type]
