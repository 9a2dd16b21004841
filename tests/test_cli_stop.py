"""Ctrl-C stops a real ``polecat crawl`` process even when its stderr is a pipe whose reader has gone
(``polecat crawl ... 2>&1 | tee log``, then Ctrl-C: tee dies first)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

STOP_GRACE = 1.0
BOUND = 60.0
"""Seconds the test waits for the process to end after the signal: far above ``STOP_GRACE`` + 1 s, so a
loaded machine cannot break it; a crawl left running would take five minutes (2,400 pages at 8 a second)."""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigint_stops_the_crawl_when_stderr_is_a_closed_pipe(
        test_web: TestWebFactory, tmp_path: Path, workers: str) -> None:
    web = test_web(SiteSpec(hosts=4, pages_per_host=600, seed=5))
    config = tmp_path / "crawl.toml"
    config.write_text(f"[fetch]\nstop_grace = {STOP_GRACE}\n")
    read_end, write_end = os.pipe()
    cmd = [sys.executable, "-m", "polecat", "crawl", *web.seeds, "--data", str(tmp_path / "data"),
           "--rate", "2", "--scope", "host", "--dns-server", web.dns_address, "--allow-private",
           "--config", str(config), "--workers", workers]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=write_end)
    os.close(write_end)
    try:
        deadline = time.monotonic() + BOUND
        while len(web.log) < 20:
            assert proc.poll() is None, f"exited early with {proc.returncode}"
            assert time.monotonic() < deadline, f"only {len(web.log)} requests after {BOUND}s"
            time.sleep(0.02)
        os.close(read_end)  # the reader exits: every later write to stderr fails with EPIPE
        read_end = -1
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still crawling {BOUND}s after SIGINT ({len(web.log)} requests so far)")
        assert code == 130
    finally:
        if read_end >= 0:
            os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
