"""The refresh simulation (benchmarks/bench_refresh.py) at a tiny size: its accounting, not its figures."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.bench_refresh import POLICIES, main, make_web, simulate
from benchmarks.bench_revisit import main as revisit_main
from polecat.config import RefreshConfig


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_static_web_is_always_fresh_and_a_churning_one_never(name: str) -> None:
    web = make_web(200, 10, 1.0, 2, 0.5, np.random.default_rng(0))
    f = simulate(web, POLICIES[name], RefreshConfig(), 4, 24, 6, 0)
    assert f.freshness == pytest.approx(1.0) and f.slo == pytest.approx(1.0)
    churn = make_web(200, 10, 0.0, 2, 0.5, np.random.default_rng(0))
    churn.rate[:] = 1 / 300.0
    f = simulate(churn, POLICIES[name], RefreshConfig(), 4, 24, 6, 0)
    assert f.freshness < 0.01


def test_table_printed(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--pages", "300", "--hosts", "10", "--days", "4"])
    out = capsys.readouterr().out
    assert out.count("| uniform |") == out.count("| nutch |") == out.count("| polecat |") == 1


def test_revisit_bench_counts_304s_and_near_duplicates() -> None:
    # Unchanged pages answer the refresh 304; cosmetic changes are near-duplicates, whose own bytes are
    # kept as deltas against the previous version (polecat/store/delta.py): stored, in a few bytes each.
    got = revisit_main(["--hosts", "1", "--pages", "30", "--changed", "0.1", "--cosmetic", "0.1"])
    assert got.changed >= 1 and got.cosmetic >= 1
    assert got.not_modified == got.pages - got.changed - got.cosmetic
    assert got.stored == got.changed + got.cosmetic
