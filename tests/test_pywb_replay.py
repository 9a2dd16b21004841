"""Replay in pywb, the tool archivists use: a crawl with exact copies and near-duplicates, exported with
default settings, gives every page back byte for byte (polecat/store/delta.py, polecat/store/export.py
rule 5). pywb lives in its own virtualenv (.ci/run), named by ``POLECAT_PYWB`` (its ``bin`` directory);
without it this test skips, except in CI (``POLECAT_REQUIRE_PYWB``)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import TestWebFactory
from tests.test_crawl_dedup import RATE, build_web, crawl, crawl_config, serve

PYWB = Path(os.environ["POLECAT_PYWB"]) if os.environ.get("POLECAT_PYWB") else None

pytestmark = pytest.mark.skipif(PYWB is None and not os.environ.get("POLECAT_REQUIRE_PYWB"),
                                reason="pywb is not installed (POLECAT_PYWB names its bin directory)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        body: bytes = resp.read()
        return body


def test_every_page_replays_its_own_bytes_in_pywb(test_web: TestWebFactory, tmp_path: Path) -> None:
    assert PYWB is not None, "POLECAT_REQUIRE_PYWB is set but POLECAT_PYWB names no pywb"
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

    root = tmp_path / "pywb"
    root.mkdir()
    for args in (["init", "coll"], ["add", "coll", str(warc)]):
        subprocess.run([str(PYWB / "wb-manager"), *args], cwd=root, check=True, capture_output=True,
                       timeout=120)
    port = _free_port()
    server = subprocess.Popen([str(PYWB / "wayback"), "-b", "127.0.0.1", "-p", str(port)], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}/coll/"
        deadline = time.monotonic() + 60
        while True:  # bounded: pywb starts in a few seconds
            try:
                _get(base)
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, "pywb did not start"
                time.sleep(0.2)
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        wrong = [p.url for p in served if _get(f"{base}{stamp}id_/{p.url}") != p.body]
        assert wrong == [], f"{len(wrong)} of {len(served)} pages replay other bytes: {wrong[:3]}"
    finally:
        server.terminate()
        server.wait(timeout=30)
