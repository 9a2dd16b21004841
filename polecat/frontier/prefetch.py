"""The leaf pages of a few LMDB tables handed to the kernel's readahead right after an open (issue 39).

Right after an open from a cold page cache the first leases wait on their hosts' queue heads, a random
leaf of ``queue`` each (benchmarks/README.md, "Issue 39: queue heads read ahead after a cold open"); the
head reader's thread (polecat/frontier/head_reader.py) touched them one fault after another, and each of
its reads is a hand-over of the GIL with the busy event loop. Here the leaves of the tables the first
leases read are named to the kernel at once, by ``posix_fadvise(POSIX_FADV_WILLNEED)`` of the data file's
runs of them: the kernel reads them on its own, many at a time, and no thread of the process waits or
holds the GIL while the disk works. py-lmdb does not give a page's address or number, so the pages are
found by walking the table's branch pages as LMDB lays them out on disk.

Rules:
1. :func:`leaf_runs` walks a table's B-tree from its root (the table's record in LMDB's main table, an
   ``MDB_db``: its root page's number) through its branch pages, read by the caller's ``read_page`` (sans
   IO), and returns its leaf pages as runs (first page, pages), in page order. Only branch pages are read
   (~1 in 100 of a table's pages; the tree's depth says which level is the leaves'). A branch page whose
   header does not hold its own number and the branch flag (a format this walk does not know, or a page
   reused under it) ends the walk with no leaves: a prefetch is a hint, never a read the leases depend
   on.
2. :func:`prefetch` does that for each table named, in one read transaction of its own (its snapshot
   keeps LMDB's writer from reusing the pages it walks; aborted at the end), reading branch pages with
   ``pread`` of the data file (the page cache, not the map: no major fault counted to the thread) and
   handing each run of leaves to ``posix_fadvise(WILLNEED)``. A table of more than :data:`MAX_PAGES`
   leaves is not prefetched (the read-ahead of single heads covers it): the hint is for the tables that
   fit the page cache many times over, and must not evict what a node holds warm. It ends early, between
   two runs, once its caller says it is stopped (a node stopping its head reader does not wait for it).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

MAX_PAGES = 1 << 16
"""The most leaf pages (256 MiB of 4 KiB pages) of one table :func:`prefetch` hands to the kernel (rule 2):
the ``queue`` of 50M URLs over 1M hosts is 12,612, its ``hosts`` 20,358."""

_DB = struct.Struct("<IHHQQQQQ")
"""LMDB's ``MDB_db``: pad, flags, depth, branch, leaf and overflow pages, entries, root page."""
_HEADER = struct.Struct("<QHHHH")
"""LMDB's page header: number, pad, flags, lower and upper free bounds (16 bytes)."""
_PTR = struct.Struct("<H")
_NODE = struct.Struct("<HHH")
"""A branch node's child page number, in three 16-bit parts (``NODEPGNO``)."""
_BRANCH = 0x01
_NO_PAGE = (1 << 64) - 1
"""``P_INVALID``: an empty table's root."""


@dataclass(slots=True)
class Prefetched:
    """What :func:`prefetch` handed to the kernel."""

    leaves: int = 0
    """Leaf pages."""
    runs: int = 0
    """``posix_fadvise`` calls: runs of consecutive leaves."""
    branches: int = 0
    """Branch pages read to find them."""


def leaf_runs(record: bytes, read_page: Callable[[int], bytes]) -> tuple[list[tuple[int, int]], int]:
    """Rule 1: the leaf runs ``(first, count)`` of the table whose ``MDB_db`` is ``record``, and the
    branch pages read. The tree's depth says which level is the leaves', so a leaf is never read."""
    _, _, depth, _, _, _, _, root = _DB.unpack_from(record)
    level = [] if root == _NO_PAGE else [root]
    branches = 0
    for _ in range(depth - 1):
        below: list[int] = []
        for number in level:
            page = read_page(number)
            if len(page) < _HEADER.size:
                return [], branches
            own, _, flags, lower, _ = _HEADER.unpack_from(page)
            if own != number or not flags & _BRANCH:
                return [], branches
            branches += 1
            for i in range((lower - _HEADER.size) >> 1):
                lo, hi, top = _NODE.unpack_from(page, _PTR.unpack_from(page, _HEADER.size + 2 * i)[0])
                below.append(lo | hi << 16 | top << 32)
        level = below
    return _runs(level), branches


def _runs(pages: Iterable[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for page in sorted(pages):
        if runs and runs[-1][0] + runs[-1][1] == page:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((page, 1))
    return runs


def prefetch(env: lmdb.Environment, data_file: Path, tables: Iterable[bytes],
             stopped: Callable[[], bool] = lambda: False) -> Prefetched:
    """Rule 2: hand the leaves of ``tables`` (names) of ``env`` to the kernel's readahead, up to the run
    at which ``stopped()`` is true."""
    done = Prefetched()
    psize: int = env.stat()["psize"]
    fd = os.open(data_file, os.O_RDONLY)
    txn: Any = env.begin()
    try:
        for name in tables:
            record = txn.get(name)
            if record is None or len(record) < _DB.size or _DB.unpack_from(record)[4] > MAX_PAGES:
                continue
            runs, branches = leaf_runs(record, lambda n: os.pread(fd, psize, n * psize))
            done.branches += branches
            for first, pages in runs:
                if stopped():
                    return done
                os.posix_fadvise(fd, first * psize, pages * psize, os.POSIX_FADV_WILLNEED)
                done.leaves += pages
                done.runs += 1
    finally:
        txn.abort()
        os.close(fd)
    return done
