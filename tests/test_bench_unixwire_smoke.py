"""Smoke test of benchmarks/bench_unixwire.py: a few frames to each receiver, in one process and two."""

from __future__ import annotations

import pytest

from benchmarks.bench_unixwire import main


def test_bench_unixwire_prints_a_row_a_receiver_and_window(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--frames", "20", "--bytes", "100", "--window", "1,4", "--rounds", "1"])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| a")]
    assert [(r[0], r[1], r[2]) for r in rows] == [("| at-once", "1", "20"), ("| at-once", "4", "20"),
                                                  ("| awaited", "1", "20"), ("| awaited", "4", "20")]
    assert all(float(r[4]) > 0 and float(r[5].rstrip(" |")) > 0 for r in rows)
