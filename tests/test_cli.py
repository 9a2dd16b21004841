"""The ``polecat`` command as a user runs it: crawl, pages, cat, config errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from polecat.commands.node import call
from polecat.config import config_from_mapping
from polecat.errors import ConfigError
from polecat.store.base import content_hash
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory


def polecat(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_crawl_then_pages_and_cat(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=10, seed=5))
    data = tmp_path / "d"
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# seeds\n" + "\n".join(web.seeds) + "\n")
    run = polecat("crawl", "--seeds-file", str(seeds), "--data", str(data), "--rate", "20",
                  "--dns-server", web.dns_address, "--allow-private", "--throttle", "h02.test=10")
    assert run.returncode == 0, run.stderr
    assert "ended: queue empty" in run.stdout and "politeness violations" not in run.stdout  # none: no line
    status = polecat("status", str(data))
    assert status.returncode == 0, status.stderr
    fetched = len(web.ground_truth("host"))
    assert "queued 0," in status.stdout and f"fetched {fetched}," in status.stdout, status.stdout
    assert max(map(len, status.stdout.splitlines())) <= 80, status.stdout
    assert "throttle h02.test = 10 req/s" in status.stdout
    listing = polecat("pages", str(data))
    assert listing.returncode == 0, listing.stderr
    lines = [line.split() for line in listing.stdout.splitlines() if line.strip()]
    truth = web.ground_truth("host")
    listed = {f[0] for f in lines}
    assert truth <= listed
    url = sorted(truth)[0]
    body = subprocess.run([sys.executable, "-m", "polecat", "cat", str(data), url], capture_output=True,
                          timeout=60)
    assert body.returncode == 0
    assert b"<html" in body.stdout.lower()
    digest = content_hash(body.stdout).hex()
    assert any(f[0] == url and digest in f for f in lines)


def test_config_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[politeness]\nrate = -1\n")
    run = polecat("crawl", "http://a.test/", "--config", str(bad), "--data", str(tmp_path / "d"))
    assert run.returncode == 2
    assert "politeness.rate" in run.stderr
    bad.write_text("[fetch]\nconcurency = 3\n")
    run = polecat("crawl", "http://a.test/", "--config", str(bad))
    assert run.returncode == 2 and "fetch.concurency: unknown setting" in run.stderr
    run = polecat("crawl", "--data", str(tmp_path / "empty"))
    assert run.returncode == 2 and "nothing to crawl" in run.stderr
    run = polecat("crawl", "ftp://a.test/", "--data", str(tmp_path / "ftp"))
    assert run.returncode == 2 and "not an http(s) URL" in run.stderr
    run = polecat("crawl", "http://a.test/", "--data", "")  # issue 33: it crawled into the current directory
    assert run.returncode == 2 and "--data: an empty path" in run.stderr


def test_private_addresses_refused_by_default(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=2, seed=1))
    run = polecat("crawl", *web.seeds, "--data", str(tmp_path / "d"), "--dns-server", web.dns_address)
    assert run.returncode == 3, run.stderr
    assert web.log == []  # nothing reached the loopback server
    assert "blocked_address" in run.stdout


def test_newcomer_mistakes_get_a_fix_and_leave_nothing_behind(tmp_path: Path) -> None:
    data = tmp_path / "d"
    run = polecat("crawl", "example.com", "--data", str(data))
    assert run.returncode == 2 and "did you mean http://example.com/?" in run.stderr
    assert not data.exists() and "Unclosed" not in run.stderr and "Traceback" not in run.stderr
    afile = tmp_path / "file"
    afile.write_text("x")
    run = polecat("crawl", "http://a.test/", "--data", str(afile))
    assert run.returncode == 2 and "--data (data_dir): " in run.stderr and "not a directory" in run.stderr
    run = polecat("crawl", "http://a.test/", "--data", str(data), "--dns-server", "localhost")
    assert run.returncode == 2 and "--dns-server (dns.nameservers[0]): 'localhost'" in run.stderr
    run = polecat("crawl", "http://a.test/", "--data", str(data), "--rate", "0")
    assert run.returncode == 2 and "--rate (politeness.rate): must be in (0, 1000]" in run.stderr
    run = polecat("crawl", "http://a.test/", "--data", str(data), "--max-page", "10")
    assert run.returncode == 2 and "usage: polecat crawl" in run.stderr
    assert "unrecognized arguments: --max-page (did you mean --max-pages?) 10" in run.stderr
    run = polecat("crawl", str(afile), "--data", str(data))
    assert run.returncode == 2
    assert f"is a file: to crawl the URLs it lists, --seeds-file {afile}" in run.stderr
    run = polecat("crawl", str(tmp_path / "site" / "index.html"), "--data", str(data))
    assert run.returncode == 2 and "is a file path, not an http(s) URL" in run.stderr
    assert "http:///" not in run.stderr
    assert not data.exists()


def test_a_seeds_file_is_read_in_bounded_lines_with_clear_errors(tmp_path: Path) -> None:
    # Issue 33: /dev/zero took 7 GB in 20 s; a byte 0xff was a traceback. /dev/zero is refused at the
    # start (exit 2); a file of one endless line stops the feed at its bound, naming the line
    # (polecat/node/seed_feed.py rule 2); a line not UTF-8 is skipped, counted and logged.
    run = polecat("crawl", "--seeds-file", "/dev/zero", "--data", str(tmp_path / "z"), timeout=60)
    assert run.returncode == 2 and "not a regular file: /dev/zero" in run.stderr, run.stderr
    endless = tmp_path / "endless.txt"
    endless.write_bytes(b"http://a.test/" * 100_000)  # 1.4 MB, no line end
    run = polecat("crawl", "--seeds-file", str(endless), "--data", str(tmp_path / "e"), timeout=60)
    assert run.returncode != 0 and "line 1 runs past 1048576 bytes" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    seeds = tmp_path / "seeds.txt"
    # The line after it is read on: a loopback seed, refused at once without --allow-private (no request,
    # and no name to resolve: an unresolvable seed's retries took ~19 s of the suite).
    seeds.write_bytes(b"# seeds\nhttp://b.test/\xff\nhttp://127.0.0.1:9/\n")
    run = polecat("crawl", "--seeds-file", str(seeds), "--data", str(tmp_path / "ff"), timeout=60)
    assert "skipped" in run.stderr and "not UTF-8" in run.stderr and "Traceback" not in run.stderr
    assert "gave up 127.0.0.1:9: blocked_address" in run.stdout + run.stderr, run.stdout


@pytest.mark.parametrize(("mapping", "words"), [
    ({"scope": {"seeds": ["http://[::1/"]}}, "scope.seeds[0]: 'http://[::1/' is not a URL: Invalid IPv6 URL"),
    ({"scope": {"seeds": ["http://a.test:65536/"]}}, "scope.seeds[0]: 'http://a.test:65536/' is not a URL"),
    ({"scope": {"seeds": ["http://a.test:-1/"]}}, "scope.seeds[0]: 'http://a.test:-1/' is not a URL"),
    ({"scope": {"seeds": ["http://a.test:0/"]}}, "scope.seeds[0]: 'http://a.test:0/': port 0"),
    ({"dedup": {"expected_urls": 99_999_999_999_999_999}}, "dedup.expected_urls: must be in"),
    ({"data_dir": ""}, "data_dir: an empty path"),
    ({"scope": {"seeds": ["http://a\x01.test/"]}}, "the host name holds a space or a control character"),
])
def test_bad_settings_are_config_errors_naming_the_field(mapping: dict[str, Any], words: str) -> None:
    # Issue 33: each was a traceback (ValueError, MemoryError) or exit 1; a ConfigError is exit 2.
    with pytest.raises(ConfigError) as err:
        config_from_mapping(mapping)
    assert words in str(err.value)


def test_a_node_address_that_is_not_a_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"--node \(POLECAT_NODE\): expected the node's http://host:port"):
        call("not a url", "GET", "/admin/crawl/status")
    run = polecat("seeds", "add", "http://x/", "--node", "not a url")
    assert run.returncode == 2 and "Traceback" not in run.stderr
