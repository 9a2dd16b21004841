"""Memory of a crawl that meets pages at the body cap: its peak RSS stays within the ordinary crawl's
peak + 3x the body cap (issue 10: it was 20-40x the cap, ~575 MB against ~75 MB)."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

from polecat.config import FetchConfig
from polecat.testing.hostile_pages import PAGES
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

CAP = FetchConfig().max_body_bytes


def gzip_bomb_of_words(decoded: int) -> bytes:
    """A gzip body of ``decoded`` bytes of text: the fetcher cuts it at the cap."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"word " * 200_000
    return b"".join([c.compress(chunk) for _ in range(decoded // len(chunk))] + [c.flush()])


def crawl_peak_mib(test_web: TestWebFactory, data: Path, hostile: bool) -> int:
    """Peak RSS of a ``polecat crawl`` process over a small web, with or without the oversize pages."""
    web = test_web(SiteSpec(hosts=3, pages_per_host=30, seed=5))
    if hostile:
        html = {"Content-Type": "text/html"}
        links = b'<a href="/nul">n</a><a href="/bomb">b</a>'
        web.respond("h01.test", "/", 200, headers=html, body=links + PAGES["words"](CAP - len(links)))
        web.respond("h01.test", "/nul", 200, headers=html, body=PAGES["nul_bytes"](CAP))
        web.respond("h01.test", "/bomb", 200, headers={**html, "Content-Encoding": "gzip"},
                    body=gzip_bomb_of_words(20 * CAP))
    cmd = [sys.executable, "-m", "polecat", "crawl", *web.seeds, "--data", str(data), "--rate", "50",
           "--scope", "host", "--dns-server", web.dns_address, "--allow-private", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, proc.stderr.read() if proc.stderr else ""
    if hostile:  # all three were fetched
        assert {"/", "/nul", "/bomb"} <= {r.target for r in web.log if r.host == "h01.test"}
    return usage.ru_maxrss // 1024


def test_pages_at_the_body_cap_cost_at_most_three_caps_of_peak_memory(test_web: TestWebFactory,
                                                                     tmp_path: Path) -> None:
    ordinary = crawl_peak_mib(test_web, tmp_path / "ordinary", hostile=False)
    hostile = crawl_peak_mib(test_web, tmp_path / "hostile", hostile=True)
    assert hostile <= ordinary + 3 * CAP / 2**20, (ordinary, hostile)
