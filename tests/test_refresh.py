"""Refresh policy (polecat/frontier/refresh.py): estimator, clamping, priors, overrides, shares."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.config import RefreshConfig
from polecat.frontier.refresh import (
    History,
    Prior,
    RefreshPolicy,
    estimate_rate,
    irregular_rate,
    observe,
    prior_interval,
    refresh_slots,
    regular_rate,
)
from polecat.frontier.refresh_budget import budget_intervals

CFG = RefreshConfig()
HOUR = 3600.0
DAY = 86_400.0


def visits(pattern: list[tuple[float, bool]], start: float = 1000.0) -> History:
    """History after a first visit at ``start`` and then one visit per (interval, changed)."""
    h = observe(History(), start, True)
    t = start
    for gap, changed in pattern:
        t += gap
        h = observe(h, t, changed)
    return h


def test_first_visit_records_time_only() -> None:
    h = observe(History(), 50.0, True)
    assert (h.n, h.x, h.last_visit, h.observed) == (0, 0, 50.0, 0.0)
    assert estimate_rate(h) == 0.0


def test_regular_form_closed_cases() -> None:
    # n = 10 equal intervals of an hour, 5 changes: -ln(5.5/10.5)/3600.
    h = visits([(HOUR, i % 2 == 0) for i in range(10)])
    assert (h.n, h.x) == (10, 5)
    assert estimate_rate(h) == pytest.approx(-math.log(5.5 / 10.5) / HOUR)
    # No change seen: rate 0. Every interval changed: ln(2n + 1)/I, finite.
    assert estimate_rate(visits([(HOUR, False)] * 8)) == 0.0
    assert estimate_rate(visits([(HOUR, True)] * 8)) == pytest.approx(math.log(17) / HOUR)


def test_irregular_form_solves_the_likelihood_equation() -> None:
    # Changed after 1 h and 4 h, unchanged for 2 h and 8 h: root of 1/(e^l - 1) + 4/(e^4l - 1) = 10 (hours).
    h = visits([(HOUR, True), (2 * HOUR, False), (4 * HOUR, True), (8 * HOUR, False)])
    lam = estimate_rate(h) * HOUR
    assert 1 / math.expm1(lam) + 4 / math.expm1(4 * lam) == pytest.approx(10.0, rel=1e-6)
    assert lam == pytest.approx(irregular_rate(h.bins, h.unchanged) * HOUR)


def test_irregular_equals_mle_of_regular_when_intervals_equal() -> None:
    # With equal intervals the likelihood's root is -ln((n - x)/n)/I (no 0.5 correction).
    h = visits([(HOUR, True)] * 3 + [(HOUR, False)] * 7)
    assert irregular_rate(h.bins, h.unchanged) == pytest.approx(-math.log(7 / 10) / HOUR, rel=1e-6)
    assert regular_rate(10, 3, HOUR) == pytest.approx(-math.log(7.5 / 10.5) / HOUR)


def simulate(rate: float, visits_n: int, rng: random.Random, policy: RefreshPolicy | None) -> float:
    """Visit a Poisson page ``visits_n`` times (at the policy's intervals, else every 1/rate); estimate."""
    h = observe(History(), 0.0, True)
    t, next_change = 0.0, rng.expovariate(rate)
    for _ in range(visits_n):
        every = policy.interval("h", h, None, t) if policy else 1.0 / rate
        assert every is not None
        t += every * rng.uniform(0.8, 1.2) if policy else every
        changed = next_change <= t
        while next_change <= t:
            next_change += rng.expovariate(rate)
        h = observe(h, t, changed)
    return estimate_rate(h)


@pytest.mark.parametrize("scheduled", [False, True], ids=["regular", "irregular"])
def test_simulated_poisson_page_within_20_percent_after_30_visits(scheduled: bool) -> None:
    # One page's estimate after 30 one-bit observations has a relative sd of about 23 % at best (the
    # Cramer-Rao bound at the optimal interval), so the claim is checked over many simulated pages:
    # the typical (median) error is within 20 % and the estimator is nearly unbiased.
    rng = random.Random(16)
    rate = 1 / (3 * HOUR)
    policy = RefreshPolicy(RefreshConfig(min_interval=60.0, min_visits=3)) if scheduled else None
    ests = [simulate(rate, 30, rng, policy) for _ in range(400)]
    errors = [abs(e / rate - 1) for e in ests]
    assert statistics.median(errors) < 0.20
    assert statistics.fmean(ests) == pytest.approx(rate, rel=0.10)


def test_next_interval_is_k_over_rate_clamped() -> None:
    policy = RefreshPolicy(RefreshConfig(k=2.0, min_visits=1))
    h = visits([(DAY, i % 2 == 0) for i in range(10)])
    assert policy.interval("h", h, None, 0.0) == pytest.approx(2.0 / estimate_rate(h))
    fast = visits([(60.0, True)] * 10)
    assert policy.interval("h", fast, None, 0.0) == CFG.min_interval
    static = visits([(DAY, False)] * 20)
    assert policy.interval("h", static, None, 0.0) == CFG.max_interval


def test_priors_before_enough_history() -> None:
    now = 100 * DAY
    assert prior_interval(CFG, Prior(changefreq="daily"), now) == DAY
    assert prior_interval(CFG, Prior(changefreq="always"), now) == CFG.min_interval
    assert prior_interval(CFG, Prior(changefreq="never"), now) == CFG.max_interval
    assert prior_interval(CFG, Prior(lastmod=now - 2 * DAY), now) == 2 * DAY
    assert prior_interval(CFG, Prior(lastmod=now + DAY), now) == CFG.default_interval
    assert prior_interval(CFG, None, now) == CFG.default_interval
    # changefreq wins over lastmod; the prior fades linearly and the estimate replaces it after min_visits.
    assert prior_interval(CFG, Prior(lastmod=now - 2 * DAY, changefreq="hourly"), now) == HOUR
    policy = RefreshPolicy(CFG)
    assert policy.interval("h", observe(History(), now, True), Prior(changefreq="hourly"), now) == HOUR
    h = visits([(DAY, False)] * (CFG.min_visits - 1))
    w = 1 - h.n / CFG.min_visits
    blended = w / HOUR + (1 - w) * 0.5 / h.observed
    assert policy.interval("h", h, Prior(changefreq="hourly"), now) == pytest.approx(1 / blended)
    h = observe(h, h.last_visit + DAY, False)
    assert policy.interval("h", h, Prior(changefreq="hourly"), now) == pytest.approx(2 * h.observed)


def test_quiet_page_interval_grows_with_watched_time() -> None:
    # No change in T is evidence of a rate below ~1/T: the interval is 2T/k, up to the ceiling.
    policy = RefreshPolicy(CFG)
    for days in (3, 5, 10, 20):
        h = visits([(DAY, False)] * days)
        assert estimate_rate(h) == 0.0
        assert policy.interval("h", h, None, 0.0) == pytest.approx(min(2 * days * DAY, CFG.max_interval))


def test_overrides_and_never() -> None:
    policy = RefreshPolicy(RefreshConfig(overrides=(("*.news.test", 600.0),), never=("docs.test",)))
    h = visits([(DAY, False)] * 5)
    assert policy.interval("www.news.test", h, None, 0.0) == 600.0
    assert policy.interval("docs.test:8080", h, None, 0.0) is None
    assert policy.due_at("docs.test", h, None, 0.0) is None
    assert policy.interval("other.test", h, None, 0.0) == pytest.approx(2 * h.observed)


@given(last=st.floats(1.0, 1e9), host_ready=st.floats(0.0, 2e9), changes=st.lists(st.booleans(), max_size=12),
       gap=st.floats(1.0, 1e6))
def test_property_never_due_before_politeness_or_floor(last: float, host_ready: float, changes: list[bool],
                                                       gap: float) -> None:
    policy = RefreshPolicy(CFG)
    h = visits([(gap, c) for c in changes], start=last)
    due = policy.due_at("h", h, None, host_ready)
    assert due is not None
    assert due >= host_ready
    assert due >= h.last_visit + CFG.min_interval
    assert due <= max(host_ready, h.last_visit + CFG.max_interval)


@given(pattern=st.lists(st.tuples(st.floats(1.0, 1e7), st.booleans()), min_size=1, max_size=40))
def test_property_estimate_finite_nonnegative_and_encoding_round_trips(
        pattern: list[tuple[float, bool]]) -> None:
    h = visits(pattern)
    lam = estimate_rate(h)
    assert math.isfinite(lam) and lam >= 0.0
    assert (lam == 0.0) == (h.x == 0)
    assert History.decode(h.encode()) == h


def test_more_changes_never_lower_the_estimate() -> None:
    base = [(HOUR * (1 + i % 3), False) for i in range(12)]
    previous = 0.0
    for flips in range(13):
        pattern = [(g, i < flips) for i, (g, _) in enumerate(base)]
        lam = estimate_rate(visits(pattern))
        assert lam >= previous
        previous = lam


def test_priority_is_importance_times_staleness_and_slo_window() -> None:
    h = visits([(HOUR, True)])
    now = h.last_visit + 2 * HOUR
    assert RefreshPolicy.priority(0.5, h, HOUR, now) == pytest.approx(1.0)
    assert RefreshPolicy.within_window(h, 2 * HOUR, now)
    assert not RefreshPolicy.within_window(h, HOUR, now)
    assert not RefreshPolicy.within_window(History(), HOUR, now)


@given(share=st.floats(0.0, 1.0), window=st.floats(1.0, 3600.0), gap=st.floats(0.01, 100.0))
def test_property_refresh_slots_keep_the_discovery_share(share: float, window: float, gap: float) -> None:
    slots = refresh_slots(share, window, gap, True)
    assert slots is not None
    # At most the refresh share of the fetches the window allows, rounded up (one when the share is > 0).
    assert slots == math.ceil(share * window / gap)
    assert slots <= share * window / gap + 1


def test_refresh_slots_without_competition_or_window() -> None:
    assert refresh_slots(0.1, 60.0, 1.0, discovery_waiting=False) is None
    assert refresh_slots(0.1, None, 1.0, discovery_waiting=True) is None
    assert refresh_slots(0.0, 60.0, 1.0, discovery_waiting=True) == 0


def freshness(rates: np.ndarray, intervals: np.ndarray) -> float:
    """Time-averaged freshness of pages visited every ``intervals`` (closed form, Poisson changes)."""
    x = rates * intervals
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(x > 0, -np.expm1(-x) / x, 1.0)
    return float(f.mean())


def test_budget_intervals_keep_k_over_rate_when_the_budget_allows() -> None:
    rates = np.array([[1 / HOUR, 1 / DAY, 0.0]])
    got = budget_intervals(rates, np.ones_like(rates), np.array([1.0]), CFG)
    assert got.tolist() == [[HOUR, DAY, CFG.max_interval]]


def test_budget_intervals_spend_the_budget_and_beat_uniform_and_proportional() -> None:
    rng = np.random.default_rng(0)
    rates = (1 / (30 * DAY)) * rng.random((3, 200)) ** (-1 / 0.4)
    budget = np.array([20 / DAY, 50 / DAY, 1000 / DAY])
    got = budget_intervals(rates, np.ones_like(rates), budget, CFG)
    assert np.all((got >= CFG.min_interval) & (got <= CFG.max_interval))
    spent = (1 / got).sum(axis=1)
    assert spent[:2] == pytest.approx(budget[:2], rel=0.01)
    for row in range(2):
        uniform = np.full(200, 200 / budget[row])
        proportional = 1 / (budget[row] * rates[row] / rates[row].sum())
        best = freshness(rates[row], got[row])
        assert best > freshness(rates[row], uniform) > freshness(rates[row], proportional)
    # The page that changes fastest is given up (visited at the ceiling) under the tightest budget.
    assert got[0, np.argmax(rates[0])] == pytest.approx(CFG.max_interval)


def test_budget_intervals_favour_important_pages() -> None:
    rates = np.full((1, 10), 1 / DAY)
    weights = np.array([[4.0] + [1.0] * 9])
    got = budget_intervals(rates, weights, np.array([5 / DAY]), CFG)
    assert got[0, 0] < got[0, 1] and np.all(got[0, 1:] == got[0, 1])


def test_budget_intervals_spend_the_budget_when_every_page_is_too_fast() -> None:
    # Ten pages changing every 25 s, 0.01 visits/s between them: the optimum is flat (each visit buys
    # about the same tiny freshness), and the budget is shared evenly instead of left unspent.
    cfg = RefreshConfig(min_interval=10.0, max_interval=100_000.0)
    got = budget_intervals(np.full((1, 10), 0.04), np.ones((1, 10)), np.array([0.01]), cfg)
    assert np.all(got == got[0, 0]) and (1 / got).sum() == pytest.approx(0.01, rel=0.05)
