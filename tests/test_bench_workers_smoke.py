"""Smoke test of benchmarks/bench_workers.py: both parts run end to end on a tiny web."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_workers import main


def test_bench_workers_crawls_with_each_count_and_measures_the_hand_off(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]
                                                                       ) -> None:
    assert main(["--hosts", "6", "--pages-per-host", "8", "--rate", "20", "--workers", "1,2",
                 "--out", str(tmp_path), "--timeout", "120"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 ")
            or line.startswith("| 2 ")]
    assert len(rows) == 2
    pages = {r[2].strip() for r in rows}
    assert len(pages) == 1 and int(pages.pop().replace(",", "")) > 0  # the same pages with 1 and 2 workers
    assert all(r[7].strip() == "0" for r in rows)  # no politeness violation
    # The server's own CPU was read back from its processes, and bounds pages/s on this machine's cores.
    assert all(float(r[8]) > 0 and int(r[9].replace(",", "")) > 0 for r in rows)
    # How the 6 hosts split between the workers bounds the speed-up: one worker holds them all.
    assert rows[0][10].strip() == "6 of 6" and float(rows[0][11]) == 1.0
    largest = int(rows[1][10].split()[0])
    assert 3 <= largest <= 6 and float(rows[1][11]) == pytest.approx(6 / largest, abs=0.01)
    assert main(["--handoff", "2000", "--batch-urls", "100"]) == 0
    assert "2,000 of 2,000 URLs acknowledged" in capsys.readouterr().out
    assert main(["--resize", "2,3", "--queued", "600", "--hosts", "30", "--out", str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("resize 2 -> 3"))
    assert "slices moved" in line and " 0 queued URLs" not in line
