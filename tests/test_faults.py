"""polecat/faults.py: which failed writes are faults of the machine, and the words that name them."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import lmdb
import pytest

from polecat import faults
from polecat.faults import fault_cause, storage_fault


def test_os_errors_are_named_by_their_cause(tmp_path: Path) -> None:
    assert fault_cause(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), tmp_path) == "disk full"
    assert fault_cause(OSError(errno.EDQUOT, "quota"), tmp_path) == "disk quota exceeded"
    assert fault_cause(OSError(errno.EROFS, "ro"), tmp_path) == "read-only file system"
    assert fault_cause(OSError(errno.EACCES, "denied"), tmp_path) == "write failed"


def test_lmdb_errors_are_named_and_a_map_full_names_the_setting(tmp_path: Path) -> None:
    assert "frontier.map_size" in fault_cause(lmdb.MapFullError("mdb_put", -30792), tmp_path)
    assert fault_cause(lmdb.DiskError("x", errno.ENOSPC), tmp_path) == "disk full"
    read_only = lmdb.Error("mdb_txn_commit: Read-only file system")
    assert fault_cause(read_only, tmp_path) == "read-only file system"
    assert fault_cause(lmdb.BadValsizeError("mdb_put", -30781), tmp_path) == "LMDB error"


def test_an_io_error_on_a_nearly_full_disk_is_called_a_full_disk(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """LMDB turns a short write on a full disk into EIO (rule 2)."""
    eio = lmdb.Error("mdb_txn_commit: Input/output error")
    monkeypatch.setattr(faults, "_free_bytes", lambda path: faults.LOW_SPACE * 10)
    assert fault_cause(eio, tmp_path) == "I/O error"
    monkeypatch.setattr(faults, "_free_bytes", lambda path: 4096)
    assert fault_cause(eio, tmp_path) == "disk full"


def test_the_fault_names_cause_path_and_raw_error(tmp_path: Path) -> None:
    fault = storage_fault(OSError(errno.ENOSPC, "No space left on device"), "page store segment",
                          tmp_path / "seg.warc.zst")
    assert str(fault).startswith("disk full: cannot write page store segment ")
    assert str(tmp_path / "seg.warc.zst") in str(fault) and "No space left on device" in str(fault)
    assert fault.path == str(tmp_path / "seg.warc.zst") and fault.cause == "disk full"


def test_free_space_is_read_from_the_nearest_existing_directory(tmp_path: Path) -> None:
    assert faults._free_bytes(tmp_path / "not" / "yet" / "there") > 0


def test_running_out_of_descriptors_is_named_as_such(tmp_path: Path) -> None:
    emfile = fault_cause(OSError(errno.EMFILE, os.strerror(errno.EMFILE)), tmp_path)
    assert emfile.startswith("out of file descriptors (EMFILE") and "RLIMIT_NOFILE" in emfile
    assert "ENFILE" in fault_cause(OSError(errno.ENFILE, os.strerror(errno.ENFILE)), tmp_path)
    lmdb_words = lmdb.Error(f"mdb_env_open: {os.strerror(errno.EMFILE)}")
    assert fault_cause(lmdb_words, tmp_path).startswith("out of file descriptors (EMFILE")
    snapshot = storage_fault(OSError(errno.EMFILE, "Too many open files"), "seen-set snapshot", tmp_path)
    assert str(snapshot).startswith("out of file descriptors (EMFILE")
    assert faults.descriptor_shortage(OSError(errno.ENOSPC, "full")) is None
