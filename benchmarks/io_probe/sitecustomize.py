"""Splits what a ``polecat crawl`` process writes by cause (issue 39, bytes written per URL), in every
crawl process started with this directory first on PYTHONPATH, and appends one line per process to
$IO_PROBE_OUT at exit:

    PYTHONPATH=benchmarks/io_probe:. IO_PROBE_OUT=/tmp/io.txt \\
        python -m benchmarks.bench_scale --seeds-only 3000000 --seconds 300

Each cause is a function of the frontier or the seen set whose writes it makes on the calling thread:
the write-ahead log's appends (polecat/frontier/wal.py), the seen runs written at LMDB commits and their
merges (polecat/frontier/seenlog.py), the Bloom snapshots (polecat/dedup/bloom.py), and the LMDB commit
itself on the writer thread (polecat/frontier/writer.py: with ``writemap`` most of LMDB's pages are dirtied
by the loop's puts, not there). For each, the calling thread's ``wchar`` and ``write_bytes``
(/proc/thread-self/io) across its calls, and the calls. With the process's totals at exit, so that what
no cause names (LMDB's pages dirtied through the map, the node's log) is the rest.
"""

import atexit
import functools
import os
import sys
from typing import Any

if "crawl" in sys.argv and os.environ.get("IO_PROBE_OUT"):
    _counts: dict[str, list[int]] = {}
    _log_at_commit: list[int] = []

    def _io(path: str) -> tuple[int, int]:
        got = {}
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                got[key] = int(value)
        return got["wchar"], got["write_bytes"]

    def _wrap(owner: Any, name: str, cause: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def counted(*args: Any, **kwargs: Any) -> Any:
            w0, b0 = _io("/proc/thread-self/io")
            try:
                return inner(*args, **kwargs)
            finally:
                w1, b1 = _io("/proc/thread-self/io")
                stat = _counts.setdefault(cause, [0, 0, 0])
                stat[0] += 1
                stat[1] += w1 - w0
                stat[2] += b1 - b0

        setattr(owner, name, counted)

    def _install() -> None:
        from polecat.dedup import bloom
        from polecat.frontier import db, seenlog, wal, writer

        _wrap(wal.WriteLog, "append", "log")
        _wrap(seenlog, "_write", "seen runs")
        _wrap(seenlog, "_merge", "seen merges")
        _wrap(bloom.ScalableBloom, "save", "bloom")
        _wrap(writer.TxnWriter, "_commit", "lmdb commit (writer thread)")
        start = db.FrontierDB.start_commit

        def start_commit(self: Any, *args: Any, **kwargs: Any) -> Any:
            before = self.committing
            got = start(self, *args, **kwargs)
            if self.committing and not before:
                _log_at_commit.append(self.wal.size)
            return got

        db.FrontierDB.start_commit = start_commit  # type: ignore[method-assign]

    def _report() -> None:
        wchar, written = _io("/proc/self/io")
        parts = "; ".join(f"{cause}: {n} calls, wchar {w / 2**20:.1f} MiB, write_bytes {b / 2**20:.1f} MiB"
                          for cause, (n, w, b) in sorted(_counts.items()))
        logs = _log_at_commit
        line = (f"pid {os.getpid()}: process wchar {wchar / 2**20:.1f} MiB, write_bytes "
                f"{written / 2**20:.1f} MiB; {parts}; LMDB commits {len(logs)}"
                + (f", log at them {min(logs) / 2**20:.1f}-{max(logs) / 2**20:.1f} MiB" if logs else ""))
        with open(os.environ["IO_PROBE_OUT"], "a") as out:
            out.write(line + "\n")

    _install()
    atexit.register(_report)
