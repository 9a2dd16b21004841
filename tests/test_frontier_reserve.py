"""A full disk under the frontier's ``writemap`` LMDB (polecat/frontier/db.py rule 11, reserve.py): a clean
stop naming the cause, never a SIGBUS, and every commit made before it is there after more space."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lmdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.frontier import reserve
from polecat.frontier.db import FrontierDB
from polecat.writes import Put
from tests.test_frontier_schema6 import PARAMS
from tests.test_frontier_schema7 import unpack_v6

CHILD = textwrap.dedent("""
    import subprocess, sys
    from pathlib import Path
    from polecat.errors import PolecatError
    from polecat.frontier.db import FrontierDB
    from polecat.writes import Put

    mnt = Path(sys.argv[1])
    def opened():
        return FrontierDB(mnt / "f", map_size=1 << 30, params={}, log_bytes=1 << 20, writemap=True)
    db = opened()
    assert db.writemap
    committed = 0
    try:
        for i in range(10_000):
            db.apply([Put("queue", (i * 1000 + j).to_bytes(8, "big"), bytes(300)) for j in range(1000)])
            db.commit()
            committed = i + 1
    except PolecatError as exc:
        print("stopped:", exc, flush=True)
    db.close()
    try:  # still full: the open replays the log into blocks reserved before, or refuses
        opened().close()
        print("reopened", flush=True)
    except PolecatError as exc:
        print("refused:", exc, flush=True)
    subprocess.run(["mount", "-o", "remount,size=512m", str(mnt)], check=True)
    again = opened()
    print("committed", committed, "rows", again.count("queue"), flush=True)
    again.close()
""")


def test_a_full_disk_stops_a_writemap_frontier_cleanly_and_keeps_its_commits(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) to mount a small tmpfs without root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    probe = subprocess.run([unshare, "-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no user namespace to mount a tmpfs in: {probe.stderr.strip()}")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [unshare, "-rm", "sh", "-c",
         f'mount -t tmpfs -o size=40m tmpfs "{mnt}" && exec "{sys.executable}" "{script}" "{mnt}"'],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"rc {done.returncode} (SIGBUS is -7/135): {done.stdout}{done.stderr}"
    lines = done.stdout.splitlines()
    assert lines[0].startswith("stopped: disk full") and str(mnt / "f") in lines[0]
    assert lines[1] == "reopened" or lines[1].startswith(f"refused: disk full: cannot reserve disk space for "
                                                         f"the frontier in {mnt / 'f'}")
    _, committed, _, rows = lines[2].split()
    assert int(committed) > 0 and int(rows) == 1000 * int(committed)


def test_the_reservation_stays_ahead_of_the_pages_a_transaction_may_copy(tmp_path: Path) -> None:
    db = FrontierDB(tmp_path, map_size=1 << 30, params={}, log_bytes=1 << 30, writemap=True)
    try:
        for i in range(20):
            db.apply([Put("queue", (i * 1000 + j).to_bytes(8, "big"), bytes(300)) for j in range(1000)])
            bound = reserve.pages_bound(db.env, db.txn, db._trees) * db.env.stat()["psize"]
            db.commit(to_lmdb=i % 5 == 0)  # reserves for the transaction it commits, first
            assert db._reserve is not None and db._reserve.reserved >= bound + reserve.STEP
            assert (tmp_path / "data.mdb").stat().st_blocks * 512 >= bound
    finally:
        db.close()


def test_the_map_is_not_written_back_before_the_lmdb_commit(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """db.py rule 12: LMDB's commit writes into every page the transaction dirtied (it clears their dirty
    flags), so a page written back before it would reach the disk twice: no sync of the data file comes
    between two LMDB commits, however far the log grows towards the next."""
    synced: list[str] = []
    fdatasync = os.fdatasync

    def counted(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    db = FrontierDB(tmp_path, map_size=1 << 30, params={}, log_bytes=4 << 20, writemap=True)
    try:
        assert db.writemap
        at, sizes = db.lmdb_commit_at, []
        for i in range(60):
            db.apply([Put("hosts", (i * 100 + j).to_bytes(8, "big"), bytes(1000)) for j in range(100)])
            db.commit()
            sizes.append(db.wal.held)
        assert max(sizes) >= at * 3 // 4 and 0 in sizes  # past three quarters of the log, and LMDB commits
        assert [path for path in synced if path.endswith("data.mdb")] == []
    finally:
        db.close()


def _tree_pages(path: Path, names: list[bytes] | None) -> tuple[int, int]:
    """The data file's last page and the pages of the tables ``names`` (None: every table and the main
    one), read-only, before an open."""
    env = lmdb.open(str(path), max_dbs=32, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            tables = names if names is not None else [bytes(k) for k, _ in txn.cursor()]
            stats = [txn.stat(env.open_db(name, txn=txn, create=False)) for name in tables]
            if names is None:
                stats.append(txn.stat())
            pages = sum(st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"] for st in stats)
            return env.info()["last_pgno"], pages
    finally:
        env.close()


def test_the_upgrade_to_schema_7_reserves_two_more_copies_of_the_queue_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """db.py rule 21, reserve.py rule 4: main's schema-6 fixture is upgraded with ``writemap``; the most its
    open asks to reserve is one copy of every table and two more of ``queue`` (the table the upgrade
    rewrites), not three of every table, and that covered every page the upgrade wrote."""
    unpack_v6(tmp_path)
    frontier = tmp_path / "frontier"
    last, every = _tree_pages(frontier, None)
    _, queue = _tree_pages(frontier, [b"queue"])
    assert every > queue  # else the two bounds would be one
    asked: list[int] = []
    bound = reserve.pages_bound

    def recorded(*args: Any) -> int:
        asked.append(bound(*args))
        return asked[-1]

    monkeypatch.setattr(reserve, "pages_bound", recorded)
    db = FrontierDB(frontier, map_size=1 << 30, params=PARAMS, writemap=True)
    try:
        assert db.rekeyed is not None and db._reserve is not None
        assert max(asked) == (last + 1 + every + 2 * queue) * 65 // 64
        assert (db.env.info()["last_pgno"] + 1) * db.env.stat()["psize"] <= db._reserve.reserved
    finally:
        db.close()


def test_a_reservation_the_disk_cannot_hold_is_refused_before_fallocate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """reserve.py rule 5: ext4 keeps what a failed ``fallocate`` allocated, so a growth whose holes are more
    than the free space never reaches it: the file and the reservation stay as they were. One that fits
    is allocated."""
    path = tmp_path / "data.mdb"
    path.write_bytes(bytes(1 << 20))  # 1 MiB written, then 7 MiB of hole
    os.truncate(path, 8 << 20)
    held = reserve.DiskReserve(path)
    calls: list[tuple[int, int, int]] = []
    allocate = reserve.fallocate

    def counted(fd: int, offset: int, length: int) -> None:
        calls.append((fd, offset, length))
        allocate(fd, offset, length)

    monkeypatch.setattr(reserve, "fallocate", counted)
    free = 4 << 20
    real = os.fstatvfs
    monkeypatch.setattr(os, "fstatvfs", lambda fd: SimpleNamespace(f_bavail=free // real(fd).f_frsize,
                                                                    f_frsize=real(fd).f_frsize))
    try:
        blocks = path.stat().st_blocks
        with pytest.raises(OSError) as refused:
            held.ensure(6 << 20)  # [0, 6 MiB + STEP + STEP): more than 4 MiB of it is holes
        assert refused.value.errno == errno.ENOSPC
        assert (calls, held.reserved, path.stat().st_blocks) == ([], 0, blocks)
        held.ensure(1 << 20)  # [0, 1 MiB + 2 STEPs): 4 MiB of holes, the free space
        assert len(calls) == 1 and held.reserved == (1 << 20) + 2 * reserve.STEP
    finally:
        held.close()


@given(st.lists(st.booleans(), min_size=1, max_size=24), st.integers(0, 30), st.integers(0, 30))
def test_holes_counts_the_blocks_fallocate_would_allocate(written: list[bool], a: int, b: int) -> None:
    """reserve.py rule 5: of a file of 4 KiB blocks, each written or a hole, ``holes`` of a range (past the
    file's end too) is its blocks not written."""
    block = 4096
    start, end = min(a, b), max(a, b)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f"
        with path.open("wb") as f:
            for i, full in enumerate(written):
                if full:
                    f.seek(i * block)
                    f.write(b"x" * block)
            f.truncate(len(written) * block)
        fd = os.open(path, os.O_RDONLY)
        try:
            got = reserve.holes(fd, start * block, end * block)
        finally:
            os.close(fd)
    blocks = written + [False] * 30
    assert got == sum(not full for full in blocks[start:end]) * block
