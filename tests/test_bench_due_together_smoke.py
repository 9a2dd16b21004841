"""Smoke test of benchmarks/bench_due_together.py: it runs, and its lease calls leave the gauges caught
up (host_table.py rule 17); its figures are not asserted."""

from __future__ import annotations

import re
import sys

import pytest

from benchmarks import bench_due_together


def test_the_bench_runs_and_the_gauges_catch_up(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_due_together", "--hosts", "3000", "--calls", "5"])
    bench_due_together.main()
    out = capsys.readouterr().out
    got = re.search(r"then ready ([0-9,]+), waiting ([0-9,]+)", out)
    assert got is not None and out.startswith("3,000 hosts due together")
    assert (got.group(1), got.group(2)) == ("2,995", "0")  # 5 leased, the rest due
