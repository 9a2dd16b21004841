"""A store known only by its sealed segments in object storage (polecat/store/remote.py), its disk gone:
sealed on demand (``PageStore.seal``, what a checkpoint round does: polecat/cluster/failover.py rule 7),
listed by store id, and exported record by record without its index (polecat/store/export.py rule 7)."""

from __future__ import annotations

import io
import os
import shutil
import time
import tracemalloc
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

import obstore
import pytest

from polecat.config import StoreConfig
from polecat.store import export
from polecat.store.archive import archive_info
from polecat.store.base import FetchRecord
from polecat.store.object import make_object_store
from polecat.store.remote import fetches, records, stores_in
from polecat.store.segstore import SegmentStore
from tests.replay_helpers import replay

HTML = (("Content-Type", "text/html; charset=utf-8"),)


def test_sealed_segments_outlive_their_disk_and_export_without_an_index(tmp_path: Path) -> None:
    remote_dir = tmp_path / "remote"
    cfg = StoreConfig(url=remote_dir.as_uri(), request_records=True)
    pages = {f"http://d.test/{i}": b"<p>page %d</p>" % i for i in range(12)}
    with SegmentStore.open(tmp_path / "store", cfg) as store:
        assert store.unshipped() == 0
        for i, (url, body) in enumerate(pages.items()):
            store.put(FetchRecord.for_body(url, body, fetched_at=1.79e9 + i, headers=HTML), body)
            if i == 5:
                store.seal()  # what a checkpoint round does before it ships
                store.flush()
        copy = b"<p>page 0</p>"
        store.put(FetchRecord.for_body("http://mirror.test/0", copy, fetched_at=1.79e9 + 20, headers=HTML),
                  copy)
        store.seal()
        store.flush()
        store_id = store.store_id
        last = "http://d.test/x"
        store.put(FetchRecord.for_body(last, b"<p>late</p>", fetched_at=1.79e9 + 30, headers=HTML),
                  b"<p>late</p>")
        store.flush()  # on disk only: the open segment is never shipped
    shutil.rmtree(tmp_path / "store")  # the disk is gone

    remote = make_object_store(remote_dir.as_uri(), ())
    found = stores_in(remote)
    assert list(found) == [store_id] and len(found[store_id]) == 2
    warc = io.BytesIO()
    out = export.WarcExport(warc, "dead.warc.gz", "gzip")
    out.start(archive_info(user_agent="t", request_headers=()))
    seen: set[str] = set()
    skipped: list[str] = []
    for name in found[store_id] * 2:  # read twice: each record is written once (by its record id)
        got = list(fetches(records(remote, name), seen, skipped))
        out.add_sealed(got)
    assert out.result.written == len(pages) + 1 and skipped == []
    assert got == []  # the second reading: every record id seen already
    path = tmp_path / "dead.warc.gz"
    path.write_bytes(warc.getvalue())
    replayed = replay(path)
    assert replayed == {**pages, "http://mirror.test/0": copy}  # the revisit resolves to its original
    lines = sorted(out.result.index)
    assert len(lines) == len(pages) + 1 and all('"filename": "dead.warc.gz"' in line for line in lines)
    assert sum('"mime": "text/html"' in line for line in lines) == len(pages)
    assert sum('"mime": "warc/revisit"' in line for line in lines) == 1
    # The fetch records the store had indexed, read back from the WARC and HTTP heads.
    again = {f.record.url: f.record for name in found[store_id]
             for f in fetches(records(remote, name), set(), [])}
    stored = FetchRecord.for_body("http://d.test/3", pages["http://d.test/3"], fetched_at=1.79e9 + 3,
                                  headers=HTML)
    read = again["http://d.test/3"]  # the WARC writer adds a Content-Length to the HTTP head
    assert replace(read, headers=()) == replace(stored, headers=()) and read.headers[: len(HTML)] == HTML
    copy_record = again["http://mirror.test/0"]
    assert (copy_record.kind, copy_record.duplicate_of) == ("revisit", "http://d.test/0")
    assert copy_record.content_hash == again["http://d.test/0"].content_hash


def test_a_failed_upload_is_retried_at_the_next_seal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Else one failed upload would leave a sealed segment unshipped until the store is opened again, and
    every checkpoint round would wait for it in vain (polecat/cluster/failover.py rule 7)."""
    real_put = obstore.put
    failing = [True]

    def put_once_failing(store: object, name: str, data: object) -> object:
        if failing.pop() if failing else False:
            raise OSError("the object store is unreachable")
        return real_put(store, name, data)

    monkeypatch.setattr(obstore, "put", put_once_failing)
    with SegmentStore.open(tmp_path / "store", StoreConfig(url=(tmp_path / "remote").as_uri())) as store:
        store.put(FetchRecord.for_body("http://d.test/", b"<p>x</p>", fetched_at=1.79e9, headers=HTML),
                  b"<p>x</p>")
        store.seal()
        store.flush()
        deadline = time.monotonic() + 10
        while store.unshipped() != 1 or store._shipper is None or store._shipper.failures != 1:
            assert time.monotonic() < deadline, "the upload did not fail as arranged"
            time.sleep(0.01)
        store.seal()  # nothing new to seal: the failed segment goes again
        while store.unshipped():
            assert time.monotonic() < deadline, "the failed upload was not retried"
            time.sleep(0.01)


@pytest.mark.s3
@pytest.mark.slow
def test_a_sealed_segment_is_read_by_ranges_not_whole(tmp_path: Path, s3_endpoint: str) -> None:
    """polecat/store/remote.py rule 2: reading a 40 MiB segment back from S3 allocates (Python heap, by
    tracemalloc) a few of its records at a time, not the segment (which read whole took 40 MiB and more)."""
    bucket = f"polecat-{uuid.uuid4().hex[:12]}"
    with urllib.request.urlopen(urllib.request.Request(f"{s3_endpoint}/{bucket}", method="PUT"), timeout=10):
        pass
    options = (("endpoint", s3_endpoint), ("region", "us-east-1"), ("access_key_id", "test"),
               ("secret_access_key", "test"), ("allow_http", "true"))
    cfg = StoreConfig(url=f"s3://{bucket}/crawl", options=options)
    bodies = 40
    with SegmentStore.open(tmp_path / "store", cfg) as store:
        for i in range(bodies):  # incompressible: the segment is as big compressed
            body = os.urandom(1 << 20)
            store.put(FetchRecord.for_body(f"http://big.test/{i}", body, fetched_at=1.79e9 + i,
                                           headers=(("Content-Type", "application/octet-stream"),)), body)
        store.seal()
        store.flush()
    remote = make_object_store(f"s3://{bucket}/crawl", options)
    (names,) = stores_in(remote).values()
    tracemalloc.start()
    try:
        got = sum(1 for name in names for _ in fetches(records(remote, name), set(), []))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == bodies
    assert peak < 12 << 20, f"peak {peak >> 20} MiB"
