"""``polecat upgrade DIR`` on the effc808 release fixture: what it reports, and a kill -9 at any point of
it leaves the old state or the new one, from which the next run finishes the upgrade.

The kill is real (SIGKILL of the upgrading process) and placed, not timed: a wrapper process runs the
command with one hook that kills itself on entering the N-th frontier commit's wait (the commit may be
on its way on the writer thread) or on the N-th near-duplicate index entry of the re-index.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from polecat.config import Config, config_from_mapping
from polecat.errors import FrontierError
from polecat.frontier.db import NEAR_REBUILD, FrontierDB
from polecat.frontier.opener import FRONTIER_PARAMS
from polecat.frontier.status import read_status
from polecat.node import commits
from polecat.node.crawler import Crawler
from polecat.store.segments import lock_writer
from polecat.version import __version__
from tests.crawl_helpers import page_requests
from tests.release_fixtures import USER_AGENT, copy_fixture, serving

STORED_PAGES = 25
"""HTML pages the effc808 fixture stored whole (revisits and robots.txt excluded): each gets one
near-duplicate record (polecat/dedup/nearindex.py)."""

_KILLER = """
import os, signal, sys
from polecat.commands.main import main
from polecat.frontier.db import FrontierDB
from polecat.node.pipeline import PagePipeline

where, n = sys.argv[1], int(sys.argv[2])
calls = 0

def hook(real):
    def wrapped(*args, **kwargs):
        global calls
        calls += 1
        if calls == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return wrapped

if where == "commit":
    FrontierDB.finish_commit = hook(FrontierDB.finish_commit)
else:
    PagePipeline._index = hook(PagePipeline._index)
sys.exit(main(["upgrade", sys.argv[3]]))
"""


def _upgrade(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", "upgrade", str(data)], capture_output=True,
                          text=True, timeout=60)


def _near_records(data: Path) -> int:
    env = lmdb.open(str(data / "frontier"), readonly=True, lock=False, max_dbs=16, subdir=True)
    try:
        near = env.open_db(b"near", create=False, dupsort=True)
        with env.begin() as txn, txn.cursor(db=near) as cur:
            return sum(1 for key in cur.iternext(keys=True, values=False) if bytes(key)[:1] == b"\xff")
    finally:
        env.close()


def _assert_upgraded(data: Path) -> None:
    s = read_status(data / "frontier")
    assert (s.queued, s.seen_urls, dict(s.done)) == (28, 59, {"fetched": 30, "skipped:robots": 1})
    assert s.releases == (__version__,)
    assert _near_records(data) == STORED_PAGES


def test_upgrade_reports_what_it_did_then_nothing(tmp_path: Path) -> None:
    data = copy_fixture("effc808", tmp_path / "data")
    first = _upgrade(data)
    assert first.returncode == 0, first.stderr
    assert "frontier keys rewritten slice-first (3 hosts, 28 queued, 31 done, 59 seen URLs" in first.stdout
    assert "near-duplicate index of an older fingerprint format dropped (125 entries)" in first.stdout
    assert f"{STORED_PAGES} stored page(s) entered into the near-duplicate index" in first.stdout
    _assert_upgraded(data)
    again = _upgrade(data)
    assert again.returncode == 0 and "already up to date" in again.stdout, again.stdout + again.stderr


def test_upgrade_goes_through_every_worker_of_a_workers_layout(tmp_path: Path) -> None:
    data = copy_fixture("0.2.0", tmp_path / "data")
    run = _upgrade(data)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"{data / 'workers' / '0'}: already up to date",
                                       f"{data / 'workers' / '1'}: already up to date",
                                       f"{data} is ready for polecat {__version__}"]


def test_upgrade_of_a_dir_a_crawl_holds_is_refused_at_once(tmp_path: Path) -> None:
    data = copy_fixture("effc808", tmp_path / "data")
    held = lock_writer(data / "store")  # as a running crawl holds it
    try:
        run = _upgrade(data)
    finally:
        os.close(held)
    assert run.returncode == 1 and "open for writing by another process" in run.stderr, run.stderr
    assert _upgrade(data).returncode == 0


def test_upgrade_of_a_dir_without_a_crawl_is_refused(tmp_path: Path) -> None:
    run = _upgrade(tmp_path)
    assert run.returncode == 1 and "holds no crawl" in run.stderr, run.stderr


@pytest.mark.parametrize(("where", "n"), [("commit", 1), ("commit", 2), ("commit", 3), ("index", 10)])
def test_kill_9_mid_upgrade_leaves_old_or_new_and_the_next_run_finishes(tmp_path: Path, where: str,
                                                                         n: int) -> None:
    data = copy_fixture("effc808", tmp_path / "data")
    killed = subprocess.run([sys.executable, "-c", _KILLER, where, str(n), str(data)], capture_output=True,
                            text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    try:  # the old state (schema 1, refused by the reader with the command to run), the schema 3 of the
        # first upgrade commit, the schema 4 of the packing (its own commit: db.py rule 10; schema 5's
        # numbering commits on its own too, rule 13), or the new one
        s = read_status(data / "frontier")
        assert (s.queued, s.seen_urls) == (28, 59)
    except FrontierError as exc:
        assert re.search("schema [134];", str(exc)) and "polecat upgrade" in str(exc), exc
    done = _upgrade(data)
    assert done.returncode == 0, done.stderr
    _assert_upgraded(data)


def _fixture_config(data: Path, dns: str) -> Config:
    """The effc808 fixture's crawl resumed against its site, as tests/test_release_fixtures.py does."""
    return config_from_mapping({
        "data_dir": str(data), "dedup": {"expected_urls": 2000}, "frontier": {"commit_ms": 100.0},
        "scope": {"mode": "host"}, "politeness": {"rate": 20.0}, "fetch": {"user_agent": USER_AGENT},
        "dns": {"nameservers": [dns], "allow_private": True}})


async def test_a_costly_rebuild_runs_in_the_background_as_the_crawl_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Past the bound, opening indexes nothing (start-up is not held up); the records are indexed a batch
    at a time while the crawl fetches, counted down, and the next open owes nothing."""
    data = copy_fixture("effc808", tmp_path / "data")
    monkeypatch.setattr(commits, "AUTO_REBUILD_RECORDS", 5)
    monkeypatch.setattr(commits, "REBUILD_BATCH", 3)
    with serving() as web, caplog.at_level(logging.INFO, logger="polecat"):
        cfg = _fixture_config(data, web.dns_address)
        async with Crawler(cfg) as crawler:
            opened = crawler.opened
            assert opened.near_dropped == 125 and opened.reindexed == 0 and opened.near_left > STORED_PAGES
            assert crawler.stats().near_rebuild_left == opened.near_left
            stats = await asyncio.wait_for(crawler.run(), 120)
        fetched = page_requests(web)
    assert stats.near_rebuild_left == 0 and fetched  # indexed while pages were fetched
    assert f"{opened.near_left} store records of an older fingerprint format are indexed in the background" \
        in caplog.text
    assert f"{STORED_PAGES} stored page(s) indexed in the background" in caplog.text
    assert _near_records(data) >= STORED_PAGES  # the release's pages, and those of this run
    async with Crawler(cfg) as crawler:
        assert (crawler.opened.reindexed, crawler.opened.near_left) == (0, 0)


_BACKGROUND_KILLER = """
import os, signal, sys, time
from polecat.commands.main import main
from polecat.frontier.db import FrontierDB
from polecat.node import commits
from polecat.node.pipeline import PagePipeline

commits.AUTO_REBUILD_RECORDS, commits.REBUILD_BATCH = 5, 1
batches = commits_after = 0
reindex, finish_commit = PagePipeline.reindex, FrontierDB.finish_commit

def slow_batch(self, records):
    global batches
    if commits_after >= int(sys.argv[1]):  # killed in a batch, that many commits after the first
        os.kill(os.getpid(), signal.SIGKILL)
    batches += 1
    time.sleep(0.15)  # a batch of a big store: commits (log appends, fsynced) come between batches
    return reindex(self, records)

def counted(self, *args, **kwargs):
    global commits_after
    after = batches > 0
    result = finish_commit(self, *args, **kwargs)
    commits_after += after
    return result

PagePipeline.reindex, FrontierDB.finish_commit = slow_batch, counted
sys.exit(main(["crawl", "--data", sys.argv[2], "--dns-server", sys.argv[3], "--allow-private", "--rate", "2",
               "-q"]))
"""


def _rebuild_cursor(data: Path) -> int | None:
    """The cursor as the last commit left it: the frontier's open replays its log onto what the LMDB
    holds (polecat/frontier/db.py rule 7)."""
    db = FrontierDB(data / "frontier", map_size=1 << 30, params=FRONTIER_PARAMS)
    try:
        raw = db.get("meta", NEAR_REBUILD)
        return None if raw is None else int(raw)
    finally:
        db.close()


@pytest.mark.parametrize("commits_after", [1, 3])
def test_kill_9_mid_background_rebuild_keeps_what_was_committed_and_the_next_run_finishes_it(
        tmp_path: Path, commits_after: int) -> None:
    data = copy_fixture("effc808", tmp_path / "data")
    with serving() as web:
        killed = subprocess.run([sys.executable, "-c", _BACKGROUND_KILLER, str(commits_after), str(data),
                                 web.dns_address], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    cursor = _rebuild_cursor(data)
    assert cursor is not None and cursor > 0  # from 0: the batches committed before the kill are kept
    done = _upgrade(data)  # from there on
    assert done.returncode == 0, done.stderr
    indexed = int(done.stdout.split(" stored page(s) entered")[0].rsplit(" ", 1)[-1])
    assert indexed < STORED_PAGES, done.stdout  # not from scratch
    assert _rebuild_cursor(data) is None and _near_records(data) >= STORED_PAGES
    assert "already up to date" in _upgrade(data).stdout
