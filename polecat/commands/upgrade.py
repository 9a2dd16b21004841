"""``polecat upgrade DIR``: bring a data dir written by an earlier release up to this one, in place, and
say what that did.

Opening a data dir does the same upgrades (a resumed crawl starts with them); this command does them
without crawling, so that the time they take and what they changed are seen before the crawl resumes.
Each step commits whole or not at all (polecat/frontier/db.py): a kill part-way leaves the old state or
the new one, and running the command again goes on from there. Every node dir of a ``--workers`` crawl
is upgraded (polecat/cluster/layout.py).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polecat.commands import saved_settings
from polecat.config import Config, config_from_mapping
from polecat.errors import PolecatError

if TYPE_CHECKING:
    from polecat.node.crawler import Opened


def cmd_upgrade(args: argparse.Namespace) -> int:
    from polecat.cluster.layout import node_dirs, recorded_workers, worker_config
    from polecat.store.segments import check_unlocked
    from polecat.version import __version__

    data: Path = args.dir
    if not (data / "frontier").exists() and recorded_workers(data) is None:
        raise PolecatError(f"upgrade: {data} holds no crawl (no frontier, no workers)")
    cfg = config_from_mapping({**saved_settings.load(data), "data_dir": str(data)})
    workers = recorded_workers(data)
    for k, node in enumerate(node_dirs(data)):
        check_unlocked(node / "store")  # else opening its frontier to write waits for the running crawl
        node_cfg = worker_config(cfg, k, workers) if workers is not None else cfg
        print(f"{node}: " + "; ".join(asyncio.run(_upgrade(node_cfg))))
    print(f"{data} is ready for polecat {__version__}")
    return 0


async def _upgrade(cfg: Config) -> list[str]:
    """Open one node dir (which upgrades it) and close it with a commit; what was done, in words."""
    from polecat.node.crawler import Crawler

    async with Crawler(cfg, upgrade=True) as crawler:
        done = crawler.opened
    return describe(done) or ["already up to date"]


def describe(done: Opened) -> list[str]:
    """What opening a data dir upgraded, one phrase per step ([] when nothing was)."""
    lines = []
    if done.schema is not None:
        s = done.schema
        lines.append(f"frontier keys rewritten slice-first ({s.hosts} hosts, {s.queued} queued, {s.urls} "
                     f"done, {s.seen} seen URLs, {s.robots} robots answers, {s.ops} operator settings; "
                     f"{s.unplaced_seen} seen fingerprints with no URL not carried over)")
    if done.near_dropped is not None:
        lines.append(f"near-duplicate index of an older fingerprint format dropped ({done.near_dropped} "
                     f"entries)")
    if done.reindexed or done.near_dropped is not None:
        lines.append(f"{done.reindexed} stored page(s) entered into the near-duplicate index")
    if done.near_left:
        lines.append(f"{done.near_left} store records left to index, in the background as the crawl runs "
                     "(`polecat upgrade` indexes them at once)")
    return lines


def register(sub: Any) -> None:
    """Add ``upgrade`` to the ``polecat`` command."""
    p = sub.add_parser("upgrade", help="upgrade a data dir written by an earlier release, in place")
    p.add_argument("dir", type=Path, metavar="DIR", help="the crawl's data dir")
    p.set_defaults(func=cmd_upgrade)
