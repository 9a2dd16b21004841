"""Smoke test of benchmarks/bench_claim_decisions.py: 200 pages, 4 near copies of each text."""

from __future__ import annotations

import pytest

from benchmarks.bench_claim_decisions import main


def test_bench_claim_decisions_decides_every_page_and_stores_one_of_each_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pages", "200", "--members", "3", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "µs/page" in out
    assert "'near copies': 150, 'exact copies': 0, 'stored in full': 50" in out
