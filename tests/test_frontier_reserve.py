"""A full disk under the frontier's ``writemap`` LMDB (polecat/frontier/db.py rule 11, reserve.py): a clean
stop naming the cause, never a SIGBUS, and every commit made before it is there after more space."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from polecat.frontier import reserve
from polecat.frontier.db import FrontierDB
from polecat.writes import Put

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
