"""Near-duplicates stored as deltas (polecat/store/delta.py): each page's own bytes come back, from the
store, its verify, its repair and its exports, and the segments stay plain WARC."""

from __future__ import annotations

import io
import logging
import random
import shutil
import subprocess
from pathlib import Path

import lmdb
import pytest
import zstandard
from warcio.archiveiterator import ArchiveIterator

from polecat.config import StoreConfig, config_from_mapping
from polecat.errors import CorruptRecord, StoreError
from polecat.store import delta, export, index, repair
from polecat.store.archive import archive_info
from polecat.store.base import OWN_HASH_HEADER, FetchRecord, content_hash
from polecat.store.fsck import verify
from polecat.store.segstore import SegmentStore, open_store

T0 = 1_790_000_000.0
HEADERS = (("Content-Type", "text/html; charset=utf-8"),)


def article(seed: int, words: int = 4000) -> list[str]:
    return random.Random(seed).choices(["crawl", "polite", "delta", "segment", "frontier", "warc", "host",
                                        "release", "notes", "version", "fixed", "bug"], k=words)


def html(title: str, words: list[str]) -> bytes:
    return f"<html><title>{title}</title><body><p>{' '.join(words)}</p></body></html>".encode()


def near_of(words: list[str], seed: int, changes: int = 40) -> list[str]:
    """The same text with a few words changed: what release notes of two versions look like."""
    rng, out = random.Random(seed), list(words)
    for _ in range(changes):
        out[rng.randrange(len(out))] = f"v{rng.randrange(1000)}"
    return out


def response(url: str, body: bytes, at: float = T0) -> FetchRecord:
    return FetchRecord.for_body(url, body, fetched_at=at, headers=HEADERS)


def near_revisit(url: str, body: bytes, original: bytes, original_url: str,
                 at: float = T0 + 1) -> FetchRecord:
    """What the pipeline records for a near-duplicate: a revisit of the original carrying its own hash."""
    return FetchRecord(url, at, 200, (*HEADERS, (OWN_HASH_HEADER, content_hash(body).hex())),
                       content_hash(original), len(body), duplicate_of=original_url, kind="revisit")


def test_a_delta_rebuilds_its_body_over_its_base_and_costs_a_fraction_of_the_page() -> None:
    words = article(1)
    base, body = html("3.39.4", words), html("3.39.3", near_of(words, 2))
    frame = delta.encode(content_hash(base), base, body)
    assert delta.is_delta(frame) and delta.base_of(frame) == content_hash(base)
    assert delta.apply(frame, base, 1 << 20) == body
    alone = len(zstandard.ZstdCompressor(level=2).compress(body))
    assert len(frame) * 5 < alone, (len(frame), alone)  # what the two pages share costs a few bytes
    assert not delta.is_delta(zstandard.ZstdCompressor().compress(body))
    with pytest.raises(CorruptRecord):
        delta.apply(frame[:-9], base, 1 << 20)  # torn
    with pytest.raises(CorruptRecord):
        delta.apply(frame, html("another page", article(3)), 1 << 20)  # wrong base: the checksum fails
    with pytest.raises(CorruptRecord):
        delta.base_of(frame[:4] + frame[4:8] + b"PCDELTA9" + frame[16:])


def test_the_store_keeps_a_near_duplicates_own_bytes_and_segments_stay_warc(tmp_path: Path) -> None:
    words = article(4)
    original, near = html("3.39.4", words), html("3.39.3", near_of(words, 5))
    nearer = html("3.39.2", near_of(near_of(words, 5), 6))
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    assert s.put(response("http://a.test/3.39.4.html", original), original)
    assert s.put(near_revisit("http://a.test/3.39.3.html", near, original, "http://a.test/3.39.4.html"), near)
    # A near-duplicate of the near-duplicate: the revisit refers to it, the delta is made against the whole
    # page (delta.py rule 4).
    assert s.put(near_revisit("http://a.test/3.39.2.html", nearer, near, "http://a.test/3.39.3.html"), nearer)
    assert not s.put(near_revisit("http://b.test/again", near, original, "http://a.test/3.39.4.html"), near)
    assert s.get(content_hash(near)) == near and s.get(content_hash(nearer)) == nearer  # before a flush
    s.close()

    s = open_store(root, StoreConfig(), read_only=True)
    assert isinstance(s, SegmentStore)
    assert [s.get(content_hash(b)) for b in (original, near, nearer)] == [original, near, nearer]
    assert s.stats().bodies == 3 and s.stats().raw_bytes == len(original) + len(near) + len(nearer)
    entry = s.index.body(content_hash(nearer))
    assert entry is not None and delta.base_of(s.read_frame(entry.loc)) == content_hash(original)
    whole = sum(len(zstandard.ZstdCompressor(level=2).compress(b)) for b in (original, near, nearer))
    assert s.stats().stored_bytes * 10 < whole * 6  # every page whole would cost much more
    report = verify(s)
    assert report.ok, report.faults
    s.close()
    if shutil.which("zstd") is not None:  # `zstd -dc` skips the delta frames: plain WARC comes out
        seg = next((root / "segments").iterdir())
        out = subprocess.run(["zstd", "-dc", str(seg)], check=True, capture_output=True).stdout
        kinds = [r.rec_type for r in ArchiveIterator(io.BytesIO(out), check_digests="raise")]
        assert kinds == ["response", "revisit", "revisit", "revisit"]


def test_a_warc_export_holds_every_pages_own_bytes_as_a_response(tmp_path: Path) -> None:
    words = article(7)
    original, near = html("3.39.4", words), html("3.39.3", near_of(words, 8))
    info = archive_info(user_agent="polecat-test/1", request_headers=(("User-Agent", "polecat-test/1"),))
    s = open_store(tmp_path / "store", StoreConfig(), archive=info)
    s.put(response("http://a.test/4", original), original)
    s.put(near_revisit("http://a.test/3", near, original, "http://a.test/4"), near)
    s.put(response("http://c.test/copy", original, T0 + 2), original)  # an exact copy: stays a revisit
    s.close()
    s = open_store(tmp_path / "store", StoreConfig(), read_only=True)
    assert isinstance(s, SegmentStore)
    out = tmp_path / "x.warc.gz"
    with out.open("wb") as fh:
        w = export.WarcExport(fh, out.name, "gzip")
        w.start(info)
        w.add(s)
    s.close()
    assert not w.result.skipped
    with out.open("rb") as fh:
        got = {(r.rec_type, r.rec_headers.get_header("WARC-Target-URI")): r.content_stream().read()
               for r in ArchiveIterator(fh, check_digests="raise") if r.rec_type in ("response", "revisit")}
    assert got[("response", "http://a.test/4")] == original
    assert got[("response", "http://a.test/3")] == near  # its own bytes, not the page it resembles
    assert ("revisit", "http://c.test/copy") in got
    mimes = {line.split('"url": "')[1].split('"')[0]: line.split('"mime": "')[1].split('"')[0]
             for line in w.result.index}
    assert mimes == {"http://a.test/4": "text/html", "http://a.test/3": "text/html",
                     "http://c.test/copy": "warc/revisit"}


def test_repair_drops_a_delta_with_its_damaged_base_and_queues_both_urls_again(tmp_path: Path) -> None:
    words = article(9)
    original, near = html("v4", words), html("v3", near_of(words, 10))
    single = html("other", article(11))
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    s.put(response("http://a.test/4", original), original)
    s.put(near_revisit("http://a.test/3", near, original, "http://a.test/4"), near)
    s.put(response("http://a.test/other", single), single)
    s.close()
    s = open_store(root, StoreConfig(), read_only=True)
    assert isinstance(s, SegmentStore)
    loc = s.index.history("http://a.test/4")[0].loc
    seg = next((root / "segments").iterdir())
    s.close()
    raw = bytearray(seg.read_bytes())
    raw[loc.offset + loc.length // 2] ^= 0xFF  # the original's frame is damaged
    seg.write_bytes(bytes(raw))

    asked: list[list[str]] = []
    report = repair.repair(tmp_path, StoreConfig(), lambda urls: asked.append(urls) or 0)
    assert report.refetch == ["http://a.test/3", "http://a.test/4"] and asked == [report.refetch]
    assert report.bodies_dropped == 2
    s = open_store(root, StoreConfig(), read_only=True)
    assert not s.has(content_hash(original)) and not s.has(content_hash(near))
    assert s.get(content_hash(single)) == single
    assert verify(s).ok
    s.close()


def test_the_old_store_near_duplicates_setting_never_makes_a_crawl_lossy(caplog: pytest.LogCaptureFixture
                                                                         ) -> None:
    assert config_from_mapping({}).dedup.near_duplicates == "delta"
    with caplog.at_level(logging.WARNING):
        assert config_from_mapping({"dedup": {"store_near_duplicates": True}}).dedup.near_duplicates == "full"
        old_default = config_from_mapping({"dedup": {"store_near_duplicates": False}})
        assert old_default.dedup.near_duplicates == "delta"
    assert "dedup.store_near_duplicates is deprecated: use dedup.near_duplicates" in caplog.text
    assert config_from_mapping({"dedup": {"near_duplicates": "drop"}}).dedup.near_duplicates == "drop"
    with pytest.raises(ValueError, match=r"dedup\.near_duplicates"):
        config_from_mapping({"dedup": {"near_duplicates": "maybe"}})



def test_a_store_from_before_deltas_opens_and_is_marked_so_older_releases_refuse_it(tmp_path: Path) -> None:
    body = html("v1", article(13))
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    s.put(response("http://a.test/", body), body)
    s.close()
    env = lmdb.open(str(root / "index"), max_dbs=8)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"schema", b"1", db=meta)  # as every release before deltas wrote it
    env.close()

    def schema() -> bytes:
        env = lmdb.open(str(root / "index"), max_dbs=8, readonly=True)
        try:
            meta = env.open_db(b"meta", create=False)
            with env.begin() as txn:
                return bytes(txn.get(b"schema", db=meta))
        finally:
            env.close()

    with SegmentStore.open(root, StoreConfig(), read_only=True) as ro:
        assert ro.get(content_hash(body)) == body
    assert schema() == b"1"  # a reader changes nothing
    with SegmentStore.open(root, StoreConfig()) as rw:
        assert rw.get(content_hash(body)) == body
    assert schema() == index.SCHEMA_VERSION == b"2"
    env = lmdb.open(str(root / "index"), max_dbs=8)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"schema", b"9", db=meta)
    env.close()
    with pytest.raises(StoreError, match="page store schema b'9'"):
        SegmentStore.open(root, StoreConfig(), read_only=True)
