"""Page-store benchmarks: append throughput, bytes on disk, read latency, codecs, zstd dictionaries.

    python -m benchmarks.bench_store [--pages 2000] [--corpus DIR]

Everything runs on one core, in a temporary directory, bounded in count. The synthetic pages are 40 KB
HTML documents: a per-site boilerplate (head, navigation, footer) around Zipf-distributed text in
ordinary markup. The real corpus defaults to the HTML API documentation that Debian's ``nodejs``
package installs (``/usr/share/doc/nodejs/api``; ``all.html``, their concatenation, is left out).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import zstandard

from polecat.config import StoreConfig
from polecat.store import warc
from polecat.store.base import FetchRecord
from polecat.store.segstore import open_store

PAGE_BYTES = 40_000
DEFAULT_CORPUS = Path("/usr/share/doc/nodejs/api")


def synthetic_pages(n: int, seed: int = 1) -> list[bytes]:
    """``n`` pages of about 40 KB from 20 sites, each with its own boilerplate and a shared vocabulary."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(8000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    sites = []
    for s in range(20):
        nav = "".join(
            f'<li><a href="/section/{rng.choice(vocab)}/{i}">{rng.choice(vocab).title()}</a></li>'
            for i in range(60)
        )
        head = (
            f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{{title}} | site{s}</title>"
            f'<link rel=stylesheet href="/static/site{s}.css"><script src="/static/app{s}.js"></script>'
            f'</head><body><header class="site-header"><nav><ul>{nav}</ul></nav></header><main>'
        )
        foot = (
            "</main><footer>" + " ".join(rng.choices(vocab, k=150)) + f"<p>&copy; site{s}</p></footer>"
            "</body></html>"
        )
        sites.append((head, foot))
    pages = []
    for i in range(n):
        head, foot = sites[i % len(sites)]
        parts = [head.replace("{title}", " ".join(rng.choices(vocab, weights, k=5)))]
        size = len(parts[0]) + len(foot)
        while size < PAGE_BYTES:
            words = rng.choices(vocab, weights, k=rng.randint(20, 120))
            link = f'<a href="https://h{rng.randint(0, 99)}.test/{rng.choice(vocab)}">{rng.choice(vocab)}</a>'
            para = f'<p class="c{rng.randint(0, 9)}">{" ".join(words)} {link}.</p>\n'
            parts.append(para)
            size += len(para)
        pages.append(("".join(parts) + foot).encode()[:PAGE_BYTES])
    return pages


def corpus_pages(directory: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(directory.glob("*.html")) if p.name != "all.html"]


def records_of(pages: list[bytes]) -> list[tuple[FetchRecord, bytes]]:
    hdrs = (
        ("Content-Type", "text/html; charset=utf-8"),
        ("Server", "bench"),
        ("Cache-Control", "max-age=60"),
    )
    return [
        (FetchRecord.for_body(f"https://h{i % 20}.test/page/{i}", b, fetched_at=1.7e9 + i, headers=hdrs), b)
        for i, b in enumerate(pages)
    ]


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def bench_append_and_read(pages: list[bytes]) -> None:
    recs = records_of(pages)
    raw = sum(len(b) for b in pages)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "store", StoreConfig())
        lat: list[float] = []
        flushes: list[float] = []
        start = time.perf_counter()
        for i, (rec, body) in enumerate(recs):
            t = time.perf_counter()
            store.put(rec, body)
            lat.append(time.perf_counter() - t)
            if i % 250 == 249:  # the node checkpoints every ~250 ms
                t = time.perf_counter()
                store.flush()
                flushes.append(time.perf_counter() - t)
        store.flush()
        elapsed = time.perf_counter() - start
        disk = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
        seg_bytes = sum(f.stat().st_size for f in (Path(tmp) / "store" / "segments").iterdir())
        print(
            f"append: {len(recs)} pages of {raw / len(recs) / 1000:.1f} KB in {elapsed:.2f} s = "
            f"{len(recs) / elapsed:,.0f} pages/s, {raw / elapsed / 1e6:.1f} MB/s (fsync'd flush every 250)"
        )
        print(
            f"  put latency p50 {pct(lat, 0.5) * 1e6:.0f} us, p99 {pct(lat, 0.99) * 1e6:.0f} us; "
            f"flush p50 {pct(flushes, 0.5) * 1e3:.1f} ms"
        )
        print(
            f"  on disk: {seg_bytes / len(recs):,.0f} B/page in segments, {disk / len(recs):,.0f} B/page "
            f"with the LMDB index; ratio raw/segments {raw / seg_bytes:.2f}"
        )
        order = [r.content_hash for r, _ in recs]
        random.Random(2).shuffle(order)
        reads: list[float] = []
        for digest in order[:2000]:
            t = time.perf_counter()
            store.get(digest)
            reads.append(time.perf_counter() - t)
        print(
            f"  get by hash (page cache warm, verified): p50 {pct(reads, 0.5) * 1e6:.0f} us, "
            f"p99 {pct(reads, 0.99) * 1e6:.0f} us"
        )
        store.close()


def measure(
    name: str,
    records: list[bytes],
    compress: Callable[[bytes], bytes],
    decompress: Callable[[bytes], bytes],
    extra_bytes: int = 0,
) -> None:
    t = time.perf_counter()
    frames = [compress(r) for r in records]
    c_time = time.perf_counter() - t
    t = time.perf_counter()
    for f in frames:
        decompress(f)
    d_time = time.perf_counter() - t
    raw = sum(len(r) for r in records)
    packed = sum(len(f) for f in frames) + extra_bytes
    print(
        f"  {name:<28} ratio {raw / packed:5.2f}  {packed / len(records):8,.0f} B/rec  "
        f"compress {raw / c_time / 1e6:6.0f} MB/s  decompress {raw / d_time / 1e6:6.0f} MB/s"
    )


def bench_codecs(label: str, pages: list[bytes]) -> None:
    records = [warc.encode_response(r, b, bytes(32)) for r, b in records_of(pages)]
    print(
        f"per-record codecs on {label} ({len(records)} WARC records, "
        f"{statistics.mean(len(r) for r in records) / 1000:.1f} KB mean):"
    )
    for level in (1, 3, 6):
        c = zstandard.ZstdCompressor(level=level, write_checksum=True)
        d = zstandard.ZstdDecompressor()
        measure(f"zstd -{level}", records, c.compress, d.decompress)
    for level in (1, 6):
        measure(
            f"gzip -{level} (classic .warc.gz)",
            records,
            functools.partial(gzip.compress, compresslevel=level, mtime=0),
            gzip.decompress,
        )
    # A dictionary trained on the first records of a segment, used for the rest of it.
    train, rest = records[: len(records) // 4], records[len(records) // 4 :]
    for size in (32_768, 112_640):
        t = time.perf_counter()
        # fixed cover parameters: the default parameter search takes ~50x longer for ~1% more
        samples: list[bytes | bytearray | memoryview] = list(train)
        dictionary = zstandard.train_dictionary(size, samples, k=200, d=8, threads=1)
        took = time.perf_counter() - t
        c = zstandard.ZstdCompressor(level=3, dict_data=dictionary, write_checksum=True)
        d = zstandard.ZstdDecompressor(dict_data=dictionary)
        measure(
            f"zstd -3 + {size // 1024} KiB dict",
            rest,
            c.compress,
            d.decompress,
            extra_bytes=len(dictionary.as_bytes()),
        )
        print(f"    (training on {len(train)} records took {took:.2f} s)")
    plain = zstandard.ZstdCompressor(level=3, write_checksum=True)
    measure("zstd -3 on the same records", rest, plain.compress, zstandard.ZstdDecompressor().decompress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    pages = synthetic_pages(min(args.pages, 20_000))
    bench_append_and_read(pages)
    bench_codecs("synthetic 40 KB HTML", pages[:1000])
    if args.corpus.is_dir():
        real = corpus_pages(args.corpus)
        print(f"real corpus {args.corpus}: {len(real)} pages, {sum(map(len, real)) / 1e6:.1f} MB")
        bench_append_and_read(real)
        bench_codecs(f"{args.corpus}", real)
    else:
        print(f"(no real corpus at {args.corpus}; give --corpus DIR of .html files)")


if __name__ == "__main__":
    main()
