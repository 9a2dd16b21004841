"""Smoke test of benchmarks/bench_stalls.py: one 3-node crawl of a tiny web, its nameserver held a moment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_stalls import main


def test_bench_stalls_keeps_a_runs_logs_and_says_whether_it_stalled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hosts", "4", "--pages-per-host", "3", "--runs", "1", "--dns-pause", "0.2",
                 "--dns-pause-at", "1", "--out", str(tmp_path), "--timeout", "120"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = json.loads(out[0])
    assert (row["run"], row["codes"], row["stalled"]) == ("run000-off", [0, 0, 0], False)
    assert row["requests"] >= 4 * 3 and row["dns_queries"] >= 4
    assert out[-2:] == ["0 of 1 runs stalled (span > 20 s)", "0 of 1 runs lost pages"]
    assert row["stored"] > 0 and (row["cut"], row["lost"]) == ([], [])
    run = tmp_path / "run000-off"
    assert len(json.loads((run / "requests.json").read_text())) == row["requests"]
    assert all((run / f"n{k}.log").exists() and not (run / f"n{k}").exists() for k in range(3))
