"""``polecat store repair`` and ``store export`` on damaged stores (issue 10): a torn segment keeps every
intact record and queues the lost URLs again; export skips corrupt records, finishes, exits non-zero."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from polecat import Crawler
from polecat.config import StoreConfig
from polecat.errors import CorruptRecord
from polecat.store.base import FetchRecord
from polecat.store.index import Index
from polecat.store.segments import list_segment_files
from polecat.store.segstore import open_store
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests
from tests.test_store_cli import body_of, run

T0 = 1_790_000_000.0
HDRS = (("Content-Type", "text/html; charset=utf-8"),)


def _store(tmp_path: Path, n: int = 6) -> Path:
    """A data dir whose store holds ``n`` pages in one segment (the last one written last)."""
    s = open_store(tmp_path / "store", StoreConfig())
    for i in range(n):
        s.put(FetchRecord.for_body(f"http://h.test/p{i}", body_of(i), fetched_at=T0 + i, headers=HDRS),
              body_of(i))
    s.close()
    return tmp_path


def _segment(data: Path) -> Path:
    index = Index(data / "store" / "index", read_only=True)
    try:
        store_id = index.store_id
    finally:
        index.close()
    ((_, path),) = list(list_segment_files(data / "store" / "segments", store_id))
    return path


def _urls(data: Path) -> list[str]:
    s = open_store(data / "store", StoreConfig(), read_only=True)
    try:
        return [r.url for r in s.records()]
    finally:
        s.close()


def test_a_segment_cut_by_a_few_bytes_keeps_every_intact_record(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = _store(tmp_path)
    seg = _segment(data)
    with seg.open("r+b") as fh:
        fh.truncate(seg.stat().st_size - 5)
    with pytest.raises(CorruptRecord, match="store repair"):
        open_store(data / "store", StoreConfig())
    assert run(["store", "repair", str(data), "--dry-run"]) == 0
    assert "dry run" in capsys.readouterr().out
    assert run(["store", "repair", str(data)]) == 0
    out = capsys.readouterr().out
    assert "dropped record 5 (http://h.test/p5)" in out and "refetch http://h.test/p5" in out
    assert _urls(data) == [f"http://h.test/p{i}" for i in range(5)]
    assert run(["store", "verify", str(data)]) == 0
    s = open_store(data / "store", StoreConfig())  # a writer opens again, and appends after the cut
    s.put(FetchRecord.for_body("http://h.test/p5", body_of(5), fetched_at=T0 + 9, headers=HDRS), body_of(5))
    s.close()
    assert run(["store", "verify", str(data)]) == 0
    assert run(["store", "repair", str(data)]) == 0
    assert "nothing to repair" in capsys.readouterr().out


def _damage(data: Path, url: str) -> None:
    """Flip a byte in the middle of ``url``'s stored record."""
    s = open_store(data / "store", StoreConfig(), read_only=True)
    loc = next(e.loc for e in s.log_entries() if e.record.url == url)  # type: ignore[attr-defined]
    s.close()
    seg = _segment(data)
    raw = bytearray(seg.read_bytes())
    raw[loc.offset + loc.length // 2] ^= 0xFF
    seg.write_bytes(bytes(raw))


def test_a_damaged_record_inside_a_segment_is_dropped_and_its_bytes_noted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _store(tmp_path)
    _damage(data, "http://h.test/p2")
    assert run(["store", "verify", str(data)]) == 1
    capsys.readouterr()
    assert run(["store", "repair", str(data)]) == 0
    assert "refetch http://h.test/p2" in capsys.readouterr().out
    assert _urls(data) == [f"http://h.test/p{i}" for i in (0, 1, 3, 4, 5)]
    assert run(["store", "verify", str(data)]) == 0
    assert "damaged bytes" in capsys.readouterr().out


def test_export_skips_a_corrupt_record_finishes_and_exits_non_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _store(tmp_path / "d")
    _damage(data, "http://h.test/p1")
    out = tmp_path / "all.warc"
    assert run(["store", "export", str(data), "--warc", str(out)]) == 1
    err = capsys.readouterr().err
    assert "skipped record 1 (http://h.test/p1)" in err and "5 records written" in err
    with out.open("rb") as fh:
        records = ArchiveIterator(fh, check_digests="raise")
        urls = [r.rec_headers.get_header("WARC-Target-URI") for r in records]
    assert urls == [None] + [f"http://h.test/p{i}" for i in (0, 2, 3, 4, 5)]  # the export's warcinfo first


def test_a_crawl_resumes_after_repair_and_fetches_the_lost_pages_again(test_web: TestWebFactory,
                                                                       tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=30, seed=8))
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 50.0})

    async def crawl() -> None:
        async with Crawler(cfg) as crawler:
            await crawler.run()

    asyncio.run(crawl())
    truth = web.ground_truth("host")
    assert set(page_requests(web)) == truth
    seg = _segment(cfg.data_dir)
    with seg.open("r+b") as fh:
        fh.truncate(seg.stat().st_size - 7)
    with pytest.raises(CorruptRecord, match="store repair"):
        asyncio.run(crawl())
    assert run(["store", "repair", str(cfg.data_dir)]) == 0
    stored = set(_urls(cfg.data_dir))
    lost = truth - stored
    assert lost, "the cut dropped at least the last record"
    web.clear_log()
    asyncio.run(crawl())
    assert set(page_requests(web)) == lost
    assert truth <= set(_urls(cfg.data_dir))
    assert run(["store", "verify", str(cfg.data_dir)]) == 0
