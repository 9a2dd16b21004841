"""Crash safety with real kills: a child process writes pages in a loop and is SIGKILLed at random moments.

After each kill the store is reopened (which cuts torn tails) and must hold every page the child had
acknowledged (``flush`` returned), read back whole and hash-verified; ``verify`` must find no fault.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from polecat.config import StoreConfig
from polecat.store.fsck import verify
from polecat.store.segstore import SegmentStore, open_store

CHILD = r"""
import random, sys
from pathlib import Path
from polecat.config import StoreConfig
from polecat.store.base import FetchRecord
from polecat.store.segstore import open_store

def body(i):
    # every 5th page repeats an earlier body, so revisits are written too
    j = i - 3 if i % 5 == 4 else i
    return random.Random(j).randbytes(2000 + j % 7000) + b"<html>%d</html>" % j

store = open_store(Path(sys.argv[1]), StoreConfig(segment_bytes=64 * 1024))
i = start = store.stats().records
print("ready", start, flush=True)
while i < start + 20000:
    b = body(i)
    store.put(FetchRecord.for_body(f"http://h{i % 13}.test/p{i}", b, fetched_at=1.7e9 + i), b)
    i += 1
    if i % 8 == 0:
        store.flush()
        print("acked", i, flush=True)
"""


def body(i: int) -> bytes:
    j = i - 3 if i % 5 == 4 else i
    return random.Random(j).randbytes(2000 + j % 7000) + b"<html>%d</html>" % j


def run_and_kill(root: Path, rng: random.Random) -> int:
    """Start the writer, SIGKILL it at a random moment, return the last acknowledged count."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert ready.wait(30), "writer did not start"
        time.sleep(rng.uniform(0.05, 0.5))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        reader.join(10)
    assert proc.returncode == -signal.SIGKILL, "the writer must die by the kill, not finish"
    # a kill can cut the last line short: only whole lines count
    acked = [int(line.split()[1]) for line in lines if line.startswith("acked") and line.endswith("\n")]
    return acked[-1] if acked else int(lines[0].split()[1])


def test_kill_9_during_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    root = tmp_path / "store"
    checked = cut = 0
    for _ in range(5):
        acked = run_and_kill(root, rng)
        store = open_store(root, StoreConfig(segment_bytes=64 * 1024))
        assert isinstance(store, SegmentStore)
        cut += store.cut_bytes
        records = store.stats().records
        assert records >= acked
        for i in range(checked, records):
            (rec,) = store.history(f"http://h{i % 13}.test/p{i}")
            assert store.get(rec.content_hash) == body(i)
        report = verify(store)
        assert report.ok, report.faults
        checked = records
        store.close()
    assert checked > 40  # the loop did write through several kills
    assert cut > 0  # and at least one kill landed between an append and its flush
