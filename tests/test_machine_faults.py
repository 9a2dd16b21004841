"""Faults of the machine (issue 10): a full disk or a full LMDB map stops the node with a message naming
the cause and the path, nothing is recorded done that was not stored, and a resume after the fault is
fixed fetches every page."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from polecat import Crawler
from polecat.config import Config
from polecat.errors import PolecatError
from polecat.frontier.db import TABLES, FrontierDB
from polecat.frontier.opener import FRONTIER_PARAMS
from polecat.frontier.records import UrlRecord
from polecat.store.segstore import open_store
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs (root only; skipped with the reason where mounting is not permitted)."""
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _done_urls(cfg: Config) -> dict[str, str]:
    """URL -> outcome of every URL the committed frontier records as done: its LMDB and the commits of
    its write-ahead log after it (polecat/frontier/db.py rule 7), read without writing (copied first:
    an open replays the log, and its close may commit it)."""
    copy = Path(tempfile.mkdtemp(prefix="frontier-read-")) / "frontier"  # off the small disk
    shutil.copytree(cfg.data_dir / "frontier", copy)
    db = FrontierDB(copy, map_size=256 << 20, params=FRONTIER_PARAMS, writemap=False)
    try:
        recs = [UrlRecord.decode(raw) for _, raw in db.items("urls")]
    finally:
        db.close()
        shutil.rmtree(copy.parent)
    return {r.url: f"{r.outcome}:{r.reason}" for r in recs}


def _stored_urls(cfg: Config) -> set[str]:
    store = open_store(cfg.data_dir / "store", cfg.store, read_only=True)
    try:
        return {rec.url for rec in store.records()}
    finally:
        store.close()


def _run(cfg: Config) -> None:
    async def go() -> None:
        async with Crawler(cfg) as crawler:
            await asyncio.wait_for(crawler.run(), 120)

    asyncio.run(go())


def test_full_disk_stops_the_node_and_a_resume_fetches_every_page(test_web: TestWebFactory,
                                                                   small_disk: Path) -> None:
    web = test_web(SiteSpec(hosts=4, pages_per_host=40, page_bytes=200_000, seed=3))
    cfg = crawl_config(web, small_disk / "data", politeness={"rate": 100.0},
                       frontier={"map_size": 16 << 20}, dedup={"expected_urls": 10_000})
    with pytest.raises(PolecatError, match="disk full") as info:
        _run(cfg)
    assert str(small_disk) in str(info.value)  # names the path
    done = _done_urls(cfg)
    stored = _stored_urls(cfg)
    assert done, "something was committed before the disk filled"
    assert not [u for u, o in done.items() if "internal" in o]
    recorded_not_stored = {u for u, o in done.items() if o.startswith(("fetched", "redirect"))} - stored
    assert recorded_not_stored == set()

    subprocess.run(["mount", "-o", "remount,size=200m", str(small_disk)], check=True)
    _run(cfg)
    truth = web.ground_truth("host")
    assert set(page_requests(web)) >= truth
    assert truth <= _stored_urls(cfg)


def test_full_frontier_map_names_the_setting_and_a_resume_completes(test_web: TestWebFactory,
                                                                     tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=4, pages_per_host=60, seed=4))
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 100.0}, frontier={"map_size": 16 << 20})
    # Ballast in a table of its own leaves the 16 MiB map a few hundred KiB for the crawl.
    (cfg.data_dir / "frontier").mkdir(parents=True)
    env = lmdb.open(str(cfg.data_dir / "frontier"), map_size=16 << 20, max_dbs=len(TABLES) + 2)
    ballast = env.open_db(b"ballast")
    with env.begin(write=True) as txn:
        for i in range(4_020):
            txn.put(i.to_bytes(4, "big"), bytes(4_000), db=ballast)
    env.close()
    with pytest.raises(PolecatError, match="LMDB map full") as info:
        _run(cfg)
    assert "frontier.map_size" in str(info.value) and str(cfg.data_dir / "frontier") in str(info.value)
    done = _done_urls(cfg)
    assert done, "the crawl made progress before the map filled"
    assert {u for u, o in done.items() if o.startswith("fetched")} <= _stored_urls(cfg)
    _run(dataclasses.replace(cfg, frontier=dataclasses.replace(cfg.frontier, map_size=64 << 20)))
    assert web.ground_truth("host") <= _stored_urls(cfg)
