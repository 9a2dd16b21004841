"""Smoke test of benchmarks/bench_claim_stream.py: a few frames each way, every one answered "ok"."""

from __future__ import annotations

import pytest

from benchmarks.bench_claim_stream import main


def test_bench_claim_stream_carries_every_frame_both_ways_and_prints_a_row_a_window(
        capsys: pytest.CaptureFixture[str]) -> None:
    main(["--frames", "20", "--items", "3", "--window", "1,4", "--rounds", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 |")
            or line.startswith("| 4 |")]
    assert [r.split(" | ")[1:3] for r in rows] == [["20", "3"], ["20", "3"]]
