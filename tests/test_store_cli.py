"""The store's commands: pages, cat, store ls/get/verify/export, on a real store in a data dir."""

from __future__ import annotations

import argparse
import io
import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
import zstandard
from warcio.archiveiterator import ArchiveIterator

from polecat.commands import cat, export, pages, store
from polecat.config import StoreConfig
from polecat.errors import ConfigError
from polecat.store.base import FetchRecord
from polecat.store.segstore import open_store

T0 = 1_790_000_000.0


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="polecat")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (pages, cat, export, store):
        command.register(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def body_of(i: int) -> bytes:
    words = random.Random(i).choices(["alpha", "beta", "gamma", "delta", "omega"], k=2000)
    return f"<html><body>{i} {' '.join(words)}</body></html>".encode()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    s = open_store(tmp_path / "store", StoreConfig(segment_bytes=8000))
    hdrs = (("Content-Type", "text/html; charset=utf-8"),)
    for i in range(6):
        b = body_of(i)
        s.put(FetchRecord.for_body(f"http://h{i % 2}.test/p{i}", b, fetched_at=T0 + i, headers=hdrs), b)
    b = body_of(0)  # same body again, another URL: a revisit
    s.put(FetchRecord.for_body("http://h9.test/copy", b, fetched_at=T0 + 10, headers=hdrs), b)
    b = body_of(100)  # a newer version of p1
    s.put(FetchRecord.for_body("http://h1.test/p1", b, fetched_at=T0 + 20, headers=hdrs), b)
    s.close()
    return tmp_path


def test_pages_lists_every_fetch(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["pages", str(data_dir)]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.startswith("url\tstatus\t") and len(lines) == 8
    first = lines[0].split("\t")
    assert first[0] == "http://h0.test/p0" and first[1] == "200"
    assert first[2] == datetime.fromtimestamp(T0, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert bytes.fromhex(first[3]) == FetchRecord.for_body("", body_of(0), fetched_at=0).content_hash
    assert first[4] == str(len(body_of(0)))
    copy = lines[6].split("\t")
    assert copy[0] == "http://h9.test/copy" and copy[5] == "http://h0.test/p0"


def test_cat_by_url_gives_latest_body_and_by_hash(data_dir: Path,
                                                  capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run(["cat", str(data_dir), "http://h1.test/p1"]) == 0
    assert capfdbinary.readouterr().out == body_of(100)
    digest = FetchRecord.for_body("", body_of(3), fetched_at=0).content_hash.hex()
    assert run(["cat", str(data_dir), digest]) == 0
    assert capfdbinary.readouterr().out == body_of(3)


def test_store_get_writes_a_warc_record(data_dir: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run(["store", "get", str(data_dir), "http://h9.test/copy"]) == 0
    (rec,) = list(ArchiveIterator(io.BytesIO(capfdbinary.readouterr().out)))
    assert rec.rec_type == "revisit"
    assert rec.rec_headers.get_header("WARC-Refers-To-Target-URI") == "http://h0.test/p0"


def test_store_ls_lists_sealed_segments(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["store", "ls", str(data_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    states = [line.split("\t")[1] for line in out if not line.startswith("#")]
    assert states.count("open") == 1 and states.count("sealed") >= 1
    assert "8 records, 7 bodies, 1 revisits" in out[-1]


def test_verify_passes_then_catches_corruption_and_orphans(data_dir: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["store", "verify", str(data_dir)]) == 0
    assert "OK: 8 records, 7 bodies" in capsys.readouterr().out
    seg = sorted((data_dir / "store" / "segments").iterdir())[0]
    data = bytearray(seg.read_bytes())
    data[40] ^= 0x55
    seg.write_bytes(bytes(data))
    assert run(["store", "verify", str(data_dir)]) == 1
    assert "FAULT" in capsys.readouterr().out
    data[40] ^= 0x55
    seg.write_bytes(bytes(data) + b"tail bytes")
    assert run(["store", "verify", str(data_dir)]) == 0
    assert "bytes past the committed length" in capsys.readouterr().out


def test_export_warc_and_cdxj(data_dir: Path, tmp_path: Path) -> None:
    plain, packed = tmp_path / "all.warc", tmp_path / "all.warc.zst"
    cdxj, live = tmp_path / "index.cdxj", tmp_path / "segments.cdxj"
    assert run(["store", "export", str(data_dir), "--warc", str(plain), "--cdxj", str(cdxj),
                "--cdxj-segments", str(live)]) == 0
    assert run(["store", "export", str(data_dir), "--warc", str(packed)]) == 0
    with pytest.raises(ConfigError, match="give --warc FILE too"):  # an index of which file?
        run(["store", "export", str(data_dir), "--cdxj", str(cdxj)])
    with plain.open("rb") as fh:
        recs = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"))
                for r in ArchiveIterator(fh, check_digests="raise")]
    assert recs[0] == ("warcinfo", None)  # every export starts with one
    assert len(recs) == 9 and recs[7] == ("revisit", "http://h9.test/copy")
    unpacked = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(packed.read_bytes()),
                                                          read_across_frames=True).read()
    with io.BytesIO(unpacked) as fh:
        got = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI")) for r in ArchiveIterator(fh)]
    assert got == recs
    # the export's index points into the exported file
    lines = cdxj.read_text().splitlines()
    assert lines == sorted(lines) and len(lines) == 8
    key, stamp, doc = lines[0].split(" ", 2)
    assert key == "test,h0)/p0" and stamp == datetime.fromtimestamp(T0, UTC).strftime("%Y%m%d%H%M%S")
    fields = json.loads(doc)
    assert fields["mime"] == "text/html" and fields["status"] == "200" and fields["filename"] == plain.name
    raw = plain.read_bytes()[int(fields["offset"]): int(fields["offset"]) + int(fields["length"])]
    (rec,) = list(ArchiveIterator(io.BytesIO(raw)))
    assert rec.rec_headers.get_header("WARC-Target-URI") == "http://h0.test/p0"
    # the live segments' index: offset/length address one zstd frame holding exactly that record
    fields = json.loads(live.read_text().splitlines()[0].split(" ", 2)[2])
    seg = data_dir / "store" / "segments" / fields["filename"]
    frame = seg.read_bytes()[int(fields["offset"]): int(fields["offset"]) + int(fields["length"])]
    (rec,) = list(ArchiveIterator(io.BytesIO(zstandard.ZstdDecompressor().decompress(frame))))
    assert rec.rec_headers.get_header("WARC-Target-URI") == "http://h0.test/p0"
    assert rec.rec_headers.get_header("WARC-Payload-Digest") == fields["digest"]
