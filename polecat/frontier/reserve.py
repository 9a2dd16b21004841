"""Disk space reserved ahead of the frontier's LMDB, so that ``writemap`` meets a full disk cleanly.

With ``writemap`` (``frontier.writemap``) LMDB sizes its data file to ``map_size`` (sparse) and writes
pages through its memory map: a page written into a hole on a full disk is a SIGBUS that kills the
process, where a ``write`` would have failed with ENOSPC and the node stopped cleanly (polecat/node/
commits.py rule 6). So the frontier allocates the file's blocks ahead of LMDB's pages with
``fallocate(2)``, in steps, and a full disk is met by the allocation, on the caller's terms (issue 39).

Rules:

1. :meth:`DiskReserve.ensure` keeps ``[0, need + STEP)`` of the data file allocated, growing the
   reservation by :data:`STEP` more (or an eighth of ``need``) at a time, so that it runs rarely. A failed
   allocation raises ``OSError`` (ENOSPC on a full disk) and leaves the reservation as it was: the pages
   LMDB may touch are still inside it.
2. The bound the frontier asks for (polecat/frontier/db.py rule 11): an LMDB transaction copies each
   page it changes at most once, into a new page, so it can reach past the last committed page by at
   most the pages of its trees (their copies) plus what it inserts; :func:`pages_bound` sums the first
   from the transaction's own statistics, and :data:`STEP` of room past it covers the second between two
   checks (a node commit gathers ``frontier.commit_ops`` changes, 2,000 rows of a few hundred bytes:
   about a MiB of new pages at most, and the bound itself counts a copy of every page where a
   transaction copies a few; a bigger batch of writes is checked before it is applied, db.py rule 11).
3. ``fallocate(2)`` itself, not ``posix_fallocate``: glibc emulates the latter where the filesystem lacks
   it by writing a byte into each block, which would race LMDB's own writes to the map. A filesystem
   without it (:func:`supported` is False) cannot reserve, and the frontier opens without ``writemap``
   (logged).
4. An upgrade's bound (db.py rule 21) counts two more copies of the tables it rewrites through a scratch
   table (the scratch's pages, then the table's own again), not of every table: a schema-6 frontier of
   50M URLs, whose upgrade rewrites only its 50 MB ``queue``, asked ``fallocate`` for [0, 83 GiB) of a
   20 GiB file (three copies of every table) on a disk with 39 GiB free (benchmarks/README.md, "Issue
   39: the schema 6 -> 7 upgrade at 50M").
5. :meth:`DiskReserve.ensure` refuses (``OSError`` ENOSPC) a growth whose holes, the blocks it would
   allocate, are more than the filesystem's free space, without calling ``fallocate``: ext4 keeps the
   blocks it allocated before it met ENOSPC (a 300 MiB ext4 image was left 100 % full by a failed
   800 MiB ``fallocate``), so rule 1's failed allocation would leave the disk full, for every other
   writer on it too, and the reservation not grown. Another writer filling the disk between the check and
   the call can still meet that: the check makes the common case (a reservation far past what the disk
   holds) clean.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STEP = 2 * 2**20
"""The least growth of a reservation, and the room kept past the bound (rules 1-2)."""

_libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: no ldconfig run to find libc
_fallocate = _libc.fallocate
_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_fallocate.restype = ctypes.c_int


def fallocate(fd: int, offset: int, length: int) -> None:
    """Allocate ``length`` bytes of ``fd`` from ``offset`` (rule 3); ``OSError`` if it cannot."""
    if _fallocate(fd, 0, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def supported(directory: Path) -> bool:
    """Whether ``directory``'s filesystem allocates with ``fallocate(2)`` (rule 3)."""
    probe = directory / ".fallocate-probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fallocate(fd, 0, 4096)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return False
        raise
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            probe.unlink()
    return True


def pages_bound(env: Any, txn: Any, dbs: Iterable[Any], rewritten: Iterable[Any] = ()) -> int:
    """Pages the data file may hold once ``txn`` commits (rule 2): the last committed page, plus a copy
    of every page of ``dbs`` and of the main table as ``txn`` sees them, plus two more of each of
    ``rewritten``, the tables a schema upgrade rewrites through a scratch table (rule 4)."""
    total: int = env.info()["last_pgno"] + 1 + _pages(txn, [None, *dbs]) + 2 * _pages(txn, rewritten)
    return total * 65 // 64  # the freelist's own pages, written at the commit


def _pages(txn: Any, dbs: Iterable[Any]) -> int:
    """Branch, leaf and overflow pages of ``dbs`` (``None``: the main table) as ``txn`` sees them."""
    pages = 0
    for db in dbs:
        st = txn.stat(db) if db is not None else txn.stat()
        pages += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
    return pages


def holes(fd: int, start: int, end: int) -> int:
    """Bytes of ``[start, end)`` of ``fd`` that hold no block (``SEEK_DATA``/``SEEK_HOLE``): what
    ``fallocate`` of that range would allocate (rule 5)."""
    size = os.fstat(fd).st_size
    empty, at = max(0, end - max(start, size)), start  # past the file's end: all holes
    while at < min(end, size):
        try:
            data = os.lseek(fd, at, os.SEEK_DATA)
        except OSError as exc:  # ENXIO: no data from ``at`` to the end of the file
            if exc.errno != errno.ENXIO:
                raise
            data = size
        data = min(data, end, size)
        empty += data - at
        if data >= min(end, size):
            break
        at = os.lseek(fd, data, os.SEEK_HOLE)
    return empty


class DiskReserve:
    """The reservation of one data file (rules above)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reserved = 0
        """Bytes from the file's start known allocated."""
        self._fd = os.open(path, os.O_RDWR)

    def ensure(self, need: int) -> None:
        """Keep ``[0, need + STEP)`` allocated (rule 1), refused before ``fallocate`` where the disk
        cannot hold it (rule 5)."""
        want = need + STEP
        if want <= self.reserved:
            return
        end = want + max(STEP, need // 8)
        fs = os.fstatvfs(self._fd)
        if holes(self._fd, self.reserved, end) > fs.f_bavail * fs.f_frsize:  # rule 5
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fallocate(self._fd, self.reserved, end - self.reserved)
        self.reserved = end

    def close(self) -> None:
        os.close(self._fd)
