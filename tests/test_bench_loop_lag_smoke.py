"""Smoke test of benchmarks/bench_loop_lag.py: a tiny crawl with the loop probe and the timed checkpoints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.bench_loop_lag import main


def test_bench_loop_lag_crawls_and_times_the_loop_and_every_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--size", "tiny", "--max-pages", "40", "--rate", "20", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    pages = re.search(r"^(\d+) pages in .* (\d+) lag samples$", out, re.M)
    assert pages is not None and int(pages[1]) == 40 and int(pages[2]) > 0
    assert re.search(r"^loop lag ms: p50 [\d.]+, .* over 5 ms: [\d.]+%$", out, re.M)
    # The commits wrapped by the bench ran (with the frontier's keyword arguments) and were counted.
    commits = re.findall(r"^commit (?:on loop|in thread): (\d+) calls", out, re.M)
    assert commits and sum(map(int, commits)) >= 1
