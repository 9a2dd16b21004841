"""Smoke test of benchmarks/bench_near_scan.py on a small web."""

from __future__ import annotations

import re

import pytest

from benchmarks.bench_near_scan import main


def test_bench_near_scan_claims_every_distinct_body_and_times_the_look_ups(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hosts", "20", "--pages-per-host", "10", "--repeat", "100"]) == 0
    out = capsys.readouterr().out
    cold = re.search(r"^([\d,]+) claims \(([\d,]+) matched, ([\d,]+) bases\): ([\d.]+) us a look-up", out,
                     re.M)
    assert cold is not None
    claimed, matched, bases = (int(cold[i].replace(",", "")) for i in (1, 2, 3))
    # 10 of the 20 hosts mirror the others: many bodies repeat, near copies match, the rest become bases
    assert 0 < matched < claimed and matched + bases == claimed and float(cold[4]) > 0
    assert re.search(r"most band-mates \(\d+\), repeated: [\d.]+ us, caches warm$", out, re.M)
