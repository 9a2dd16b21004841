"""The leaves of ``queue`` handed to the kernel's readahead after an open (polecat/frontier/prefetch.py rules
1-2, head_reader.py rule 5): the walk of LMDB's branch pages finds every leaf of a table and reads only its
branches, a page it does not know ends it, a table past the bound is left out, and the head reader's thread
hands the leaves first, one ``posix_fadvise`` a run."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.frontier import prefetch as prefetch_module
from polecat.frontier.db import FrontierDB
from polecat.frontier.head_reader import PREFETCH, ThreadHeadReader
from polecat.frontier.prefetch import leaf_runs, prefetch
from tests.test_read_ahead import opened


def _pages(stat: dict[str, int]) -> tuple[int, int]:
    return stat["leaf_pages"], stat["branch_pages"]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), max_size=6_000, unique=True), st.integers(0, 200))
def test_the_walk_finds_every_leaf_and_reads_only_branches(keys: list[bytes], size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = lmdb.open(tmp, max_dbs=2, map_size=1 << 28)
        db = env.open_db(b"t")
        with env.begin(write=True) as txn:
            for key in keys:
                txn.put(key, bytes(size), db=db)
        psize = env.stat()["psize"]
        read: list[int] = []
        fd = os.open(Path(tmp) / "data.mdb", os.O_RDONLY)
        try:
            def read_page(n: int) -> bytes:
                read.append(n)
                return os.pread(fd, psize, n * psize)

            with env.begin() as txn:
                runs, branches = leaf_runs(txn.get(b"t"), read_page)
                leaves, branch_pages = _pages(txn.stat(db))
        finally:
            os.close(fd)
            env.close()
    found = [first + i for first, n in runs for i in range(n)]
    assert len(found) == len(set(found)) == leaves and branches == branch_pages
    assert len(read) == branch_pages  # no leaf read: the kernel reads them
    assert all(a[0] + a[1] < b[0] for a, b in pairwise(runs))  # sorted, runs merged


def test_a_page_the_walk_does_not_know_ends_it_with_no_error() -> None:
    deep = bytes(6) + (3).to_bytes(2, "little") + bytes(32) + (7).to_bytes(8, "little")  # root 7, depth 3
    assert leaf_runs(deep, lambda n: bytes(4096)) == ([], 0)  # its header names page 0
    assert leaf_runs(deep, lambda n: b"") == ([], 0)
    leaf = (7).to_bytes(8, "little") + bytes(2) + (2).to_bytes(2, "little") + bytes(4084)  # a leaf's flag
    assert leaf_runs(deep, lambda n: leaf) == ([], 0)
    assert leaf_runs(bytes(40) + b"\xff" * 8, lambda n: bytes(4096)) == ([], 0)  # an empty table


def test_the_head_reader_hands_the_queue_leaves_to_the_kernel_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = opened(tmp_path, hosts=3_000, working=100)
    assert isinstance(rig.db, FrontierDB)
    rig.frontier.commit()
    rig.db.commit(to_lmdb=True)
    advised: list[tuple[int, int, int]] = []
    fadvise = os.posix_fadvise

    def counted(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((offset, length, advice))
        fadvise(fd, offset, length, advice)

    monkeypatch.setattr(prefetch_module.os, "posix_fadvise", counted)
    with rig.db.env.begin() as txn:
        want = [_pages(txn.stat(rig.db.env.open_db(name, txn=txn, create=False))) for name in PREFETCH]
    reader = ThreadHeadReader(rig.db.env, rig.db.queue, rig.db.hosts)
    reader.start()
    for _ in range(10_000):  # waits for the thread, bounded; nothing is timed
        if reader.prefetched is not None:
            break
        threading.Event().wait(0.001)
    reader.stop()
    done = reader.prefetched
    psize = rig.db.env.stat()["psize"]
    assert done is not None and done.leaves == sum(leaves for leaves, _ in want) > 2
    assert done.branches == sum(branches for _, branches in want) and done.runs == len(advised)
    assert sum(length for _, length, _ in advised) == done.leaves * psize
    assert {advice for _, _, advice in advised} == {os.POSIX_FADV_WILLNEED}
    rig.db.close()


def test_a_table_past_the_bound_is_left_to_the_heads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = opened(tmp_path, hosts=3_000, working=100)
    assert isinstance(rig.db, FrontierDB)
    rig.frontier.commit()
    rig.db.commit(to_lmdb=True)
    monkeypatch.setattr(prefetch_module, "MAX_PAGES", 1)
    done = prefetch(rig.db.env, tmp_path / "frontier" / "data.mdb", PREFETCH)
    assert (done.leaves, done.runs, done.branches) == (0, 0, 0)
    rig.db.close()


def test_a_stopped_prefetch_hands_no_more_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = opened(tmp_path, hosts=3_000, working=100)
    assert isinstance(rig.db, FrontierDB)
    rig.frontier.commit()
    rig.db.commit(to_lmdb=True)
    walk = prefetch_module.leaf_runs

    def page_by_page(record: bytes, read_page: Callable[[int], bytes]) -> tuple[list[tuple[int, int]], int]:
        runs, branches = walk(record, read_page)
        return [(first + i, 1) for first, n in runs for i in range(n)], branches

    monkeypatch.setattr(prefetch_module, "leaf_runs", page_by_page)
    asked = iter([False, True])
    done = prefetch(rig.db.env, tmp_path / "frontier" / "data.mdb", PREFETCH, lambda: next(asked))
    assert (done.runs, done.leaves) == (1, 1)
    rig.db.close()
