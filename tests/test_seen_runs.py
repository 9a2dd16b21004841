"""The log-structured seen table (polecat/frontier/seenlog.py): reads as a set after any puts, releases,
commits, crashes and merges, and answers every key committed after a commit among its keys after it (rule
7); orphan runs are removed at open; a kill -9 mid-commit or mid-merge loses
nothing committed and keeps nothing uncommitted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from polecat.frontier.db import FrontierDB
from polecat.frontier.seenlog import MANIFEST, SeenRuns, run_path
from polecat.frontier.slices import slice_prefix
from polecat.writes import DeleteSlices, Put

SLICES = (0, 7, 4095)


def key(s: int, n: int) -> bytes:
    return slice_prefix(s) + n.to_bytes(16, "big")


class Model:
    """What the table must read as: the committed keys and those applied since."""

    def __init__(self) -> None:
        self.committed: set[bytes] = set()
        self.applied: set[bytes] = set()
        self.seq = 0
        """The last commit's sequence."""
        self.committed_at: dict[bytes, int] = {}
        """The commit that made each committed key so (its last, after a release and a put again)."""

    def commit(self) -> None:
        self.seq += 1
        for k in self.applied - self.committed:
            self.committed_at[k] = self.seq
        self.committed = set(self.applied)

    def release(self, s: int) -> None:
        self.applied = {k for k in self.applied if k[:2] != slice_prefix(s)}


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(SLICES), st.integers(0, 40)),
    st.tuples(st.just("release"), st.sampled_from(SLICES), st.just(0)),
    st.tuples(st.just("commit"), st.just(0), st.just(0)),
    st.tuples(st.just("crash"), st.just(0), st.just(0)),
    st.tuples(st.just("merged"), st.just(0), st.just(0)),
), max_size=60)


def commit(runs: SeenRuns, seq: int = 1) -> bytes:
    """A commit's three steps, as FrontierDB takes them (the LMDB commit ``seq``); answers the manifest it
    stores."""
    manifest = runs.prepare(seq)
    runs.write_run()
    runs.committed()
    return manifest


def _check(runs: SeenRuns, model: Model) -> None:
    assert [k for k, _ in runs.items()] == sorted(model.applied)
    assert runs.count() == len(model.applied)
    for s in SLICES:
        assert [k for k, _ in runs.items(slice_prefix(s))] == sorted(k for k in model.applied
                                                                     if k[:2] == slice_prefix(s))
    for k in model.applied | model.committed:
        assert (runs.get(k) == b"") == (k in model.applied)
    view = runs.view()
    assert [k for k, _ in view.items()] == sorted(model.committed)
    # Rule 7: what a Bloom snapshot of commit t lacks is among the keys after t.
    for t in range(model.seq + 1):
        after = set(runs.keys_after(t))
        assert {k for k in model.committed if model.committed_at[k] > t} <= after
        assert model.applied - model.committed <= after


@settings(max_examples=80, deadline=None)
@given(steps=ops)
# A merge whose inputs' keys were all released writes an empty run, which must still open.
@example(steps=[("put", 7, 1), ("commit", 0, 0), ("put", 7, 0), ("commit", 0, 0), ("crash", 0, 0),
                ("release", 7, 0), ("commit", 0, 0), ("merged", 0, 0)])
def test_the_runs_read_as_a_set(steps: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        manifest: bytes | None = None
        runs = SeenRuns(path, manifest, fanout=2)
        model = Model()
        try:
            for op, s, n in steps:
                if op == "put":
                    runs.put(key(s, n))
                    model.applied.add(key(s, n))
                elif op == "release":
                    runs.delete_slices([slice_prefix(s)])
                    model.release(s)
                elif op == "commit":
                    model.commit()
                    manifest = commit(runs, model.seq)
                elif op == "merged" and runs._merging is not None:
                    runs._merging.result()
                elif op == "crash":
                    runs.close()
                    runs = SeenRuns(path, manifest, fanout=2)
                    model.applied = set(model.committed)
                _check(runs, model)
        finally:
            runs.close()


def test_a_run_no_commit_lists_is_removed_at_open(tmp_path: Path) -> None:
    runs = SeenRuns(tmp_path, None)
    runs.put(key(0, 1))
    manifest = commit(runs)
    runs.put(key(0, 2))
    runs.prepare(1)
    runs.write_run()  # the LMDB commit listing this run never happens: a crash
    runs.close()
    assert len(list(tmp_path.iterdir())) == 2
    again = SeenRuns(tmp_path, manifest)
    assert [k for k, _ in again.items()] == [key(0, 1)] and len(list(tmp_path.iterdir())) == 1
    again.close()


def test_a_short_run_file_is_refused(tmp_path: Path) -> None:
    runs = SeenRuns(tmp_path, None)
    runs.put(key(0, 1))
    manifest = commit(runs)
    runs.close()
    name = run_path(tmp_path, 1)
    name.write_bytes(name.read_bytes()[:-1])
    try:
        SeenRuns(tmp_path, manifest)
    except ValueError as exc:
        assert "not a multiple of 18" in str(exc)
    else:
        raise AssertionError("a truncated run was read")


def test_a_key_of_another_length_is_refused(tmp_path: Path) -> None:
    runs = SeenRuns(tmp_path, None)
    try:
        runs.put(b"short")
    except ValueError as exc:
        assert "18 bytes" in str(exc)
    else:
        raise AssertionError("a short key was taken")
    finally:
        runs.close()


def test_a_batch_with_a_key_of_another_length_is_refused_whole(tmp_path: Path) -> None:
    """``put_many`` (a seeds batch) checks every key before it adds any."""
    runs = SeenRuns(tmp_path, None)
    try:
        with pytest.raises(ValueError, match=r"18 bytes .*not 5: b'short'"):
            runs.put_many([key(0, 1), b"short", key(0, 2)])
        assert runs.get(key(0, 1)) is None
        runs.put_many([key(0, 1), key(1, 2)])
        assert runs.get(key(0, 1)) == b"" and runs.get(key(1, 2)) == b"" and runs.count() == 2
    finally:
        runs.close()


def test_keys_ending_in_nul_bytes_are_found(tmp_path: Path) -> None:
    # numpy strips trailing NULs of the fixed-size strings it returns: lookups compare raw bytes.
    runs = SeenRuns(tmp_path, None)
    ks = [slice_prefix(0) + b"\x00" * 16, slice_prefix(0) + b"a" + b"\x00" * 15, slice_prefix(0) + b"a" * 16]
    for k in ks:
        runs.put(k)
    commit(runs)
    assert all(runs.get(k) == b"" for k in ks) and runs.get(slice_prefix(0) + b"a" * 15 + b"\x00") is None
    assert [k for k, _ in runs.items()] == sorted(ks)
    runs.close()


CHILD = """
import sys
from pathlib import Path
from polecat.frontier import seenlog
from polecat.frontier.db import FrontierDB
from polecat.frontier.slices import slice_prefix
from polecat.writes import Put
seenlog.FANOUT = 2
db = FrontierDB(Path(sys.argv[1]), map_size=1 << 26, params={})
batch = db.seq
while True:
    batch += 1
    db.apply([Put("seen", slice_prefix(b % 64) + b.to_bytes(8, "big") + i.to_bytes(8, "big"), b"")
              for b in (batch,) for i in range(200)])
    assert db.commit() == batch
    print(batch, flush=True)
"""


def _batches(path: Path) -> tuple[int, set[int]]:
    """The commit counter of the frontier in ``path`` and the batches its seen table holds, checked whole."""
    db = FrontierDB(path, map_size=1 << 26, params={})
    try:
        found: dict[int, int] = {}
        for k in db.seen_keys():
            b = int.from_bytes(k[2:10], "big")
            found[b] = found.get(b, 0) + 1
        assert all(n == 200 for n in found.values()), found
        assert db.count("seen") == 200 * len(found)
        return db.seq, set(found)
    finally:
        db.close()


def test_kill_9_mid_commit_or_merge_keeps_exactly_the_commits(tmp_path: Path) -> None:
    """A process committing batches of seen keys (merging every two runs) is killed at random points:
    each reopen holds every batch up to its commit counter and none after (nothing committed is lost,
    nothing uncommitted kept), and no run file is left that the manifest does not list."""
    path = tmp_path / "frontier"
    rng = np.random.default_rng(39)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, env=env,
                                text=True)
        assert proc.stdout is not None
        reported = 0
        target = int(rng.integers(5, 40))
        for line in proc.stdout:
            reported = int(line)
            if reported >= target:
                time.sleep(float(rng.uniform(0, 0.05)))  # into the next commit, or a merge
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        seq, batches = _batches(path)
        assert seq >= reported
        assert batches == set(range(2, seq + 1)), (seq, sorted(batches))  # commit 1 wrote the schema
        db = FrontierDB(path, map_size=1 << 26, params={})
        listed = db.txn.get(MANIFEST, db=db.meta)
        db.close()
        assert listed is not None
        names = {run_path(path, n).name for n, *_ in json.loads(listed)["runs"]}
        assert {p.name for p in (path / "seen").iterdir()} == names


def test_released_slices_stay_released_across_merges_and_reopen(tmp_path: Path) -> None:
    db = FrontierDB(tmp_path / "f", map_size=1 << 24, params={})
    db.seen.fanout = 2
    try:
        for n in range(6):
            db.apply([Put("seen", key(s, n), b"") for s in SLICES])
            db.commit()
            if db.seen._merging is not None:
                db.seen._merging.result()
        db.apply([DeleteSlices(frozenset({7}))])
        db.apply([Put("seen", key(7, 2), b"")])  # seen again after its slice came back
        for _ in range(3):
            db.commit()
            if db.seen._merging is not None:
                db.seen._merging.result()
    finally:
        db.close()
    db = FrontierDB(tmp_path / "f", map_size=1 << 24, params={})
    try:
        want = sorted([key(s, n) for s in (0, 4095) for n in range(6)] + [key(7, 2)])
        assert list(db.seen_keys()) == want and db.count("seen") == len(want)
        assert db.get("seen", key(7, 3)) is None and db.get("seen", key(7, 2)) == b""
    finally:
        db.close()
