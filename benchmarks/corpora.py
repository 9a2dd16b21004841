"""The pages the per-page benchmarks run on, and the floor every crawler pays for them.

Corpora:

- ``small``: pages of the comparison's ``--size small`` web (``benchmarks/sizes.py``): 35.9 KB of HTML
  carrying 31.7 KB of text and ~60 links in every noisy form. It is already text-heavy in the issue's
  sense (~30 KB of text in ~35 KB pages), so no separate text-heavy preset exists.
- ``docs``: every HTML page of the real web ``benchmarks.compare --corpus real`` crawls (the Debian
  documentation packages of ``benchmarks/docweb.py`` that are installed: ~1,080 pages of 53 KB with nodejs,
  django, git, libxslt and valgrind docs), so the stage table and the crawl cover the same pages.
- ``real``: the HTML API documentation Debian's ``nodejs`` package installs (``/usr/share/doc/nodejs/api``,
  ``all.html`` left out): 64 real pages, 150 KB of HTML, 53 KB of text and ~200 links on average. When the
  package is not installed the corpus is unavailable and the benchmarks say so and skip it.

The floor of a page is what no crawler doing this job can skip: parsing it once (lexbor, from the bytes),
hashing it once (SHA-256: a crawler that writes WARC computes the payload digest whatever else it does,
and polecat's content address is that digest) and compressing it once (zstd at the store's level);
fetching it is measured separately by the bare GET loop (``benchmarks/runners/bare.py``). Issue 17 first
named BLAKE2b as the floor's hash, polecat's address until 2026-12: :func:`blake2b_us` measures it so the
benchmarks can print the ratio over that floor too.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import zstandard
from selectolax.lexbor import LexborHTMLParser

from benchmarks.docweb import doc_web
from benchmarks.sizes import SIZES
from polecat.testing.sitegen import Site

__all__ = ["CORPORA", "REAL_DOCS", "Corpus", "docs_corpus", "floor_stages", "real_corpus", "small_corpus"]

REAL_DOCS = Path("/usr/share/doc/nodejs/api")
PORT = 8080


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    urls: list[str]
    bodies: list[bytes]


def small_corpus(pages: int) -> Corpus:
    """``pages`` pages drawn (seeded) from the ``small`` comparison web."""
    site = Site(SIZES["small"].spec)
    ids = random.Random(1).sample(range(len(site.pages)), pages)
    return Corpus("small", [site.url(i, PORT) for i in ids], [site.render(i, PORT) for i in ids])


def real_corpus(directory: Path = REAL_DOCS) -> Corpus | None:
    """The documentation pages under ``directory`` as if served from one host, or None if there are none."""
    files = sorted(p for p in directory.glob("*.html") if p.name != "all.html")
    if not files:
        return None
    urls = [f"http://docs.test:{PORT}/api/{p.name}" for p in files]
    return Corpus("real", urls, [p.read_bytes() for p in files])


def docs_corpus() -> Corpus | None:
    """The HTML pages of the real web (benchmarks/docweb.py), or None if no package of it is installed."""
    web = doc_web(PORT)
    if web is None:
        return None
    return Corpus("docs", list(web.html), list(web.html.values()))


CORPORA: dict[str, Callable[[int], Corpus | None]] = {
    "small": small_corpus,
    "real": lambda _: real_corpus(),
    "docs": lambda _: docs_corpus(),
}
"""Corpus name -> loader taking the page count (the real corpus is what the package holds)."""


def _cpu_us(bodies: list[bytes], fn: Callable[[bytes], object]) -> float:
    start = time.process_time()
    for body in bodies:
        fn(body)
    return (time.process_time() - start) / len(bodies) * 1e6


FLOOR_HASH = "SHA-256"
"""The floor's hash stage, by the name :func:`floor_stages` gives its row."""


def floor_stages(bodies: list[bytes], zstd_level: int) -> list[tuple[str, float]]:
    """CPU µs a page of the floor's in-process stages: lexbor parse, SHA-256, zstd at ``zstd_level``."""
    compressor = zstandard.ZstdCompressor(level=zstd_level)
    return [
        ("lexbor parse (tree only)", _cpu_us(bodies, LexborHTMLParser)),
        (FLOOR_HASH, _cpu_us(bodies, lambda b: hashlib.sha256(b).digest())),
        (f"zstd -{zstd_level}", _cpu_us(bodies, compressor.compress)),
    ]


def blake2b_us(bodies: list[bytes]) -> float:
    """CPU µs a page of BLAKE2b (the hash issue 17 first put in the floor), for the ratio over that floor."""
    return _cpu_us(bodies, lambda b: hashlib.blake2b(b).digest())
