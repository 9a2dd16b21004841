"""``polecat upgrade DIR`` on the effc808 release fixture: what it reports, and a kill -9 at any point of
it leaves the old state or the new one, from which the next run finishes the upgrade.

The kill is real (SIGKILL of the upgrading process) and placed, not timed: a wrapper process runs the
command with one hook that kills itself on entering the N-th frontier commit's wait (the commit may be
on its way on the writer thread) or on the N-th near-duplicate index entry of the re-index.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from polecat.config import config_from_mapping
from polecat.errors import FrontierError
from polecat.frontier.status import read_status
from polecat.node import commits
from polecat.node.crawler import Crawler
from polecat.store.segments import lock_writer
from tests.release_fixtures import copy_fixture

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
    assert s.releases == ("0.2.0",)
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
                                       f"{data} is ready for polecat 0.2.0"]


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
    try:  # the old state (schema 1, refused by the reader with the command to run) or a new one
        s = read_status(data / "frontier")
        assert (s.queued, s.seen_urls) == (28, 59)
    except FrontierError as exc:
        assert "schema 1" in str(exc) and "polecat upgrade" in str(exc)
    done = _upgrade(data)
    assert done.returncode == 0, done.stderr
    _assert_upgraded(data)


async def test_a_costly_rebuild_waits_for_the_command_and_the_crawl_opens_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    data = copy_fixture("effc808", tmp_path / "data")
    cfg = config_from_mapping({"data_dir": str(data), "dedup": {"expected_urls": 2000}})
    monkeypatch.setattr(commits, "AUTO_REBUILD_RECORDS", 5)
    with caplog.at_level(logging.WARNING, logger="polecat"):
        async with Crawler(cfg) as crawler:
            opened = crawler.opened
    assert opened.near_dropped == 125 and opened.reindexed == 0 and opened.near_left > STORED_PAGES
    assert f"{opened.near_left} store records of an older fingerprint format are not indexed" in caplog.text
    assert f"`polecat upgrade {data}` indexes them" in caplog.text
    assert _near_records(data) == 0
    async with Crawler(cfg) as crawler:  # still owed at the next open
        assert crawler.opened.near_left == opened.near_left
    async with Crawler(cfg, upgrade=True) as crawler:
        assert (crawler.opened.reindexed, crawler.opened.near_left) == (STORED_PAGES, 0)
    async with Crawler(cfg) as crawler:
        assert (crawler.opened.reindexed, crawler.opened.near_left) == (0, 0)
    _assert_upgraded(data)
