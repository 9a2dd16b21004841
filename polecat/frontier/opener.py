"""Opening a data dir's frontier outside a running node: the same parts, in the same order, as a node.

A node (polecat/node/crawler.py) and a tool that moves slices between data dirs (export, adopt) both need the
frontier database, the seen-set restored over it, the robots policy and the :class:`Frontier` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polecat.config import Config, FrontierConfig
from polecat.dedup import minhash
from polecat.dedup.seen import SeenSet
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.politeness import robots_retry
from polecat.frontier.robots import RobotsPolicy

FRONTIER_PARAMS = {"url_fingerprint": "xxh3_128", "canon": 1, "near_index": minhash.FORMAT}
"""What must not change under existing data (checked at open; see FrontierDB)."""


@dataclass(slots=True)
class OpenedFrontier:
    """A data dir's frontier and what it is built on. :meth:`commit` then :meth:`close`."""

    db: FrontierDB
    seen: SeenSet
    robots: RobotsPolicy
    frontier: Frontier
    bloom_path: Path

    def commit(self) -> int:
        """Commit, with the seen-set's Bloom snapshot tagged by that commit (a crash between the two
        forces a rebuild on the next open, never a stale filter)."""
        self.seen.save(self.bloom_path, self.db.next_seq)
        return self.frontier.commit()

    def close(self) -> None:
        """Drop what is uncommitted and close the database."""
        self.db.close()


def log_options(fr: FrontierConfig) -> dict[str, Any]:
    """The :class:`FrontierDB` arguments of the write-ahead log and ``writemap`` (db.py rules 6, 11, 14)
    that ``fr`` sets."""
    return {"log_bytes": int(fr.log_mb * 2**20), "log_share": fr.log_share,
            "log_max_bytes": int(fr.log_max_mb * 2**20), "writemap": fr.writemap}


def open_frontier(cfg: Config, now: float) -> OpenedFrontier:
    """Open (or create) the frontier of ``cfg.data_dir`` at wall time ``now``."""
    data = cfg.data_dir
    data.mkdir(parents=True, exist_ok=True)
    db = FrontierDB(data / "frontier", map_size=cfg.frontier.map_size, params=FRONTIER_PARAMS,
                    **log_options(cfg.frontier))
    bloom_path = data / "seen.bloom"
    seen = SeenSet.restore(db.seen_keys, db.count("seen"), bloom_path, db.seq, cfg.dedup.expected_urls,
                           cfg.dedup.bloom_fp_rate, db.seen_keys_after)
    robots = RobotsPolicy(robots_retry(cfg.politeness, cfg.robots), cfg.fetch.user_agent)
    return OpenedFrontier(db, seen, robots, Frontier(db, cfg, robots, seen, now), bloom_path)
