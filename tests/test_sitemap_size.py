"""A sitemap at the protocol's size (issue 37): a 45 MB urlset of 50,000 URLs, past fetch.max_body_bytes
(10 MiB), is read whole by ``polecat crawl`` in bounded memory (benchmarks/bench_sitemap.py measures it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_sitemap import measure

URLS = 50_000
MB = 1e6


@pytest.mark.timeout(600)
@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
@pytest.mark.slow
def test_every_url_of_a_45_mb_sitemap_is_queued_within_64_mb_of_the_ordinary_crawl(tmp_path: Path,
                                                                                     gzip: bool) -> None:
    ordinary, with_sitemap, xml, wire = measure(URLS, tmp_path, gzip)
    assert xml > 45 * MB and (wire == xml) != gzip
    # The site's own URLs, the sitemap itself, and every URL it lists (before issue 37 a plain one was cut
    # at 10 MiB: 11,654 URLs).
    assert with_sitemap.urls == ordinary.urls + 1 + URLS
    assert with_sitemap.peak_rss_mb <= ordinary.peak_rss_mb + 64, (ordinary, with_sitemap)
