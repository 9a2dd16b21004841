"""Smoke test of benchmarks/bench_claims.py: one process and two workers crawl a tiny mirrored web."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_claims import main


def test_bench_claims_measures_the_collapse_of_one_process_and_of_workers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hosts", "4", "--pages-per-host", "10", "--rate", "50", "--workers", "2",
                 "--out", str(tmp_path), "--timeout", "120"]) == 0
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| 1 process") or line.startswith("| 2 workers")]
    assert len(rows) == 2
    assert rows[0][1] == rows[1][1] and int(rows[0][1]) > 0  # the same pages
    assert all(0 < float(r[4]) < 1.5 and int(r[6]) > 0 for r in rows)  # mirrors became revisits
