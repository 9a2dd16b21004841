"""Sealed segments shipped to object storage and read back by range: file:// always, S3 against moto.

The S3 test needs the loopback S3 server that .ci/run starts (POLECAT_TEST_S3_ENDPOINT); it is skipped
without one unless POLECAT_REQUIRE_S3 is set, in which case its absence fails the run.
"""

from __future__ import annotations

import random
import urllib.request
import uuid
from pathlib import Path

import pytest

from polecat.config import StoreConfig
from polecat.errors import StoreError
from polecat.store.base import FetchRecord
from polecat.store.fsck import verify
from polecat.store.segstore import SegmentStore, open_store


def bodies(n: int) -> list[bytes]:
    return [random.Random(i).randbytes(3000) + b"<p>%d</p>" % i for i in range(n)]


def write_and_check(root: Path, cfg: StoreConfig) -> None:
    pages = bodies(40)
    store = open_store(root, cfg)
    for i, b in enumerate(pages):
        store.put(FetchRecord.for_body(f"http://o.test/{i}", b, fetched_at=1.7e9 + i), b)
        if i % 10 == 9:
            store.flush()
    store.close()  # waits for the shipper
    local = list((root / "segments").iterdir())
    assert len(local) == 1, "only the open segment stays local"

    store = open_store(root, cfg, read_only=True)
    assert isinstance(store, SegmentStore)
    s = store.stats()
    assert s.remote_segments >= 3 and s.remote_segments == s.segments - 1
    for b in pages:  # every read of a shipped segment is a ranged GET
        assert store.get(FetchRecord.for_body("", b, fetched_at=0).content_hash) == b
    report = verify(store)
    assert report.ok, report.faults
    store.close()


def test_ship_to_file_url_and_read_back(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    write_and_check(tmp_path / "store", StoreConfig(url=remote.as_uri(), segment_bytes=20_000))
    assert len(list(remote.iterdir())) >= 3


def test_bad_store_url_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"store\.url"):
        open_store(tmp_path / "store", StoreConfig(url="nope://x/y"))


@pytest.mark.s3
def test_ship_to_s3_and_read_back_by_range(tmp_path: Path, s3_endpoint: str) -> None:
    bucket = f"polecat-{uuid.uuid4().hex[:12]}"
    # moto accepts an unsigned bucket creation; obstore does not create buckets.
    with urllib.request.urlopen(urllib.request.Request(f"{s3_endpoint}/{bucket}", method="PUT"), timeout=10):
        pass
    cfg = StoreConfig(
        url=f"s3://{bucket}/crawl",
        segment_bytes=20_000,
        options=(("endpoint", s3_endpoint), ("region", "us-east-1"), ("access_key_id", "test"),
                 ("secret_access_key", "test"), ("allow_http", "true")),
    )
    write_and_check(tmp_path / "store", cfg)
    with urllib.request.urlopen(f"{s3_endpoint}/{bucket}?list-type=2&prefix=crawl/", timeout=10) as resp:
        listing = resp.read().decode()
    assert listing.count(".warc.zst</Key>") >= 3
