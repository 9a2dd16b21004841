"""Smoke test of benchmarks/bench_dns_memory.py: both channels resolve a few names and report growth."""

from __future__ import annotations

import re

import pytest

from benchmarks.bench_dns_memory import main


def test_bench_dns_memory_resolves_every_name_on_both_channels(capfd: pytest.CaptureFixture[str]) -> None:
    main(["--names", "100", "--every", "50"])
    out = capfd.readouterr().out
    assert "query cache on" in out and "query cache off" in out
    assert len(re.findall(r"^ +100 names: RssAnon", out, re.M)) == 2
    assert len(re.findall(r"B a name \(\d+ errors\)", out)) == 2
