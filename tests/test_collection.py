"""One collection out of many stores (issue 35): the readers take several data dirs (a cluster's nodes, a
dead node's dir, their parent dir) and the workers of each, and a revisit in one store of a body another
store holds replays that body (polecat/cluster/layout.py rule 7, polecat/store/export.py rule 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from polecat.config import StoreConfig
from polecat.store.base import FetchRecord
from polecat.store.segstore import open_store
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.replay_helpers import replay
from tests.test_crawl_restart import crawl_cmd, finish, start
from tests.test_warc_export import tool

T0 = 1_790_000_000.0
HTML = (("Content-Type", "text/html; charset=utf-8"),)


def polecat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=120)


def page(i: int) -> bytes:
    return f"<html><head><title>page {i}</title></head><body>{'words ' * 50}{i}</body></html>".encode()


@pytest.fixture
def two_nodes(tmp_path: Path) -> tuple[Path, Path]:
    """Two node dirs of one crawl: node A stored /a and /shared; node B fetched /b (its own) and a copy of
    A's /shared body at /mirror, which A's content claim made a revisit (no body in B)."""
    a, b = tmp_path / "cluster" / "node-a", tmp_path / "cluster" / "node-b"
    with open_store(a / "store", StoreConfig()) as s:
        for url, body, t in (("http://a.test/a", page(1), T0), ("http://a.test/shared", page(2), T0 + 1)):
            s.put(FetchRecord.for_body(url, body, fetched_at=t, headers=HTML), body)
    with open_store(b / "store", StoreConfig()) as s:
        s.put(FetchRecord.for_body("http://b.test/b", page(3), fetched_at=T0 + 2, headers=HTML), page(3))
        copy = FetchRecord.for_body("http://b.test/mirror", page(2), fetched_at=T0 + 3, headers=HTML)
        s.put(FetchRecord(copy.url, copy.fetched_at, 200, HTML, copy.content_hash, copy.size,
                          duplicate_of="http://a.test/shared", kind="revisit"), None)
    return a, b


WANT = {"http://a.test/a": page(1), "http://a.test/shared": page(2), "http://b.test/b": page(3),
        "http://b.test/mirror": page(2)}


def test_a_revisit_in_one_node_replays_the_bytes_another_node_stored(two_nodes: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    a, b = two_nodes
    warc, cdxj = tmp_path / "all.warc.gz", tmp_path / "all.cdxj"
    run = polecat("store", "export", str(a), str(b), "--warc", str(warc), "--cdxj", str(cdxj))
    assert run.returncode == 0, run.stderr
    assert replay(warc) == WANT
    lines = cdxj.read_text().splitlines()
    assert lines == sorted(lines) and len(lines) == 4
    digests = {json.loads(line.split(" ", 2)[2])["url"]: json.loads(line.split(" ", 2)[2])["digest"]
               for line in lines}
    assert digests["http://b.test/mirror"] == digests["http://a.test/shared"] != "-"
    check = tool("warcio", "check", "-v", str(warc))
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_parent_dir_of_nodes_is_one_collection_and_each_store_is_read_once(
        two_nodes: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = two_nodes
    parent = a.parent
    warc = tmp_path / "parent.warc.gz"
    run = polecat("store", "export", str(parent), str(a), "--warc", str(warc))  # node-a twice: once
    assert run.returncode == 0, run.stderr
    assert "4 records written" in run.stderr
    assert replay(warc) == WANT
    feed = polecat("export", str(parent), "--jsonl", "-")
    items = {i["url"]: i for i in map(json.loads, feed.stdout.splitlines())}
    assert set(items) == set(WANT)
    # The mirror's title and text come from the body node A stored.
    assert items["http://b.test/mirror"]["title"] == "page 2"
    assert items["http://b.test/mirror"]["duplicate_of"] == "http://a.test/shared"
    listed = polecat("pages", str(parent))
    assert {line.split("\t")[0] for line in listed.stdout.splitlines()[1:]} == set(WANT)
    cat = subprocess.run([sys.executable, "-m", "polecat", "cat", str(parent), "http://b.test/mirror"],
                         capture_output=True, timeout=120)
    assert cat.returncode == 0 and cat.stdout == page(2), cat.stderr


def test_a_copied_store_is_read_once(two_nodes: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = two_nodes
    copy = tmp_path / "copy-of-a"
    subprocess.run(["cp", "-r", str(a), str(copy)], check=True, timeout=60)
    run = polecat("store", "export", str(a), str(b), str(copy), "--warc", str(tmp_path / "x.warc.gz"))
    assert run.returncode == 0 and "4 records written" in run.stderr, run.stderr
    assert "is a copy of" in run.stderr


def test_workers_and_separate_data_dirs_export_as_one_replayable_collection(test_web: TestWebFactory,
                                                                            tmp_path: Path) -> None:
    spec = SiteSpec(hosts=6, pages_per_host=20, seed=11, dup_ratio=0.2, near_dup_ratio=0.1)
    web = test_web(spec)
    seeds = web.seeds
    workers, single = tmp_path / "workers", tmp_path / "single"
    # Two crawls of one web: half the hosts by two workers, the rest by one process (another "node").
    for data, some, extra in ((workers, seeds[:3], ("--workers", "2")), (single, seeds[3:], ())):
        cmd = crawl_cmd(web, data, 50.0, *extra)
        code, out = finish(start([*cmd[:4], *some, *cmd[4 + len(seeds):]], data))
        assert code == 0, out
    warc, cdxj = tmp_path / "crawl.warc.gz", tmp_path / "crawl.cdxj"
    run = polecat("store", "export", str(workers), str(single), "--warc", str(warc), "--cdxj", str(cdxj))
    assert run.returncode == 0, run.stderr
    served = {r.url for r in web.log if not r.url.endswith("/robots.txt") and r.status == 200}
    pages = {url: body for url, body in replay(warc).items() if not url.endswith("/robots.txt")}
    assert set(pages) == served
    for url in sorted(served)[::7]:
        host, path = url.split("/", 3)[2].split(":")[0], "/" + url.split("/", 3)[3]
        served_page = web.site.lookup(host, path.split("?")[0], parse_qsl(urlsplit(url).query))
        assert served_page is not None and pages[url] == web.site.render(served_page, web.port), url
    status = polecat("status", str(workers), str(single))
    assert f"fetched {len(web.ground_truth('host'))}" in status.stdout, status.stdout


def test_a_revisit_whose_body_its_own_store_got_later_still_replays(tmp_path: Path) -> None:
    """Node B recorded /mirror as a copy of A's page, then stored the same body itself (a copy whose claim
    had no answer): the revisit, written without a date, is resolved all the same."""
    a, b = tmp_path / "a", tmp_path / "b"
    with open_store(a / "store", StoreConfig()) as s:
        s.put(FetchRecord.for_body("http://a.test/shared", page(2), fetched_at=T0, headers=HTML), page(2))
    with open_store(b / "store", StoreConfig()) as s:
        copy = FetchRecord.for_body("http://b.test/mirror", page(2), fetched_at=T0 + 1, headers=HTML)
        s.put(FetchRecord(copy.url, copy.fetched_at, 200, HTML, copy.content_hash, copy.size,
                          duplicate_of="http://a.test/shared", kind="revisit"), None)
        s.put(FetchRecord.for_body("http://b.test/late", page(2), fetched_at=T0 + 2, headers=HTML), page(2))
    warc = tmp_path / "x.warc.gz"
    run = polecat("store", "export", str(b), str(a), "--warc", str(warc))
    assert run.returncode == 0, run.stderr
    assert replay(warc) == {"http://a.test/shared": page(2), "http://b.test/mirror": page(2),
                            "http://b.test/late": page(2)}
