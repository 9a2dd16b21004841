"""The near book's scan (polecat/cluster/claims.py rule 10, ``NearBook._closest``) over the fingerprints of
bench_claims' web: what one claim's look-up costs with the book's objects out of the CPU's caches, as in a
crawl, against the same look-up repeated (caches warm).

    python -m benchmarks.bench_near_scan --hosts 2000 --pages-per-host 20

Every page of the web (benchmarks/bench_claims.py's, same options) is parsed and fingerprinted as the
pipeline does it, then claimed in page order by one :class:`~polecat.cluster.claims.NearBook`, exact
copies too (in a crawl of several members most of them are fetched by another member than their
original, and claimed): a claim with no match becomes a base, as it would at its band owners. Each
``_closest`` call is timed (wall clock: run it on a quiet machine); then one claim's call is repeated
``--repeat`` times. Also printed: the bases listed under a claim's band keys (its band-mates), which the
scan reads.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.bench_claims import site_spec, web_arguments
from polecat.cluster import claims
from polecat.dedup.minhash import fingerprint
from polecat.parse.html import parse_html
from polecat.store.base import content_hash
from polecat.testing.sitegen import Site


def near_claims(site: Site) -> list[claims.NearClaim]:
    """A near claim of each page of ``site``, in page order, fetched 1 ms apart."""
    out = []
    for page in range(len(site.pages)):
        body = site.render(page, 8080)
        fp = fingerprint(parse_html(body, "http://bench.test/").text)
        out.append(claims.NearClaim(page, content_hash(body), f"http://p{page}.test/", 1_000.0 + page / 1000,
                                    fp.index, fp.verify))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_near_scan",
                                 description=__doc__.split("\n")[0])
    web_arguments(ap, hosts=2000, pages_per_host=20)
    ap.add_argument("--repeat", type=int, default=100_000, help="calls of the warm look-up")
    args = ap.parse_args(argv)
    work = near_claims(Site(site_spec(args)))
    book = claims.NearBook(10 * len(work), 60.0, 4)
    spent, found, mates = 0.0, 0, []
    for c in work:
        mates.append(len({id(b) for k in claims._keys(c.index) for b in book._bands.get(k, ())}))
        t0 = time.perf_counter()
        match, later = book._closest(c)
        spent += time.perf_counter() - t0
        if match is None and later is None:
            book._record("m", c, [])
        else:
            found += 1
    busiest = max(range(len(work)), key=mates.__getitem__)
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        book._closest(work[busiest])
    warm = (time.perf_counter() - t0) / max(1, args.repeat)
    bands = [len(v) for v in book._bands.values()]
    print(f"{len(work):,} claims ({found:,} matched, {len(book):,} bases): "
          f"{spent / len(work) * 1e6:.2f} us a look-up, caches cold; band-mates a claim mean "
          f"{statistics.mean(mates):.2f}, max {max(mates)}")
    print(f"the look-up of the claim with the most band-mates ({mates[busiest]}), repeated: "
          f"{warm * 1e6:.2f} us, caches warm")
    print(f"bases a band key: mean {statistics.mean(bands):.2f}, max {max(bands)} over {len(bands):,} keys")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
