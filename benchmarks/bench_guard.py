"""The parse guard's two paths on the benchmark corpora: Python (regex + numpy prefilter) and the kernel.

    python -m benchmarks.bench_guard [--pages 400] [--corpus small,real,docs] [--rounds 3]

For each corpus, CPU microseconds a page of :func:`polecat.parse.guard.bound_html` on the pure-Python path
and on the native kernel (polecat/parse/_guard.c), in alternating rounds in one process, over all pages
and over those past ``SHALLOW_TAGS`` "<" (the only ones the depth rule scans); every page's result is
checked equal on both paths first.
"""

from __future__ import annotations

import argparse
import time
from types import ModuleType

from benchmarks.corpora import CORPORA
from polecat.parse import guard
from polecat.parse.charset import decode_html


def cpu_us(htmls: list[str], kernel: ModuleType | None) -> float:
    guard._NATIVE = kernel
    start = time.process_time()
    for html in htmls:
        guard.bound_html(html)
    return (time.process_time() - start) / max(1, len(htmls)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=400, help="pages of the synthetic corpus")
    ap.add_argument("--corpus", default=",".join(CORPORA), help="comma-separated: " + ",".join(CORPORA))
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of both paths")
    args = ap.parse_args()
    kernel = guard._NATIVE
    if kernel is None:
        raise SystemExit("the kernel polecat.parse._guard is not loaded (not built, or POLECAT_PURE_PYTHON)")
    print(f"CPU µs a page, best of {args.rounds} alternating rounds")
    print("| corpus | pages | Python | native | ratio |\n|---|---|---|---|---|")
    for name in args.corpus.split(","):
        corpus = CORPORA[name](args.pages)
        if corpus is None:
            print(f"| {name} | skipped: not installed | | | |")
            continue
        htmls = [decode_html(guard.bound_body(body)[0], "utf-8") for body in corpus.bodies]
        for html in htmls:
            guard._NATIVE = None
            pure = guard.bound_html(html)
            guard._NATIVE = kernel
            assert guard.bound_html(html) == pure, "the two paths differ"
        deep = [h for h in htmls if h.count("<") > guard.SHALLOW_TAGS]
        for label, pages in ((f"{name}", htmls), (f"{name}, past {guard.SHALLOW_TAGS} '<'", deep)):
            if not pages:
                continue
            pure_us, native_us = [], []
            for _ in range(args.rounds):
                pure_us.append(cpu_us(pages, None))
                native_us.append(cpu_us(pages, kernel))
            py, c = min(pure_us), min(native_us)
            print(f"| {label} | {len(pages)} | {py:,.1f} | {c:,.1f} | {py / c:.1f}x |")
    guard._NATIVE = kernel


if __name__ == "__main__":
    main()
