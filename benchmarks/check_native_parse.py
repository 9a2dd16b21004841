"""Check the native HTML extraction kernel against the Python path on every page of the benchmark corpora.

    python -m benchmarks.check_native_parse [--corpus small,real,docs]

For each page of the generated ``small`` web (all of it), the nodejs API docs (``real``) and the doc web
(``docs``, benchmarks/docweb.py): ``parse_html`` through the kernel and ``parse_html_python`` must return
the same ``ParsedPage``. Prints pages checked, pages that differ (the first few, with the fields that
differ) and kernel fallbacks; exits 1 on a difference. tests/test_parse_native.py runs a sample of this.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from benchmarks.corpora import Corpus, docs_corpus, real_corpus, small_corpus
from benchmarks.sizes import SIZES
from polecat.parse import html
from polecat.testing.sitegen import Site


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="small,real,docs", help="comma-separated: small,real,docs")
    args = ap.parse_args()
    if html._kernel.extract is None:
        sys.exit("the native kernel is not in use (not built, POLECAT_PURE_PYTHON=1 or failed its self-test)")
    loaders: dict[str, Callable[[], Corpus | None]] = {
        "small": lambda: small_corpus(len(Site(SIZES["small"].spec).pages)), "real": real_corpus,
        "docs": docs_corpus}
    failed = False
    for name in args.corpus.split(","):
        corpus = loaders[name]()
        if corpus is None:
            print(f"{name}: not installed, skipped")
            continue
        differ = 0
        for body, url in zip(corpus.bodies, corpus.urls, strict=True):
            page = body.decode("utf-8", "replace")
            native, python = html.parse_html(page, url), html.parse_html_python(page, url)
            if native != python:
                differ += 1
                if differ <= 3:
                    fields = [f for f in native.__slots__ if getattr(native, f) != getattr(python, f)]
                    print(f"  {url} differs in {', '.join(fields)}")
        failed |= differ > 0
        print(f"{name}: {len(corpus.bodies)} pages, {differ} differ, "
              f"{html._kernel.fallbacks} fallbacks so far")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
