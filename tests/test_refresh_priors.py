"""Refresh priors from the first response (polecat/frontier/refresh.py rules 1, 2 and 4): Last-Modified,
feed item gaps, the last-modified estimator, the prior fading, and histories and priors of 0.2."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.config import RefreshConfig
from polecat.frontier.refresh import (
    _HEAD,
    _PRIOR,
    History,
    Prior,
    RefreshPolicy,
    estimate_rate,
    observe,
    prior_interval,
)
from polecat.parse.feed import parse_http_date

CFG = RefreshConfig(min_interval=2.0, max_interval=30 * 86_400.0)
DAY = 86_400.0
T0 = 1_700_000_000.0


def first_visit(policy: RefreshPolicy, at: float, modified: float | None,
                prior: Prior | None = None) -> tuple[History, float]:
    hexed, due = policy.after_visit("h", "", at, True, 0.0, prior, modified)
    assert due is not None
    return History.from_hex(hexed), due


def test_first_interval_is_k_times_the_age_last_modified_gives() -> None:
    policy = RefreshPolicy(CFG)
    h, due = first_visit(policy, T0, T0 - 3.0)
    assert due - T0 == pytest.approx(3.0)
    assert h.prior_rate == pytest.approx(1 / 3.0)
    # Clamped both ways; a date in the future says nothing; none at all gives the default.
    assert first_visit(policy, T0, T0 - 0.5)[1] - T0 == CFG.min_interval
    assert first_visit(policy, T0, T0 - 5 * 365 * DAY)[1] - T0 == CFG.max_interval
    assert first_visit(policy, T0, T0 + 60.0)[1] - T0 == CFG.default_interval
    assert first_visit(policy, T0, None)[1] - T0 == CFG.default_interval
    # A sitemap changefreq wins; Last-Modified wins over a sitemap lastmod; a feed's item gap counts.
    assert first_visit(policy, T0, T0 - 3.0, Prior(changefreq="weekly"))[1] - T0 == 7 * DAY
    assert first_visit(policy, T0, T0 - 3.0, Prior(lastmod=T0 - DAY))[1] - T0 == pytest.approx(3.0)
    assert first_visit(policy, T0, None, Prior(lastmod=T0 - DAY))[1] - T0 == pytest.approx(DAY)
    assert first_visit(policy, T0, T0 - DAY, Prior(every=600.0))[1] - T0 == pytest.approx(600.0)
    k2 = RefreshPolicy(RefreshConfig(k=0.5))
    assert first_visit(k2, T0, T0 - 10 * 3600.0)[1] - T0 == pytest.approx(5 * 3600.0)


def test_the_prior_kept_at_the_first_visit_does_not_drift_with_time() -> None:
    # The age is read at the first visit: later decisions (scans, the SLO) see the same prior.
    policy = RefreshPolicy(CFG)
    h, _ = first_visit(policy, T0, T0 - 60.0)
    assert policy.interval("h", h, None, T0 + 10 * DAY) == pytest.approx(60.0)


@pytest.mark.parametrize(("header", "expected"), [
    ("Sun, 06 Nov 1994 08:49:37 GMT", 784111777.0),
    ("Sunday, 06-Nov-94 08:49:37 GMT", 784111777.0),
    ("garbage", None), ("", None), (None, None), ("Sun, 06 Nov 1994 08:49:37", None),
])
def test_http_date(header: str | None, expected: float | None) -> None:
    assert parse_http_date(header) == expected


def dated_visits(rate: float, every: float, n: int, rng: random.Random) -> History:
    """A Poisson page visited every ``every`` seconds, its responses dated with its last change."""
    h = observe(History(), 1.0, True)
    t, change, last = 1.0, 1.0 + rng.expovariate(rate), 1.0
    for _ in range(n):
        t += every
        changed = change <= t
        while change <= t:
            last, change = change, change + rng.expovariate(rate)
        h = observe(h, t, changed, last if changed else None)
    return h


@pytest.mark.parametrize("every", [1.0 / 3, 1.0, 5.0], ids=["visits_faster", "same", "changes_faster"])
def test_last_modified_estimator_is_nearly_unbiased_where_the_one_bit_one_saturates(every: float) -> None:
    # Changes 5x faster than the visits: nearly every interval changed, where the one-bit estimate is
    # stuck near ln(2n + 1) / I; the dated changes still tell the rate.
    rng = random.Random(37)
    rate = 1.0 / 3600.0
    ests = [estimate_rate(dated_visits(rate, every / rate, 60, rng)) for _ in range(300)]
    assert statistics.fmean(ests) == pytest.approx(rate, rel=0.10)
    assert statistics.median([abs(e / rate - 1) for e in ests]) < 0.20


def test_an_undated_change_falls_back_to_the_one_bit_estimate() -> None:
    h = observe(History(), 1.0, True)
    h = observe(h, 101.0, True, 91.0)
    assert estimate_rate(h) == pytest.approx(1 / 10.0)
    h = observe(h, 201.0, True, 50.0)  # dated before the previous visit: the server's dates lie
    assert (h.lm_x, h.lm_miss) == (1, 1)
    assert estimate_rate(h) == pytest.approx(math.log(5) / 100.0)


@given(prior_every=st.floats(1.0, 1e7), gaps=st.lists(st.tuples(st.floats(1.0, 1e6), st.booleans()),
                                                        min_size=1, max_size=8),
       min_visits=st.integers(1, 6))
def test_property_the_prior_fades_linearly_into_the_estimate(prior_every: float,
                                                              gaps: list[tuple[float, bool]],
                                                              min_visits: int) -> None:
    policy = RefreshPolicy(RefreshConfig(min_visits=min_visits))
    hexed, _ = policy.after_visit("h", "", T0, True, 0.0, Prior(every=prior_every))
    h = History.from_hex(hexed)
    prior = h.prior_rate
    assert policy.rate(h, None, T0) == pytest.approx(prior)
    t = T0
    for gap, changed in gaps:
        t += gap
        h = observe(h, t, changed)
        own = max(estimate_rate(h), 0.5 / h.observed)
        believed = policy.rate(h, None, t)
        assert min(prior, own) * (1 - 1e-9) <= believed <= max(prior, own) * (1 + 1e-9)
        w = max(0.0, 1.0 - h.n / min_visits)
        assert believed == pytest.approx(w * prior + (1 - w) * own)
        if h.n >= min_visits:
            assert believed == own


@given(pattern=st.lists(st.tuples(st.floats(1.0, 1e7), st.booleans(), st.floats(0.0, 1.0)), max_size=20),
       prior_rate=st.floats(0.0, 1.0))
def test_property_histories_round_trip_and_those_of_0_2_read_without_the_tail(
        pattern: list[tuple[float, bool, float]], prior_rate: float) -> None:
    h = History(prior_rate=prior_rate)
    t = 1.0
    h = observe(h, t, True)
    for gap, changed, where in pattern:
        h = observe(h, t + gap, changed, t + gap * where)
        t += gap
    assert History.decode(h.encode()) == h
    old = h.encode()[: _HEAD.size + len(h.bins) * 13]  # 0.2 wrote the head and the bins only
    assert History.decode(old) == History(h.n, h.x, h.observed, h.unchanged, h.bins, h.shortest, h.longest,
                                          h.last_change, h.last_visit)


def test_a_history_of_0_2_takes_its_prior_from_the_stored_hint_as_before() -> None:
    policy = RefreshPolicy(CFG)
    h = observe(History(), T0, True)  # prior_rate -1: none kept
    assert policy.interval("h", h, Prior(changefreq="hourly"), T0) == 3600.0
    assert policy.interval("h", h, None, T0) == CFG.default_interval


@given(every=st.none() | st.floats(1.0, 1e9))
def test_property_feed_priors_round_trip_and_those_of_0_2_read(every: float | None) -> None:
    prior = Prior(T0, "daily", 0.3, every)
    assert Prior.decode(prior.encode()) == prior
    assert Prior.decode(prior.encode()[: _PRIOR.size]) == Prior(T0, "daily", 0.3)
    assert prior_interval(CFG, Prior(every=every), T0) == (
        CFG.default_interval if every is None else min(CFG.max_interval, max(CFG.min_interval, every)))


def test_histories_of_the_0_2_0_fixture_read_and_keep_their_schedule() -> None:
    # The tail is an addition: a 0.2.0 data dir needs no rewrite. Its histories read with no dated
    # changes and no prior, their due times stand, and a visit adds the tail without inventing a prior.
    import lmdb

    from polecat.frontier.records import UrlRecord
    from tests.release_fixtures import RELEASES

    policy = RefreshPolicy(RefreshConfig())
    seen = 0
    for frontier in sorted((RELEASES / "0.2.0" / "data" / "workers").glob("*/frontier")):
        env = lmdb.open(str(frontier), readonly=True, lock=False, max_dbs=20)
        try:
            with env.begin() as txn:
                for _, raw in txn.cursor(env.open_db(b"urls", txn=txn)):
                    rec = UrlRecord.decode(raw)
                    if not rec.history:
                        continue
                    h = History.from_hex(rec.history)
                    assert (h.lm_x, h.lm_miss, h.prior_rate) == (0, 0, -1.0)
                    assert rec.due == pytest.approx(h.last_visit + RefreshConfig().default_interval)
                    assert policy.interval("h", h, None, h.last_visit) == RefreshConfig().default_interval
                    hexed, _ = policy.after_visit("h", rec.history, h.last_visit + DAY, False, 0.0)
                    after = History.from_hex(hexed)
                    assert (after.n, after.prior_rate) == (h.n + 1, -1.0)
                    seen += 1
        finally:
            env.close()
    assert seen > 0
