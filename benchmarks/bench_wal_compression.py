"""How well the frontier log's entries compress (issue 39; polecat/frontier/wal.py rule 12): each entry's
payload of a log file compressed alone with zstd at levels 1-3, with and without a dictionary trained on
the log's first entries, and the CPU to compress and to decompress a MB of payload (one thread).

    timeout 900 nice -n 5 python -m benchmarks.bench_wal_compression LOG [LOG ...] [--levels 1 2 3]

A LOG is only read (a copy of a crashed frontier's ``wal.log``, e.g. ``bench_frontier --save-crash``'s or
a seeds-only node run's). Entries already compressed (this release's) are measured as their msgpack.
The dictionary is trained on the first ``--train`` entries (cut into 16 KiB samples; with ``--split``, on
the first fifth of the pieces) and measured on the others, so that no entry is compressed with a
dictionary that saw it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path

import zstandard

from polecat.frontier.wal import _Scan

_MB = 1 << 20


def payloads(path: Path) -> Iterator[bytes]:
    """Each whole entry's payload of the log at ``path``, as msgpack (uncompressed)."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        scan = _Scan(fh, fh.tell())
        for _, start, length in list(scan.spans()):
            fh.seek(start)
            payload = fh.read(length)
            compressed = payload.startswith(zstandard.FRAME_HEADER)  # wal.py rule 12
            yield zstandard.ZstdDecompressor().decompress(payload) if compressed else payload


def measure(name: str, entries: list[bytes], level: int,
            dictionary: zstandard.ZstdCompressionDict | None) -> None:
    """Compress and decompress each of ``entries`` alone; print the ratio and CPU per MB of payload."""
    cctx = zstandard.ZstdCompressor(level=level, dict_data=dictionary, write_content_size=True)
    dctx = zstandard.ZstdDecompressor(dict_data=dictionary)
    raw = sum(map(len, entries))
    t0 = time.process_time()
    packed = [cctx.compress(e) for e in entries]
    t1 = time.process_time()
    for p in packed:
        dctx.decompress(p)
    t2 = time.process_time()
    size = sum(map(len, packed))
    ms = 1000 * _MB / raw
    print(f"{name}: level {level}, {'dictionary' if dictionary else 'no dictionary'}: {raw / _MB:,.1f} MiB "
          f"-> {size / _MB:,.1f} MiB ({raw / size:.2f}x, {100 * size / raw:.1f} %); compress "
          f"{(t1 - t0) * ms:.2f} ms CPU/MB, decompress {(t2 - t1) * ms:.2f} ms CPU/MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--levels", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--train", type=int, default=20, metavar="ENTRIES")
    ap.add_argument("--max-mb", type=float, default=128, help="measure at most the first MB of each log")
    ap.add_argument("--split", type=int, default=0, metavar="BYTES",
                    help="cut each payload into pieces of BYTES, compressed apart: the smaller entries of "
                         "commits of fewer writes (a crawl at a low rate)")
    args = ap.parse_args()
    for path in args.logs:
        entries: list[bytes] = []
        for payload in payloads(path):
            step = args.split or len(payload)
            entries += [payload[i: i + step] for i in range(0, len(payload), step)]
            if sum(map(len, entries)) >= args.max_mb * _MB:
                break
        if not entries:
            print(f"{path}: skipped, no entries")
            continue
        sizes = sorted(map(len, entries))
        print(f"{path}: {len(entries):,} entries, {sum(sizes) / _MB:,.1f} MiB of payload, "
              f"median {sizes[len(sizes) // 2]:,} B, max {sizes[-1]:,} B")
        cut = len(entries) // 5 if args.split else args.train
        train, rest = entries[:cut], entries[cut:]
        if not train or not rest:  # nothing to train on, or nothing left to measure
            print(f"{path}: skipped, {len(entries)} entries: the dictionary takes the first {cut} "
                  "(--train) and at least one more is measured")
            continue
        samples: list[bytes | bytearray | memoryview] = [e[i: i + 16384] for e in train
                                                         for i in range(0, len(e), 16384)]
        try:
            dictionary: zstandard.ZstdCompressionDict | None = zstandard.train_dictionary(112_640, samples)
        except zstandard.ZstdError as exc:  # too few samples for zstd's trainer
            print(f"{path}: no dictionary from {len(samples)} samples of {len(train)} entries ({exc})")
            dictionary = None
        for level in args.levels:
            measure(path.name, rest, level, None)
            if dictionary is not None:
                measure(path.name, rest, level, dictionary)


if __name__ == "__main__":
    main()
