"""Worst case per stage: CPU time and memory of the per-page stages on adversarial inputs.

    python -m benchmarks.bench_stages --worst-case [--size 10485760] [--timeout 60] [--unguarded]

Each hostile page class of :mod:`polecat.testing.hostile_pages` (at ``--size`` bytes, the body cap by
default) runs in a fresh child process through the stages the node runs for one page (charset decode,
parse bounds, parse, fingerprint, canonicalize links, content hash, store put), and the table gives CPU
milliseconds per stage and the growth of peak RSS over the process holding the body. ``--unguarded``
runs the same stages without :mod:`polecat.parse.guard` (what the node did before issue 10); a class
that exceeds ``--timeout`` seconds of wall time is killed and shown as such. robots.txt classes (512 KiB,
the cap RFC 9309 requires) give the parse time and the time of one URL check.

    python -m benchmarks.worst_case --pool [--pages 300]

measures the alternative the guard was weighed against: the per-page parse in a worker process (a
process pool with a deadline could abandon a hostile page), as the parent's CPU per page for the round
trip, beside the inline parse and the guard's scans, on pages of the ``small`` web.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from polecat.config import StoreConfig
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.minhash import fingerprint
from polecat.heap import fix_mmap_threshold
from polecat.parse import robots_match
from polecat.parse.charset import decode_html
from polecat.parse.guard import MAX_TEXT_CHARS, bound_body, bound_html, bound_links
from polecat.parse.html import ParsedPage, parse_html
from polecat.parse.robots import RobotsRules
from polecat.store.base import FetchRecord, content_hash
from polecat.store.segstore import open_store
from polecat.testing.hostile_pages import PAGES, ROBOTS

STAGES = ("decode", "bounds", "parse", "fingerprint", "canonicalize", "hash", "store")
ROBOTS_SIZE = 512 * 1024


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def page_stages(body: bytes, guarded: bool) -> dict[str, float]:
    """CPU ms of each stage for one page (the pipeline's order), and ``rss`` (MiB of peak growth)."""
    out: dict[str, float] = {}
    base = _rss_mib()

    def stage(name: str, fn: Callable[[], object]) -> object:
        start = time.process_time()
        result = fn()
        out[name] = (time.process_time() - start) * 1e3
        return result

    head, cut = bound_body(body) if guarded else (body, False)
    decoded = stage("decode", lambda: decode_html(head, None))
    assert isinstance(decoded, str)
    html = decoded
    if guarded:
        html = str(stage("bounds", lambda: bound_html(decoded, cut=cut).html))
    parsed = stage("parse", lambda: parse_html(html, "http://h.test/"))
    assert isinstance(parsed, ParsedPage)
    text = parsed.text[:MAX_TEXT_CHARS] if guarded else parsed.text
    links = bound_links(parsed.links)[0] if guarded else list(parsed.links)
    stage("fingerprint", lambda: fingerprint(text))
    stage("canonicalize", lambda: Canonicalizer().canonicalize_links(links, parsed.base))
    digest = stage("hash", lambda: content_hash(body))
    assert isinstance(digest, bytes)
    with tempfile.TemporaryDirectory() as work:
        store = open_store(Path(work) / "store", StoreConfig())
        record = FetchRecord("http://h.test/", 0.0, 200, (("Content-Type", "text/html"),), digest, len(body))
        def put() -> None:
            store.put(record, body)
            store.flush()

        stage("store", put)
        store.close()
    out["rss"] = _rss_mib() - base
    return out


def robots_stages(text: str, guarded: bool) -> dict[str, float]:
    """Parse ms and one URL check's µs (mean of 500 paths) for a robots.txt."""
    if not guarded:
        robots_match.INDEX_FROM = 10**9  # the plain scan of every wildcard rule, as before issue 10
    start = time.process_time()
    rules = RobotsRules(text, "polecat")
    parsed = time.process_time()
    for i in range(500):
        rules.allowed(f"http://h.test/q{i}/some/ordinary/path?id={i}")
    return {"parse": (parsed - start) * 1e3, "check_us": (time.process_time() - parsed) / 500 * 1e6}


def _child(kind: str, name: str, size: int, guarded: bool) -> None:
    if guarded:
        fix_mmap_threshold()  # as the node does
    if kind == "page":
        result = page_stages(PAGES[name](size), guarded)
    else:
        result = robots_stages(ROBOTS[name](ROBOTS_SIZE).decode(), guarded)
    print(json.dumps(result))


def _run(kind: str, name: str, size: int, guarded: bool, timeout: float) -> dict[str, float] | None:
    cmd = [sys.executable, "-m", "benchmarks.worst_case", "--child", kind, name, str(size)]
    cmd += [] if guarded else ["--unguarded"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    result: dict[str, float] = json.loads(done.stdout)
    return result


def report(size: int, timeout: float, guarded: bool) -> None:
    """Print the worst-case tables (one child process per class)."""
    label = "guarded" if guarded else "unguarded"
    print(f"Worst case per stage, {label}, pages of {size / 2**20:.1f} MiB: CPU ms, peak RSS growth\n")
    print("| class | " + " | ".join(STAGES) + " | total ms | RSS +MiB |")
    print("|---" * (len(STAGES) + 3) + "|")
    for name in PAGES:
        row = _run("page", name, size, guarded, timeout)
        if row is None:
            print(f"| {name} | " + " | ".join("" for _ in STAGES) + f" | > {timeout:.0f} s (killed) | |")
            continue
        cells = [f"{row[s]:.0f}" if s in row else "-" for s in STAGES]
        total = sum(row.get(s, 0.0) for s in STAGES)
        print(f"| {name} | " + " | ".join(cells) + f" | **{total:.0f}** | {row['rss']:.0f} |")
    print(f"\nrobots.txt of {ROBOTS_SIZE // 1024} KiB, {label}\n")
    print("| class | parse ms | one URL check µs |\n|---|---|---|")
    for name in ROBOTS:
        row = _run("robots", name, 0, guarded, timeout)
        if row is None:
            print(f"| {name} | > {timeout:.0f} s (killed) | |")
        else:
            print(f"| {name} | {row['parse']:.0f} | {row['check_us']:.1f} |")


def _parse_for_pool(body: bytes, url: str) -> tuple[tuple[str, ...], str, str]:
    parsed = parse_html(decode_html(body, "utf-8"), url)
    return parsed.links, parsed.text, parsed.base


def pool_overhead(pages: int) -> None:
    """Print CPU µs a page: inline parse, guard scans, and the parent's side of a process-pool parse."""
    from concurrent.futures import ProcessPoolExecutor

    from benchmarks.corpora import CORPORA

    corpus = CORPORA["small"](pages)
    assert corpus is not None
    work = list(zip(corpus.bodies, corpus.urls, strict=True))

    def cpu_us(fn: Callable[[bytes, str], object]) -> float:
        start = time.process_time()
        for body, url in work:
            fn(body, url)
        return (time.process_time() - start) / len(work) * 1e6

    inline = cpu_us(_parse_for_pool)
    guard = cpu_us(lambda body, _: bound_html(decode_html(body, "utf-8")))
    with ProcessPoolExecutor(1) as pool:
        pool.submit(_parse_for_pool, *work[0]).result()
        parent = cpu_us(lambda body, url: pool.submit(_parse_for_pool, body, url).result())
    print(f"| inline parse | {inline:.0f} |\n| decode + guard scans | {guard:.0f} |\n"
          f"| process pool, parent side only | {parent:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=3, metavar=("KIND", "NAME", "SIZE"), help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=10 * 2**20)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--unguarded", action="store_true")
    ap.add_argument("--pool", action="store_true", help="process-pool round trip against inline parsing")
    ap.add_argument("--pages", type=int, default=300)
    args = ap.parse_args()
    if args.pool:
        pool_overhead(args.pages)
    elif args.child:
        kind, name, size = args.child
        _child(kind, name, int(size), not args.unguarded)
    else:
        report(args.size, args.timeout, not args.unguarded)


if __name__ == "__main__":
    main()
