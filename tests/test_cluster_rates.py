"""The fetch rate ``polecat cluster status`` shows: over the last minute, not since the node started."""

from __future__ import annotations

import pytest

from polecat.cluster.stats import RecentRate


def test_the_rate_is_that_of_the_last_minute_and_falls_to_zero_when_fetching_stops() -> None:
    rate = RecentRate(window=60.0)
    assert rate.rate() == 0.0
    rate.add(0.0, 0)
    assert rate.rate() == 0.0  # one reading: no span yet
    for t in range(1, 121):  # two minutes at 10 fetches/s
        rate.add(float(t), 10 * t)
    assert rate.rate() == pytest.approx(10.0)
    for t in range(121, 151):  # then 2/s for half a minute: the last minute mixes both
        rate.add(float(t), 1200 + 2 * (t - 120))
    assert rate.rate() == pytest.approx((1260 - 900) / 60)
    for t in range(151, 240):  # nothing for a minute and a half: 0, where the average since start is not
        rate.add(float(t), 1260)
    assert rate.rate() == 0.0
    assert len(rate._readings) <= 62  # bounded by the window, not by the run


def test_a_count_that_starts_over_starts_the_rate_over() -> None:
    rate = RecentRate(window=60.0)
    rate.add(0.0, 500)
    rate.add(1.0, 510)
    rate.add(2.0, 3)  # a new run of the crawler: its count began again
    assert rate.rate() == 0.0
    rate.add(3.0, 8)
    assert rate.rate() == pytest.approx(5.0)
