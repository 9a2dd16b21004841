"""Link canonicalization over a whole web in crawl order: canon.py's Python code against its native kernel.

    python -m benchmarks.bench_canon [--corpus small,docs] [--pages N] [--rounds 3]

Every page of the web is rendered and its links extracted once, untimed: ``small`` is the comparison's
``--size small`` web (10,000 pages) breadth-first from its seeds, ``docs`` the real web of
benchmarks/docweb.py in the order its ground truth was found. Then, ``--rounds`` times and alternating the
two, a fresh Canonicalizer of each path canonicalizes every page's links in that order, as a crawl's node
does (its memo warms over the web: navigation links hit, noisy spellings seen once miss), and the CPU µs a
page is printed. The two paths' outputs, memos and counters are asserted equal. ``bench_stages`` measures
the same stage on 400 pages with a fresh canonicalizer instead.
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from collections.abc import Callable, Sequence
from unittest import mock

from benchmarks.docweb import doc_web
from benchmarks.sizes import SIZES
from polecat.dedup import canon
from polecat.parse.html import parse_html
from polecat.testing.sitegen import Site

PORT = 8080
Pages = list[tuple[Sequence[str], str]]
"""(hrefs, base) of each page, in crawl order."""


def small_web(pages: int | None = None) -> Pages:
    """The ``small`` comparison web breadth-first from its seeds (every host's root), or its first
    ``pages``."""
    site = Site(SIZES["small"].spec)
    roots = [site.lookup(host, "/") for host in site.hosts]
    queue = deque(page for page in roots if page is not None)
    seen = set(queue)
    out: Pages = []
    while queue and (pages is None or len(out) < pages):
        page = queue.popleft()
        parsed = parse_html(site.render(page, PORT).decode(), site.url(page, PORT))
        out.append((parsed.links, parsed.base))
        for target in site.outlinks(page):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return out


def docs_web(pages: int | None = None) -> Pages | None:
    """The real web's HTML pages in the order they were found, or None if no package of it is installed."""
    web = doc_web(PORT)
    if web is None:
        return None
    parsed = (parse_html(body.decode("utf-8", "replace"), url) for url, body in web.html.items())
    out: Pages = [(p.links, p.base) for p in parsed]
    return out[:pages]


WEBS: dict[str, Callable[[int | None], Pages | None]] = {"small": small_web, "docs": docs_web}


def python_canonicalizer() -> canon.Canonicalizer:
    """A Canonicalizer running canon.py's Python code even where the native kernel is built."""
    with mock.patch.object(canon, "_KERNEL", None):
        return canon.Canonicalizer()


def crawl(pages: Pages, canonicalizer: canon.Canonicalizer) -> tuple[float, list[list[str]]]:
    """CPU µs a page of canonicalizing every page's links in order, and the results."""
    out: list[list[str]] = []
    start = time.process_time()
    for hrefs, base in pages:
        out.append(canonicalizer.canonicalize_links(hrefs, base))
    return (time.process_time() - start) / len(pages) * 1e6, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="small,docs", help="comma-separated: " + ",".join(WEBS))
    ap.add_argument("--pages", type=int, default=None, help="only the first N pages in crawl order")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if canon._KERNEL is None:
        raise SystemExit("the native kernel is not built (or POLECAT_PURE_PYTHON=1): nothing to compare")
    for name in args.corpus.split(","):
        pages = WEBS[name](args.pages)
        if pages is None:
            print(f"{name}: skipped, its pages are not installed (see benchmarks/docweb.py)")
            continue
        links = sum(len(hrefs) for hrefs, _ in pages)
        print(f"{name}: {len(pages)} pages, {links / len(pages):.0f} links a page")
        timings: dict[str, list[float]] = {"python": [], "native": []}
        for _ in range(args.rounds):
            slow, fast = python_canonicalizer(), canon.Canonicalizer()
            us_python, expected = crawl(pages, slow)
            us_native, got = crawl(pages, fast)
            assert got == expected and fast.stats() == slow.stats() and fast._memo == slow._memo
            timings["python"].append(us_python)
            timings["native"].append(us_native)
        stats = fast.stats()
        print(f"  memo: {len(fast._memo)} entries at the end; {stats.total} links, {stats.rejected} rejected,"
              f" {stats.collapsed} rewritten; outputs, memos and counters equal in every round")
        for path, runs in timings.items():
            print(f"  {path}: " + " / ".join(f"{us:.1f}" for us in runs) + " CPU µs a page")


if __name__ == "__main__":
    main()
