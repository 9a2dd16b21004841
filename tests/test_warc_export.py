"""Archive-grade WARC: checked with the ecosystem's own tools (warcio, pywb's cdxj-indexer)."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path

import zstandard
from warcio.archiveiterator import ArchiveIterator

from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.test_cli import polecat

BIN = Path(sys.executable).parent


def crawl(web: TestWeb, data: Path, *extra: str) -> None:
    run = polecat("crawl", *web.seeds, "--data", str(data), "--rate", "50", "--dns-server", web.dns_address,
                  "--allow-private", "-q", *extra)
    assert run.returncode == 0, run.stderr


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a command-line tool installed beside this Python (the test extras)."""
    return subprocess.run([str(BIN / name), *args], capture_output=True, text=True, timeout=120)


def records(path: Path) -> list[tuple[str, str | None, str | None, str | None]]:
    with path.open("rb") as fh:
        return [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"),
                 r.rec_headers.get_header("WARC-Record-ID"), r.rec_headers.get_header("WARC-Concurrent-To"))
                for r in ArchiveIterator(fh, check_digests="raise")]


def test_warc_gz_passes_warcio_and_matches_cdxj_indexer(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=8, seed=9, dup_ratio=0.2))
    data = tmp_path / "d"
    crawl(web, data)
    out, cdxj = tmp_path / "crawl.warc.gz", tmp_path / "crawl.cdxj"
    run = polecat("store", "export", str(data), "--warc", str(out), "--cdxj", str(cdxj))
    assert run.returncode == 0, run.stderr
    # gzip per record: the file is a series of gzip members, not one stream of plain WARC
    with gzip.open(out) as fh:
        assert fh.read(8) == b"WARC/1.1"
    check = tool("warcio", "check", "-v", str(out))
    assert check.returncode == 0, check.stdout + check.stderr
    index = tool("warcio", "index", str(out))
    assert index.returncode == 0 and '"warc-type": "warcinfo"' in index.stdout.splitlines()[0]
    recs = records(out)
    assert recs[0][0] == "warcinfo"
    responses = {r[2]: r[1] for r in recs if r[0] in ("response", "revisit")}
    requests = [r for r in recs if r[0] == "request"]
    assert len(requests) == len(responses)  # one request beside each response or revisit
    assert all(responses[r[3]] == r[1] for r in requests)  # linked by WARC-Concurrent-To
    robots = {u for u in responses.values() if u and u.endswith("/robots.txt")}
    assert robots == {f"{web.base_url(h)}/robots.txt" for h in web.site.hosts}
    ours = sorted(cdxj.read_text().splitlines())
    theirs = tool("cdxj-indexer", "-s", str(out))
    assert theirs.returncode == 0, theirs.stderr
    assert len(ours) == len(responses) and ours == sorted(theirs.stdout.splitlines())


def test_segments_start_with_warcinfo_and_requests_are_switchable(test_web: TestWebFactory,
                                                                   tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=4, seed=10))
    data = tmp_path / "d"
    conf = tmp_path / "c.toml"
    conf.write_text("[store]\nrequest_records = false\n")
    crawl(web, data, "--config", str(conf))
    (segment,) = (data / "store" / "segments").iterdir()
    plain = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(segment.read_bytes()),
                                                       read_across_frames=True).read()
    with io.BytesIO(plain) as fh:
        kinds = [r.rec_type for r in ArchiveIterator(fh)]
    assert kinds[0] == "warcinfo" and "request" not in kinds and kinds.count("response") >= 4
    out = tmp_path / "x.warc"
    assert polecat("store", "export", str(data), "--warc", str(out), "--compress", "none").returncode == 0
    assert [r[0] for r in records(out)].count("warcinfo") == 1  # the export's own; the segment's left out


def test_archive_bench_runs() -> None:
    from benchmarks.bench_archive import main

    got = main(["--hosts", "1", "--pages", "5"])
    assert got[False][0] == got[True][0] == 5 and got[True][1] > got[False][1]  # request records cost bytes
