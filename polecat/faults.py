"""Faults of the machine: which failed writes mean local state can no longer be kept, and their words.

Rules (this module owns them):

1. A write to the page store or the frontier that fails with an OS error (ENOSPC, EDQUOT, EIO, EROFS,
   EFBIG, ...) or an LMDB error is a fault of the machine, not of the page being handled: it becomes a
   :class:`StorageFault` that names the cause and the path, and the node stops
   (polecat/node/crawler.py) without
   recording that page or anything after it.
2. LMDB reports a write that ran out of disk as ``Input/output error`` (a short ``pwrite`` becomes EIO),
   so an EIO is reported as "disk full" when the file system holding the path has less free space than
   :data:`LOW_SPACE` left; the raw error is quoted either way.
3. Any LMDB error on a write transaction leaves that transaction unusable (LMDB requires an abort), so it
   is a fault too, worded as LMDB words it.
4. Running out of file descriptors is named as such wherever it happens (:func:`descriptor_shortage`):
   EMFILE with the process's limit, ENFILE as the system's. A write that fails so is a fault like any
   other (rule 1); a connect that fails so is a connect error in those words (polecat/fetch/http.py).
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

import lmdb

from polecat.errors import StorageFault

LOW_SPACE = 4 << 20
"""Free bytes below which an I/O error on a write is reported as a full disk (rule 2)."""

_CAUSES = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "I/O error",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large",
    errno.ENOMEM: "out of memory",
}


def storage_fault(exc: BaseException, what: str, path: Path | str) -> StorageFault:
    """The fault to stop the node with, for ``exc`` raised while writing ``what`` at ``path``."""
    cause = fault_cause(exc, path)
    return StorageFault(f"{cause}: cannot write {what} {path} ({exc})", path=str(path), cause=cause)


def descriptor_shortage(exc: BaseException) -> str | None:
    """Words for an OSError that ran out of file descriptors (rule 4); None for any other error."""
    code = exc.errno if isinstance(exc, OSError) else _lmdb_errno(exc)
    if code == errno.EMFILE:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return f"out of file descriptors (EMFILE: this process's limit, RLIMIT_NOFILE {soft}, is reached)"
    if code == errno.ENFILE:
        return "out of file descriptors (ENFILE: the system's open-file table is full, fs.file-max)"
    return None


def fault_cause(exc: BaseException, path: Path | str) -> str:
    """The cause of a failed write in words (rules 1-4)."""
    shortage = descriptor_shortage(exc)
    if shortage is not None:
        return shortage
    if isinstance(exc, lmdb.MapFullError):
        return "LMDB map full (raise frontier.map_size)"
    code = exc.errno if isinstance(exc, OSError) else _lmdb_errno(exc)
    if isinstance(exc, lmdb.DiskError):
        code = errno.ENOSPC
    if code == errno.EIO and _free_bytes(path) < LOW_SPACE:
        code = errno.ENOSPC
    if code in _CAUSES:
        return _CAUSES[code]
    return "LMDB error" if isinstance(exc, lmdb.Error) else "write failed"


def _lmdb_errno(exc: BaseException) -> int | None:
    """LMDB's message carries the strerror of an OS error ("mdb_txn_commit: Input/output error")."""
    if not isinstance(exc, lmdb.Error):
        return None
    text = str(exc)
    for code in (*_CAUSES, errno.EMFILE, errno.ENFILE):
        if text.endswith(os.strerror(code)):
            return code
    return None


def _free_bytes(path: Path | str) -> int:
    """Free bytes on the file system holding ``path`` (its nearest existing ancestor)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return LOW_SPACE
    return st.f_bavail * st.f_frsize
