"""Times the frontier's LMDB commits in every ``polecat crawl`` process started with this directory first
on PYTHONPATH, and the leases made during them, and writes them as JSON to $COMMIT_PROBE_OUT at exit
(issue 39, leasing during an LMDB commit; ``bench_scale --commit-probe`` reads them):

    PYTHONPATH=benchmarks/commit_probe:. COMMIT_PROBE_OUT=/tmp/commits.json polecat crawl ...

Per LMDB commit (polecat/frontier/db.py rule 6), on ``time.monotonic`` (one clock for every process of the
machine, so a benchmark lines them up with what its server saw): when the loop started it, when the writer
thread began and ended it, when the loop finished it (its frontier calls free again), and the leases the
frontier made in between (``Leasing.lease``, patched before the frontier takes it).
"""

import atexit
import bisect
import json
import os
import sys
import threading
import time
from typing import Any

if "crawl" in sys.argv and os.environ.get("COMMIT_PROBE_OUT"):
    from polecat.frontier.db import FrontierDB
    from polecat.frontier.leasing import Leasing
    from polecat.frontier.records import Lease
    from polecat.frontier.writer import TxnWriter

    _commits: list[dict[str, float]] = []
    _writer: list[tuple[float, float]] = []
    _leases: list[float] = []
    _open: list[dict[str, float]] = []

    start_lmdb, finish, lease, commit = (FrontierDB._start_lmdb_commit, FrontierDB.finish_commit,
                                         Leasing.lease, TxnWriter._commit)

    def _start_lmdb(self: FrontierDB, txn: Any) -> Any:
        _open.append({"start": time.monotonic()})
        return start_lmdb(self, txn)

    def _finish(self: FrontierDB) -> int:
        try:
            return finish(self)
        finally:
            if _open and not self.committing:
                rec = _open.pop()
                rec["end"] = time.monotonic()
                _commits.append(rec)

    def _lease(self: Leasing, *args: Any, **kwargs: Any) -> Any:
        decided = lease(self, *args, **kwargs)
        if isinstance(decided.value, Lease):
            _leases.append(time.monotonic())
        return decided

    def _commit(self: TxnWriter, *args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        try:
            return commit(self, *args, **kwargs)
        finally:
            if threading.current_thread().name.startswith("polecat-frontier-writer"):
                _writer.append((began, time.monotonic()))

    FrontierDB._start_lmdb_commit = _start_lmdb  # type: ignore[method-assign]
    FrontierDB.finish_commit = _finish  # type: ignore[method-assign]
    Leasing.lease = _lease  # type: ignore[method-assign]
    TxnWriter._commit = _commit  # type: ignore[method-assign]

    def _report() -> None:
        for rec in _commits:
            rec["leases"] = (bisect.bisect_right(_leases, rec["end"])
                             - bisect.bisect_left(_leases, rec["start"]))
            rec["writer"] = next((e - b for b, e in _writer if rec["start"] <= b <= rec["end"]), 0.0)
        with open(os.environ["COMMIT_PROBE_OUT"], "w") as out:
            json.dump({"commits": _commits, "leases": len(_leases),
                       "first_lease": _leases[0] if _leases else None,
                       "last_lease": _leases[-1] if _leases else None}, out)

    atexit.register(_report)
