"""Segment files on local disk: append, sync, read by range, cut torn tails.

A segment is a sequence of zstd frames, one WARC record each, named ``<store id>-<number>.warc.zst``.
Only the writer appends, and only at the end; the index records how many bytes of each segment were
durable when it last committed, so anything past that after a crash (a torn or unindexed tail) is cut.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

from polecat.errors import CorruptRecord, StoreError
from polecat.faults import storage_fault
from polecat.store.index import Locator

_NAME = re.compile(r"^([0-9a-f]+)-(\d{8})\.warc\.zst$")


def segment_name(store_id: str, seg: int) -> str:
    return f"{store_id}-{seg:08d}.warc.zst"


def parse_segment_name(name: str) -> tuple[str, int] | None:
    """(store id, number) of a segment's file or object name; None for any other name."""
    m = _NAME.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def list_segment_files(directory: Path, store_id: str) -> Iterator[tuple[int, Path]]:
    """(number, path) of this store's segment files in ``directory``."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        parsed = parse_segment_name(entry.name)
        if parsed is not None and parsed[0] == store_id:
            yield parsed[1], entry


def lock_writer(root: Path) -> int:
    """Take the store's writer lock (one writer per store: a crawl, ``polecat upgrade`` or ``store
    repair``); returns the descriptor that holds it. The lock file names the holder's pid, for the
    error another writer gets (:func:`check_unlocked`)."""
    fd = os.open(root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        holder = _holder(fd)
        os.close(fd)
        raise _in_use(root, holder) from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def check_unlocked(root: Path) -> None:
    """Raise the StoreError :func:`lock_writer` would when another process holds the writer lock of the
    store at ``root`` (none there yet is unlocked). A crawl asks before it opens anything else: its
    frontier would otherwise wait for the running crawl's write transaction, silently, for as long as
    that crawl runs."""
    try:
        fd = os.open(root / "LOCK", os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        raise _in_use(root, _holder(fd)) from exc
    finally:
        os.close(fd)  # releases the lock if it was taken here


def _holder(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _in_use(root: Path, pid: int | None) -> StoreError:
    by = f"another process (pid {pid})" if pid else "another process"
    stop = f"kill -TERM {pid}" if pid else "Ctrl-C in its terminal"
    return StoreError(f"page store {root} is open for writing by {by}: a crawl, `polecat upgrade` or `store "
                      f"repair` of this data dir is running; let it end or stop it ({stop}) first")


def fsync_dir(directory: Path) -> None:
    """Persist directory entries (a new segment file's name) across a power loss."""
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise storage_fault(exc, "page store directory", directory) from exc


def cut_tail(path: Path, committed: int) -> int:
    """Truncate ``path`` to its committed length; return the bytes cut.

    Raises CorruptRecord when the file is shorter than what the index says was durable.
    """
    size = path.stat().st_size
    if size < committed:
        raise CorruptRecord(f"segment {path.name} has {size} bytes, index committed {committed}: run "
                            "`polecat store repair DIR` (keeps every intact record, queues lost URLs again)")
    if size > committed:
        with path.open("r+b") as fh:
            fh.truncate(committed)
            os.fsync(fh.fileno())
    return size - committed


class SegmentWriter:
    """Appends frames to one segment file. Not thread-safe: the store's writer thread owns it."""

    def __init__(self, path: Path, seg: int, length: int) -> None:
        self.path = path
        self.seg = seg
        self.length = length
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.lseek(self._fd, length, os.SEEK_SET)
        except OSError as exc:
            raise storage_fault(exc, "page store segment", path) from exc

    def append(self, frame: bytes) -> Locator:
        offset = self.length
        view = memoryview(frame)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as exc:
            # Leave the file at its last good length so later frames do not follow a torn one.
            os.ftruncate(self._fd, offset)
            os.lseek(self._fd, offset, os.SEEK_SET)
            raise storage_fault(exc, "page store segment", self.path) from exc
        self.length += len(frame)
        return Locator(self.seg, offset, len(frame))

    def sync(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise storage_fault(exc, "page store segment", self.path) from exc

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SegmentReaders:
    """Cached read descriptors, one per local segment; reads by ``pread``."""

    def __init__(self, directory: Path, store_id: str) -> None:
        self._dir = directory
        self._store_id = store_id
        self._fds: dict[int, int] = {}

    def read(self, loc: Locator) -> bytes:
        """The frame at ``loc``; FileNotFoundError when the segment is not on local disk."""
        fd = self._fds.get(loc.segment)
        if fd is None:
            fd = os.open(self._dir / segment_name(self._store_id, loc.segment), os.O_RDONLY)
            self._fds[loc.segment] = fd
        data = os.pread(fd, loc.length, loc.offset)
        if len(data) != loc.length:
            raise CorruptRecord(f"segment {loc.segment} is short at offset {loc.offset}")
        return data

    def forget(self, seg: int) -> None:
        """Close the descriptor of a segment that moved to object storage (frees its disk space)."""
        fd = self._fds.pop(seg, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for seg in list(self._fds):
            self.forget(seg)
