"""Getting the data out: ``pages`` formats and filters, failed URLs with reasons, ``export --jsonl``,
``cat`` by hash prefix and by URL as typed, and no traceback when the reader goes away."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from polecat.commands.pages import COLUMNS
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.test_cli import polecat


@pytest.fixture
def crawled(test_web: TestWebFactory, tmp_path: Path) -> tuple[TestWeb, Path]:
    web = test_web(SiteSpec(hosts=2, pages_per_host=15, seed=8, private_ratio=0.25,
                            robots=("disallow_private", "allow")))
    web.respond("h02.test", "/", 404, headers={"Content-Type": "text/html"}, body=b"<p>gone</p>")
    web.redirect("h01.test", "/old", "/")
    data = tmp_path / "d"
    run = polecat("crawl", *web.seeds, f"{web.base_url('h01.test')}/old", "--data", str(data), "--rate", "50",
                  "--dns-server", web.dns_address, "--allow-private", "-q")
    assert run.returncode == 0, run.stderr
    return web, data


def test_pages_formats_filters_and_failed(crawled: tuple[TestWeb, Path]) -> None:
    web, data = crawled
    tsv = polecat("pages", str(data)).stdout.splitlines()
    assert tsv[0].split("\t") == list(COLUMNS)
    rows = list(csv.DictReader(io.StringIO(polecat("pages", str(data), "--format", "csv").stdout)))
    assert {r["url"] for r in rows} >= {u for u in web.ground_truth("host") if "h01" in u}
    jsonl = [json.loads(x) for x in polecat("pages", str(data), "--format", "jsonl").stdout.splitlines()]
    assert len(jsonl) == len(rows) == len(tsv) - 1
    gone = [json.loads(x) for x in polecat("pages", str(data), "--format", "jsonl", "--status", "4xx").stdout
            .splitlines()]
    assert [(r["url"], r["status"]) for r in gone] == [(web.base_url("h02.test") + "/", 404)]
    h1 = polecat("pages", str(data), "--host", "h01.test", "--status", "2xx,301").stdout.splitlines()[1:]
    assert h1 and all("//h01.test:" in line for line in h1)
    assert any(line.split("\t")[6] == "redirect" for line in h1)
    with_port = web.base_url("h01.test").split("//")[1]  # as the summary names the host
    by_port = polecat("pages", str(data), "--host", with_port, "--status", "2xx,301").stdout.splitlines()
    assert by_port[1:] == h1
    assert polecat("pages", str(data), "--host", "h01.test:1").stdout.splitlines()[1:] == []
    failed = [json.loads(x) for x in polecat("pages", str(data), "--failed", "--format", "jsonl").stdout
              .splitlines()]
    assert failed and all(r["outcome"] == "skipped" and r["reason"] == "robots" for r in failed), failed
    assert all("/private/" in r["url"] for r in failed)
    bad = polecat("pages", str(data), "--status", "2yy")
    assert bad.returncode == 2 and "--status" in bad.stderr


def test_pages_into_head_has_no_traceback(crawled: tuple[TestWeb, Path]) -> None:
    _, data = crawled
    cmd = f"{sys.executable} -m polecat pages {data} --format jsonl | head -1"
    run = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert len(run.stdout.splitlines()) == 1 and run.stderr == "", run.stderr
    # The reader gone before the first write (what `head` does to a long listing): no traceback.
    proc = subprocess.Popen([sys.executable, "-m", "polecat", "pages", str(data)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and err == "", err


def test_export_jsonl_and_cat_by_prefix_and_typed_url(crawled: tuple[TestWeb, Path]) -> None:
    web, data = crawled
    out = polecat("export", str(data), "--jsonl", "-")
    assert out.returncode == 0, out.stderr
    items = {i["url"]: i for i in map(json.loads, out.stdout.splitlines())}
    root = items[web.base_url("h01.test") + "/"]
    assert set(root) >= {"url", "final_url", "status", "fetched_at", "content_type", "title", "text",
                         "outlinks", "hash", "duplicate_of"}
    assert root["status"] == 200 and root["content_type"] == "text/html" and root["title"] and root["text"]
    assert root["outlinks"] and all(u.startswith("http") for u in root["outlinks"])
    assert items[web.base_url("h01.test") + "/old"]["final_url"] == web.base_url("h01.test") + "/"
    typed = web.base_url("h01.test").replace("h01.test", "H01.TEST") + "/./"
    body = subprocess.run([sys.executable, "-m", "polecat", "cat", str(data), typed], capture_output=True,
                          timeout=60)
    assert body.returncode == 0, body.stderr
    by_prefix = subprocess.run([sys.executable, "-m", "polecat", "cat", str(data), root["hash"][:10]],
                               capture_output=True, timeout=60)
    assert by_prefix.returncode == 0 and by_prefix.stdout == body.stdout and b"<html" in body.stdout.lower()
    short = polecat("cat", str(data), root["hash"][:4])
    assert short.returncode == 1 and "at least 6 hex digits" in short.stderr
    missing = polecat("cat", str(data), web.base_url("h01.test") + "/nope")
    assert missing.returncode == 1 and missing.stderr.startswith("polecat: error: no stored page for http")
    target = data.parent / "feed.jsonl"
    assert polecat("export", str(data), "--jsonl", str(target)).returncode == 0
    assert len(target.read_text().splitlines()) == len(items)
