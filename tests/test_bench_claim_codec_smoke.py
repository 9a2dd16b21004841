"""Smoke test of benchmarks/bench_claim_codec.py: each frame packed, read back equal, and timed."""

from __future__ import annotations

import pytest

from benchmarks.bench_claim_codec import main


def test_bench_claim_codec_reads_back_every_frame_it_packs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--frames", "5", "--items", "3", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("µs/item") == 10
    assert "near claims      3 items" in out
