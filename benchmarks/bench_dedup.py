"""Dedup benchmark: canonicalizer speed, Bloom memory / false positives / throughput, fingerprint quality.

Run: ``python -m benchmarks.bench_dedup [--bloom-sizes 10000000,100000000] [--docs 500] [--web-hosts 40]``
(near-duplicate figures come from :mod:`benchmarks.bench_dedup_near`).
Each section prints one line of figures; benchmarks/README.md ("Dedup") keeps the results.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks import bench_dedup_near
from polecat.dedup.bloom import ScalableBloom
from polecat.dedup.canon import Canonicalizer, url_fingerprint

BATCH = 16_384
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def keys(rng: np.random.Generator, n: int) -> list[bytes]:
    raw = rng.bytes(16 * n)
    return [raw[i : i + 16] for i in range(0, 16 * n, 16)]


def bench_canon(n: int = 200_000) -> None:
    canon = Canonicalizer()
    base = "https://www.example.com/section/index.html?page=2"
    links = [
        "/section/article-{i}.html",
        "article-{i}.html#comments",
        "https://www.example.com/tag/{i}?utm_source=feed&utm_medium=rss",
        "../other/{i}/?b=2&a=1&sessionid=x{i}",
        "//cdn.example.net/img/{i}.png",
        "https://Example.COM:443/%7Euser/{i}/./x/../y",
    ]
    urls = [links[i % len(links)].format(i=i) for i in range(n)]
    start = time.perf_counter()
    out = [canon.canonicalize(u, base) for u in urls]
    canon_s = time.perf_counter() - start
    start = time.perf_counter()
    for u in out:
        url_fingerprint(u or "")
    fp_s = time.perf_counter() - start
    st = canon.stats()
    print(
        f"canon: {canon_s / n * 1e6:.2f} us/URL (relative links against a base), fingerprint "
        f"{fp_s / n * 1e6:.2f} us/URL; collapsed {st.collapsed}/{st.total}"
    )


def bench_bloom(n: int, capacity: int, probes: int = 1_000_000) -> None:
    rng = np.random.default_rng(n ^ capacity)
    ScalableBloom(BATCH, 0.01).add_many(keys(rng, BATCH))  # warm the allocator: count only the filter
    gc.collect()
    before = rss_bytes()
    bloom = ScalableBloom(capacity, 0.01)
    insert_s = 0.0
    for done in range(0, n, BATCH):
        batch = keys(rng, min(BATCH, n - done))
        start = time.perf_counter()
        bloom.add_many(batch)
        insert_s += time.perf_counter() - start
        del batch
    gc.collect()
    resident = rss_bytes() - before
    bit_arrays, layers = bloom.memory_bytes, bloom.layers
    fresh = keys(rng, probes)
    false_positives = sum(k in bloom for k in fresh[: probes // 4])
    start = time.perf_counter()
    for i in range(0, probes, BATCH):
        bloom.add_many(fresh[i : i + BATCH])
    check_s = time.perf_counter() - start
    single = keys(rng, 100_000)
    start = time.perf_counter()
    for k in single:
        bloom.add(k)
    single_s = time.perf_counter() - start
    print(
        f"bloom n={n:,} capacity={capacity:,} layers={layers}: resident {resident / n:.3f} B/URL "
        f"(bit arrays {bit_arrays / n:.3f}), FP {false_positives / (probes // 4):.3%} at 1 % target, "
        f"add_many (check+insert) {n / insert_s:,.0f}/s while filling, {probes / check_s:,.0f}/s past it, "
        f"single add {len(single) / single_s:,.0f}/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bloom-sizes", default="10000000", help="comma-separated URL counts")
    parser.add_argument("--docs", type=int, default=500, help="documents per fingerprint quality set")
    parser.add_argument("--web-hosts", type=int, default=40, help="test-web hosts of 50 pages (35 KB)")
    parser.add_argument("--bloom-case", help="N:CAPACITY, one Bloom case (run in a fresh process)")
    args = parser.parse_args()
    if args.bloom_case:
        n, capacity = map(int, args.bloom_case.split(":"))
        bench_bloom(n, capacity)
        return
    bench_canon()
    for line in bench_dedup_near.run(args.docs, args.web_hosts):
        print(line, flush=True)
    for n in (int(s) for s in args.bloom_sizes.split(",")):
        for capacity in (n, n // 10):
            # A fresh process per case: freed memory of an earlier case would hide this one's growth.
            case = ["--bloom-case", f"{n}:{capacity}"]
            subprocess.run([sys.executable, "-m", "benchmarks.bench_dedup", *case], check=True)


if __name__ == "__main__":
    main()
