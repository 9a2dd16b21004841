"""A sitemap at the protocol's size: every URL queued, in bounded memory, whatever fetch.max_body_bytes.

    python -m benchmarks.bench_sitemap --urls 50000

The loopback news site (polecat/testing/newsweb.py) is crawled twice by ``polecat crawl``, each in its own
process, ``--max-pages 8`` (the site's few pages, and the sitemap): once with no sitemap (the ordinary
crawl), once with robots.txt naming a urlset of ``--urls`` URLs whose entries are padded to 900 bytes
(50,000 URLs: a 45 MB file), gzipped on the wire, or with ``--plain`` as it is. Figures per run: wall
seconds, the peak RSS of the crawl process (``ru_maxrss`` of a wrapper's only child), the URLs the frontier
holds afterwards (queued or finished), and the sitemap's sizes.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from polecat.frontier.status import read_status
from polecat.testing.newsweb import NewsWeb, big_sitemap

_WRAPPER = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r)")


@dataclass(frozen=True)
class Run:
    wall_s: float
    peak_rss_mb: float
    urls: int
    """URLs the frontier holds: queued plus finished."""


def crawl(site: NewsWeb, data: Path) -> Run:
    """One ``polecat crawl`` of ``site`` into ``data``, in a process whose peak RSS is measured alone."""
    cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "polecat", "crawl", site.origin + "/",
           "--data", str(data), "--allow-private", "--rate", "50", "--max-pages", "8", "-q"]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    if done.returncode not in (0, 3):  # 3: stopped at --max-pages with URLs left
        raise RuntimeError(f"crawl failed ({done.returncode}): {done.stderr[-2000:]}")
    status = read_status(data / "frontier")
    finished = sum(n for _, n in status.done)
    return Run(wall, int(done.stdout.split()[-1]) / 1024, status.queued + finished)


def measure(urls: int, work: Path, gzip: bool = True) -> tuple[Run, Run, int, int]:
    """The ordinary crawl, the crawl with a sitemap of ``urls`` URLs (gzipped or not), and the sitemap's
    XML and wire sizes."""
    with NewsWeb(item_period=3600.0) as plain:
        ordinary = crawl(plain, work / "plain")
    with NewsWeb(item_period=3600.0, sitemap_urls=urls, sitemap_gzip=gzip) as site:
        xml = len(big_sitemap(site.origin, urls))
        wire = len(site.sitemap_body)
        with_sitemap = crawl(site, work / "sitemap")
    return ordinary, with_sitemap, xml, wire


def main(argv: list[str] | None = None) -> tuple[Run, Run]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--urls", type=int, default=50_000)
    ap.add_argument("--plain", action="store_true", help="serve the sitemap as XML, not gzipped")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ordinary, with_sitemap, xml, wire = measure(args.urls, Path(tmp), not args.plain)
    print(f"sitemap: {args.urls} URLs, {xml / 1e6:.1f} MB of XML, {wire / 1e6:.2f} MB on the wire "
          f"({'plain' if args.plain else 'gzip'})")
    print("| crawl | wall s | peak RSS MB | URLs in the frontier |")
    print("|---|---|---|---|")
    for name, run in (("ordinary (no sitemap)", ordinary), ("with the sitemap", with_sitemap)):
        print(f"| {name} | {run.wall_s:.1f} | {run.peak_rss_mb:.0f} | {run.urls} |")
    print(f"benchmark process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return ordinary, with_sitemap


if __name__ == "__main__":
    main()
