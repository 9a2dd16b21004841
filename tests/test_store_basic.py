"""The PageStore contract on the local segment store: put/get/history, idempotence, durability."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import random
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from polecat.config import StoreConfig
from polecat.errors import CorruptRecord, NotFound, StoreError
from polecat.store import warc
from polecat.store.base import OWN_HASH_HEADER, FetchRecord, PageStore, content_hash
from polecat.store.fsck import verify
from polecat.store.segstore import SegmentStore, open_store

T0 = 1_790_000_000.25
HEADERS = (("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip"), ("ETag", '"abc"'))


def page(i: int, size: int = 3000) -> bytes:
    """HTML that compresses like real text does (not like one repeated line)."""
    words = random.Random(i).choices(["crawl", "polite", "zstd", "segment", "frontier", "warc", "host"],
                                     k=size // 7)
    return f"<html><title>page {i}</title><body><p>{' '.join(words)}</p>".encode()


def rec(url: str, body: bytes, at: float = T0, **kw: object) -> FetchRecord:
    return dataclasses.replace(FetchRecord.for_body(url, body, fetched_at=at, headers=HEADERS), **kw)


@pytest.fixture
def store(tmp_path: Path) -> PageStore:
    s = open_store(tmp_path / "store", StoreConfig())
    yield s
    s.close()


def test_content_hash_is_sha256_and_the_warc_payload_digest(store: PageStore) -> None:
    assert content_hash(b"x") == hashlib.sha256(b"x").digest()
    assert content_hash(b"x", "blake2b-256") == hashlib.blake2b(b"x", digest_size=32).digest()
    with pytest.raises(ValueError, match="unknown content hash 'md5'"):
        content_hash(b"x", "md5")
    body = page(7)
    r = rec("http://a.test/7", body)
    assert store.hash_name == "sha256" and r.content_hash == hashlib.sha256(body).digest()
    store.put(r, body)
    store.flush()
    assert isinstance(store, SegmentStore)
    fields = store.read_record(store.index.log_entry(0).loc).fields
    assert fields["warc-payload-digest"] == warc.payload_digest(body)
    assert fields["warc-polecat-content-hash"] == "sha256:" + r.content_hash.hex()


def test_store_made_with_blake2b_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store made before SHA-256 became the address (its index says blake2b-256) is read and written
    with BLAKE2b-256 still, and its WARC payload digests stay SHA-256 of the body."""
    monkeypatch.setattr("polecat.store.index.HASH_NAME", "blake2b-256")
    open_store(tmp_path / "old", StoreConfig()).close()
    monkeypatch.undo()
    s = open_store(tmp_path / "old", StoreConfig())
    assert s.hash_name == "blake2b-256"
    body = page(8)
    r = rec("http://a.test/8", body, content_hash=content_hash(body, s.hash_name))
    assert s.put(r, body) and not s.put(dataclasses.replace(r, url="http://a.test/copy"), body)
    s.flush()
    assert s.get(r.content_hash) == body
    first = s.read_record(s.index.log_entry(0).loc).fields
    assert first["warc-payload-digest"] == warc.payload_digest(body)
    assert first["warc-polecat-content-hash"] == "blake2b-256:" + r.content_hash.hex()
    assert s.read_record(s.index.log_entry(1).loc).fields["warc-payload-digest"] == warc.payload_digest(body)
    assert verify(s).ok
    s.close()
    ro = open_store(tmp_path / "old", StoreConfig(), read_only=True)
    assert ro.get(r.content_hash) == body
    with pytest.raises(NotFound):  # a SHA-256 address does not name a BLAKE2b store's body
        ro.get(hashlib.sha256(body).digest())
    ro.close()


def test_store_with_an_unknown_hash_is_refused(tmp_path: Path) -> None:
    import lmdb

    open_store(tmp_path / "odd", StoreConfig()).close()
    env = lmdb.open(str(tmp_path / "odd" / "index"), max_dbs=6)
    with env.begin(write=True) as txn:
        txn.put(b"hash", b"md5", db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(StoreError, match="hashes with 'md5', which this polecat does not know"):
        open_store(tmp_path / "odd", StoreConfig())


def test_put_get_roundtrip_before_and_after_flush(store: PageStore) -> None:
    body = page(1)
    r = rec("http://a.test/1", body)
    assert store.put(r, body) is True
    assert store.has(r.content_hash)
    assert store.get(r.content_hash) == body  # readable while pending
    store.flush()
    assert store.get(r.content_hash) == body
    assert store.history("http://a.test/1") == [r]


def test_identical_body_is_stored_once_and_history_is_complete(store: PageStore) -> None:
    body = page(2, 40_000)
    assert store.put(rec("http://a.test/x", body), body) is True
    store.flush()
    before = store.stats().stored_bytes
    assert store.put(rec("http://b.test/y", body, at=T0 + 5), body) is False
    assert store.put(rec("http://a.test/x", body, at=T0 + 9), body) is False
    store.flush()
    stats = store.stats()
    assert stats.bodies == 1 and stats.records == 3 and stats.revisits == 2
    # The two revisit records together are far smaller than one more copy of the body.
    assert stats.stored_bytes - before < len(zstandard.ZstdCompressor().compress(body))
    y = store.history("http://b.test/y")
    assert [(h.kind, h.duplicate_of) for h in y] == [("revisit", "http://a.test/x")]
    x = store.history("http://a.test/x")
    assert [(h.kind, h.duplicate_of) for h in x] == [("response", None), ("revisit", None)]


def test_revisit_without_body_and_records_in_append_order(store: PageStore) -> None:
    body = page(3)
    orig = rec("http://a.test/o", body)
    store.put(orig, body)
    near = FetchRecord(url="http://c.test/n", fetched_at=T0 + 1, status=200, headers=(),
                       content_hash=orig.content_hash, size=len(body) + 7, duplicate_of="http://a.test/o",
                       kind="revisit")
    assert store.put(near, None) is False
    store.flush()
    other = page(4)
    store.put(rec("http://a.test/p", other), other)  # pending: records() must include it too
    assert [r.url for r in store.records()] == ["http://a.test/o", "http://c.test/n", "http://a.test/p"]
    assert store.history("http://c.test/n") == [near]


def test_missing_and_corrupt(tmp_path: Path) -> None:
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    body = page(5, 20_000)
    r = rec("http://a.test/c", body)
    s.put(r, body)
    s.close()
    ro = open_store(root, StoreConfig(), read_only=True)
    with pytest.raises(NotFound):
        ro.get(content_hash(b"absent"))
    ro.close()
    seg = next((root / "segments").iterdir())
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    ro = open_store(root, StoreConfig(), read_only=True)
    with pytest.raises(CorruptRecord):
        ro.get(r.content_hash)
    ro.close()


def test_reopen_keeps_everything_and_continues(tmp_path: Path) -> None:
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    bodies = [page(i) for i in range(20)]
    for i, b in enumerate(bodies):
        s.put(rec(f"http://a.test/{i}", b), b)
    s.close()
    s = open_store(root, StoreConfig())
    extra = page(99)
    s.put(rec("http://a.test/99", extra), extra)
    s.flush()
    for b in [*bodies, extra]:
        assert s.get(content_hash(b)) == b
    assert s.stats().records == 21
    s.close()


def test_reading_a_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no page store"):
        open_store(tmp_path / "nothing" / "store", StoreConfig(), read_only=True)


def test_second_writer_is_refused(tmp_path: Path) -> None:
    s = open_store(tmp_path / "store", StoreConfig())
    with pytest.raises(StoreError, match="another process"):
        open_store(tmp_path / "store", StoreConfig())
    s.close()


def test_unflushed_tail_is_cut_on_open(tmp_path: Path) -> None:
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    kept = page(1)
    s.put(rec("http://a.test/kept", kept), kept)
    s.flush()
    seg = next((root / "segments").iterdir())
    committed = seg.stat().st_size
    s.close()
    # A crash mid-append leaves half a frame after the committed length.
    frame = zstandard.ZstdCompressor().compress(b"WARC/1.1\r\n" + b"x" * 5000)
    with seg.open("ab") as fh:
        fh.write(frame[: len(frame) // 2])
    s = open_store(root, StoreConfig())
    assert seg.stat().st_size == committed
    more = page(2)
    s.put(rec("http://a.test/more", more), more)
    s.flush()
    assert s.get(content_hash(kept)) == kept and s.get(content_hash(more)) == more
    s.close()


def test_segments_seal_and_roll(tmp_path: Path) -> None:
    root = tmp_path / "store"
    s = open_store(root, StoreConfig(segment_bytes=20_000))
    bodies = [page(i, 6000) + bytes(range(256)) * 20 for i in range(40)]
    for i, b in enumerate(bodies):
        s.put(rec(f"http://a.test/{i}", b), b)
        if i % 7 == 0:
            s.flush()
    s.flush()
    st_ = s.stats()
    assert st_.segments > 3 and st_.sealed_segments == st_.segments - 1
    for b in bodies:
        assert s.get(content_hash(b)) == b
    s.close()


def test_segment_decompresses_to_a_warc_file_warcio_reads(tmp_path: Path) -> None:
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    body = page(7)
    r = rec("http://a.test/w?q=1", body, truncated=True)
    s.put(r, body)
    s.put(rec("http://b.test/w", body, at=T0 + 60), body)
    s.close()
    raw = next((root / "segments").iterdir()).read_bytes()
    out = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True).read()
    records = list(ArchiveIterator(io.BytesIO(out), check_digests="raise"))
    assert [x.rec_type for x in records] == ["response", "revisit"]
    resp, rev = records
    assert resp.rec_headers.get_header("WARC-Target-URI") == "http://a.test/w?q=1"
    assert resp.rec_headers.get_header("WARC-Truncated") == "length"
    assert resp.http_headers.get_statuscode() == "200"
    assert resp.http_headers.get_header("Content-Encoding") is None  # body is stored decoded
    assert resp.http_headers.get_header("X-Archive-Orig-Content-Encoding") == "gzip"
    assert rev.rec_headers.get_header("WARC-Refers-To-Target-URI") == "http://a.test/w?q=1"
    assert rev.rec_headers.get_header("WARC-Payload-Digest") == resp.rec_headers.get_header(
        "WARC-Payload-Digest")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    url=st.text(min_size=1, max_size=300).map(lambda t: "http://h.test/" + t),
    body=st.binary(max_size=5000),
    headers=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.text(max_size=60)), max_size=5),
    status=st.integers(100, 599),
)
def test_any_record_roundtrips(tmp_path: Path, url: str, body: bytes, headers: list[tuple[str, str]],
                               status: int) -> None:
    r = FetchRecord.for_body(url, body, fetched_at=T0, status=status, headers=tuple(headers))
    s = open_store(Path(tempfile.mkdtemp(dir=tmp_path)), StoreConfig())
    try:
        s.put(r, body)
        s.flush()
        assert s.history(url)[-1] == r
        assert s.get(r.content_hash) == body
    finally:
        s.close()


def test_flush_in_a_worker_thread_while_puts_continue(tmp_path: Path) -> None:
    """The node may run flush via asyncio.to_thread; puts and reads made meanwhile stay consistent."""
    root = tmp_path / "store"
    s = open_store(root, StoreConfig(segment_bytes=30_000))
    bodies = [page(i, 4000) for i in range(300)]
    stop = threading.Event()
    flushes = 0

    def flusher() -> None:
        nonlocal flushes
        while not stop.is_set():
            s.flush()
            flushes += 1

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i, b in enumerate(bodies):
            s.put(rec(f"http://a.test/{i}", b), b)
            j = random.Random(i).randrange(i + 1)  # read back any earlier page, wherever it is now
            assert s.get(content_hash(bodies[j])) == bodies[j]
            assert len(s.history(f"http://a.test/{j}")) == 1
    finally:
        stop.set()
        t.join()
    s.close()
    assert flushes > 1
    s = open_store(root, StoreConfig())
    assert [r.url for r in s.records()] == [f"http://a.test/{i}" for i in range(300)]
    assert s.stats().segments > 5
    assert isinstance(s, SegmentStore)
    report = verify(s)
    assert report.ok, report.faults
    s.close()


def test_zstd_tool_decompresses_a_segment_into_a_warc_file(tmp_path: Path) -> None:
    if shutil.which("zstd") is None:
        pytest.skip("no zstd command")
    root = tmp_path / "store"
    s = open_store(root, StoreConfig())
    body = page(11)
    orig = rec("http://a.test/orig", body)
    s.put(orig, body)
    s.put(dataclasses.replace(orig, url="http://a.test/near", duplicate_of="http://a.test/orig",
                              headers=((OWN_HASH_HEADER, "ab" * 32),), kind="revisit"), None)
    s.close()
    seg = next((root / "segments").iterdir())
    out = subprocess.run(["zstd", "-dc", str(seg)], check=True, capture_output=True).stdout
    recs = list(ArchiveIterator(io.BytesIO(out), check_digests="raise"))
    assert [r.rec_type for r in recs] == ["response", "revisit"]
    assert recs[1].rec_headers.get_header("WARC-Profile") == "urn:polecat:revisit/near-duplicate"


def test_records_since_a_sequence_number_span_flushed_and_pending_records(store: PageStore) -> None:
    bodies = [page(40 + i) for i in range(5)]
    for i, b in enumerate(bodies[:3]):
        store.put(rec(f"http://a.test/{i}", b), b)
    store.flush()
    for i, b in enumerate(bodies[3:], start=3):
        store.put(rec(f"http://a.test/{i}", b), b)
    assert store.record_count() == 5
    assert [r.url for r in store.records_since(2)] == [f"http://a.test/{i}" for i in (2, 3, 4)]
    assert [r.url for r in store.records_since(4)] == ["http://a.test/4"]
    assert list(store.records_since(5)) == [] and len(list(store.records_since(0))) == 5
