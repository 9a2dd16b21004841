"""Reading a dead node's sealed segments back from object storage (polecat/store/remote.py rule 2):
time and peak memory of one segment's records, streamed by ranged reads against read whole first (what
the code before did), over a ``file://`` remote.

    python -m benchmarks.bench_sealed_read [--mib 128] [--repeat 3]

Peak memory is the process's resident high-water mark over the read (``VmHWM`` after resetting it
through ``/proc/self/clear_refs``), less the resident size before it: it counts what obstore and zstd
hold outside the Python heap too (memory a read freed may stay resident for the next: the streamed
reads run first, and a repeat's figure can read lower than the first's). The pages are incompressible
(random bytes), so the segment is as big compressed: the worst case for holding it whole.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import zstandard

from polecat.config import StoreConfig
from polecat.store import remote
from polecat.store.base import FetchRecord
from polecat.store.object import make_object_store
from polecat.store.segstore import SegmentStore


def _status(field: str) -> int:
    """A ``/proc/self/status`` figure in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _whole(store: Any, name: str) -> Iterator[bytes]:
    """The read before rule 2: the segment fetched whole, then decompressed as a stream."""
    data = bytes(obstore.get(store, name).bytes())
    reader = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data),
                                                                          read_across_frames=True))
    while (record := remote._next_record(reader)) is not None:
        yield record


def _measure(read: Any, store: Any, name: str) -> tuple[float, int, int]:
    """Seconds, records and peak extra resident bytes of one read of segment ``name``."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
    before = _status("VmRSS")
    t0 = time.perf_counter()
    n = sum(1 for _ in remote.fetches(read(store, name), set(), []))
    return time.perf_counter() - t0, n, _status("VmHWM") - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=128, help="segment size in MiB (1 MiB pages)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polecat-bench-sealed-") as tmp:
        url = (Path(tmp) / "remote").as_uri()
        with SegmentStore.open(Path(tmp) / "store", StoreConfig(url=url)) as store:
            for i in range(args.mib):
                body = os.urandom(1 << 20)
                store.put(FetchRecord.for_body(f"http://big.test/{i}", body, fetched_at=1.79e9 + i,
                                               headers=(("Content-Type", "application/octet-stream"),)), body)
            store.seal()
            store.flush()
        objects = make_object_store(url, ())
        (names,) = remote.stores_in(objects).values()
        print(f"segment: {args.mib} MiB of incompressible pages, {len(names)} object(s)")
        print(f"{'read':<10} {'records':>7} {'seconds':>8} {'MiB/s':>7} {'peak extra RSS MiB':>19}")
        for label, read in (("streamed", remote.records), ("whole", _whole)):
            for _ in range(args.repeat):
                seconds, n, peak = _measure(read, objects, names[0])
                rate = args.mib / seconds
                print(f"{label:<10} {n:>7} {seconds:>8.2f} {rate:>7.0f} {peak / (1 << 20):>19.1f}")


if __name__ == "__main__":
    main()
