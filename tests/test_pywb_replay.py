"""Replay in pywb, the tool archivists use: a crawl with exact copies and near-duplicates, exported with
default settings, gives every page back byte for byte (polecat/store/delta.py, polecat/store/export.py
rule 5). pywb lives in its own virtualenv (.ci/run), named by ``POLECAT_PYWB`` (its ``bin`` directory);
without it this test skips, except in CI (``POLECAT_REQUIRE_PYWB``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from polecat.testing.pywb import get, pywb_serving, stamp_now
from tests.conftest import TestWebFactory
from tests.pywb_helpers import NEEDS_PYWB, pywb_bin
from tests.test_crawl_dedup import RATE, build_web, crawl, crawl_config, serve

pytestmark = NEEDS_PYWB


def test_every_page_replays_its_own_bytes_in_pywb(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web()
    served = build_web(web.port)
    serve(web, served)
    data = tmp_path / "data"
    cfg = crawl_config(web, data, scope={"seeds": [p.url for p in served]}, politeness={"rate": RATE})
    stats, _ = asyncio.run(crawl(cfg))
    assert stats.near_duplicates > 0 and stats.queued == 0  # the corpus has near-duplicates to replay
    warc = tmp_path / "crawl.warc.gz"
    subprocess.run([sys.executable, "-m", "polecat", "store", "export", str(data), "--warc", str(warc)],
                   check=True, capture_output=True, timeout=120)
    with pywb_serving(pywb_bin(), warc, tmp_path / "pywb") as base:
        stamp = stamp_now()
        wrong = [p.url for p in served if get(f"{base}{stamp}id_/{p.url}") != p.body]
        assert wrong == [], f"{len(wrong)} of {len(served)} pages replay other bytes: {wrong[:3]}"
