"""Politeness arithmetic (polecat/frontier/politeness.py), without the frontier around it."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from polecat.config import PolitenessConfig, RobotsConfig
from polecat.frontier.politeness import (
    Attempt,
    HostState,
    IpState,
    after_attempt,
    after_ip_attempt,
    gave_up,
    interval,
    quarantine_delay,
    robots_retry,
)

CFG = PolitenessConfig()


def test_interval_is_max_of_crawl_delay_and_rate() -> None:
    assert interval(CFG, 1.0, HostState()) == 1.0
    assert interval(CFG, 1.0, HostState(crawl_delay=5.0)) == 5.0
    assert interval(CFG, 4.0, HostState()) == 0.25
    assert interval(CFG, 4.0, HostState(rate_factor=0.5)) == 0.5
    assert interval(CFG, 1.0, HostState(crawl_delay=10_000.0)) == CFG.max_crawl_delay


def test_next_start_after_slow_response_is_its_end() -> None:
    st_ = HostState()
    after_attempt(CFG, 1.0, st_, Attempt(10.0, 14.0, 10.2, 200), random.Random(0))
    assert st_.next_allowed == 14.0


def test_retry_after_and_aimd_floor_and_recovery() -> None:
    st_ = HostState()
    for _ in range(20):
        after_attempt(CFG, 1.0, st_, Attempt(0.0, 1.0, 0.5, 429, retry_after=30.0), random.Random(0))
    assert st_.rate_factor == CFG.min_rate_factor
    assert st_.next_allowed >= 31.0
    before = st_.rate_factor
    after_attempt(CFG, 1.0, st_, Attempt(100.0, 100.1, 100.05, 200), random.Random(0))
    assert st_.rate_factor == before + CFG.recover_step


def test_quarantine_doubles_to_cap() -> None:
    rng = random.Random(0)
    delays = [quarantine_delay(CFG, n, rng) for n in range(1, 12)]
    for n, d in enumerate(delays, start=1):
        base = min(CFG.quarantine_cap, CFG.quarantine_base * 2 ** (n - 1))
        assert base <= d < 1.5 * base


@given(
    rate=st.floats(0.01, 100), delay=st.floats(0, 100), start=st.floats(0, 1e6),
    header_lag=st.floats(0, 10), tail=st.floats(0, 10), status=st.sampled_from([200, 404, 429, 503, 500]),
    retry_after=st.none() | st.floats(0, 1000), factor=st.floats(1 / 64, 1.0),
)
def test_property_next_allowed_respects_rule_2(rate: float, delay: float, start: float, header_lag: float,
                                               tail: float, status: int, retry_after: float | None,
                                               factor: float) -> None:
    st_ = HostState(crawl_delay=delay, rate_factor=factor)
    headers_at = start + header_lag
    a = Attempt(start, headers_at + tail, headers_at, status, retry_after)
    after_attempt(CFG, rate, st_, a, random.Random(0))
    assert st_.next_allowed >= a.ended
    assert st_.next_allowed >= headers_at + interval(CFG, rate, st_) - 1e-6
    if status in (429, 503) and retry_after is not None:
        assert st_.next_allowed >= a.ended + min(retry_after, CFG.max_retry_after) - 1e-6


@given(rate=st.floats(0.01, 100), delay=st.floats(0, 100), start=st.floats(0, 1e6), took=st.floats(0, 60),
       failures=st.integers(0, 10))
def test_property_failed_attempt_waits_quarantine_and_interval(rate: float, delay: float, start: float,
                                                               took: float, failures: int) -> None:
    st_ = HostState(crawl_delay=delay, failures=failures)
    a = Attempt(start, start + took, None, failed=True)
    after_attempt(CFG, rate, st_, a, random.Random(0))
    assert st_.failures == failures + 1
    assert st_.next_allowed >= a.ended + interval(CFG, rate, st_) - 1e-6
    assert st_.next_allowed >= a.ended + min(CFG.quarantine_cap, CFG.quarantine_base * 2 ** failures) - 1e-6
    assert st_.parked == (st_.failures >= CFG.park_after_failures)


# --- rule 6: a bounded run gives up a host --------------------------------------------------------------

RUN = PolitenessConfig(give_up_after=3, give_up_backoff=5.0)


def test_run_gives_up_after_strikes_within_a_minute_node_keeps_trying() -> None:
    rng = random.Random(0)
    run, node = HostState(), HostState()
    t = 0.0
    for _ in range(3):
        after_attempt(RUN, 1.0, run, Attempt(t, t + 0.01, None, failed=True), rng)
        after_attempt(CFG, 1.0, node, Attempt(t, t + 0.01, None, failed=True), rng)
        t = run.next_allowed
    assert run.parked and run.strikes == 3 and gave_up(RUN, run)
    assert t < 60.0  # the third attempt and its give-up come within the minute
    assert not node.parked and node.next_allowed > 120.0  # quarantine: 30 s doubling


def test_robots_closing_answers_are_strikes_usable_answers_clear_them() -> None:
    rng = random.Random(0)
    st_ = HostState()
    after_attempt(RUN, 1.0, st_, Attempt(0.0, 0.1, 0.05, 503, unusable=True), rng)
    after_attempt(RUN, 1.0, st_, Attempt(5.0, 5.1, None, failed=True), rng)
    assert st_.strikes == 2 and not st_.parked
    after_attempt(RUN, 1.0, st_, Attempt(30.0, 30.1, 30.05, 200), rng)
    assert st_.strikes == 0
    for t in (40.0, 50.0, 60.0):
        after_attempt(RUN, 1.0, st_, Attempt(t, t + 0.1, t + 0.05, 503, unusable=True), rng)
    assert st_.parked
    node = HostState()
    for t in (0.0, 10.0, 20.0, 30.0, 40.0, 50.0):
        after_attempt(CFG, 1.0, node, Attempt(t, t + 0.1, t + 0.05, 503, unusable=True), rng)
    assert not node.parked


def test_robots_retry_follows_the_give_up_backoff_only_in_runs() -> None:
    robots = RobotsConfig()
    assert robots_retry(CFG, robots) is robots
    assert robots_retry(RUN, robots).retry_base == RUN.give_up_backoff


def test_a_resumed_run_backs_off_from_its_own_strikes() -> None:
    """A host that failed in earlier runs (failures persist) is retried on this run's short backoff."""
    st_ = HostState(failures=9)
    after_attempt(RUN, 1.0, st_, Attempt(0.0, 0.1, None, failed=True), random.Random(0))
    assert st_.next_allowed <= 0.1 + RUN.give_up_backoff * 1.5


def test_robots_retry_cap_is_a_minute_at_most_never_under_the_backoff() -> None:
    assert robots_retry(RUN, RobotsConfig(retry_cap=3600.0)).retry_cap == 60.0
    assert robots_retry(RUN, RobotsConfig(retry_cap=10.0)).retry_cap == 10.0
    slow = PolitenessConfig(give_up_after=3, give_up_backoff=90.0)
    assert robots_retry(slow, RobotsConfig(retry_cap=3600.0)).retry_cap == 90.0
    assert robots_retry(slow, RobotsConfig(retry_cap=3600.0)).retry_base == 90.0


# --- rule 4: Retry-After at its edges --------------------------------------------------------------------

def _after_retry(retry_after: float, status: int = 503) -> float:
    st_ = HostState()
    after_attempt(CFG, 1.0, st_, Attempt(10.0, 10.5, 10.2, status, retry_after=retry_after), random.Random(0))
    return st_.next_allowed


def test_retry_after_zero_or_negative_waits_the_cut_interval_no_less_no_more() -> None:
    cut = interval(CFG, 1.0, HostState(rate_factor=CFG.backoff_factor))
    assert _after_retry(0.0) == 10.2 + cut
    assert _after_retry(-30.0) == 10.2 + cut  # a negative wait is no wait, never an earlier start


def test_retry_after_beyond_the_cap_waits_the_cap() -> None:
    assert _after_retry(CFG.max_retry_after * 10) == 10.5 + CFG.max_retry_after
    assert _after_retry(CFG.max_retry_after / 2) == 10.5 + CFG.max_retry_after / 2


def test_retry_after_on_a_status_that_is_not_a_backoff_is_ignored() -> None:
    assert _after_retry(600.0, status=200) == 10.2 + interval(CFG, 1.0, HostState())


# --- per-IP keys (rules 1 and 2 applied to an address) ---------------------------------------------------

@given(before=st.floats(0, 2e6), start=st.floats(0, 1e6), header_lag=st.none() | st.floats(0, 10),
       tail=st.floats(0, 10), host_interval=st.floats(0, 100))
def test_property_ip_spacing_is_rule_2_with_the_hosts_interval(before: float, start: float,
                                                                header_lag: float | None, tail: float,
                                                                host_interval: float) -> None:
    """The address waits from the headers' arrival (the attempt's end when none came), never less than
    the attempt's end, and never moves earlier than a time another host's request already set."""
    headers_at = None if header_lag is None else start + header_lag
    ended = (headers_at if headers_at is not None else start) + tail
    state = IpState(next_allowed=before)
    after_ip_attempt(state, host_interval, Attempt(start, ended, headers_at, 200 if headers_at else None))
    anchor = headers_at if headers_at is not None else ended
    assert state.next_allowed == max(before, anchor + host_interval, ended)


def test_ip_spacing_examples() -> None:
    state = IpState()
    after_ip_attempt(state, 2.0, Attempt(10.0, 10.5, 10.1, 200))
    assert state.next_allowed == 12.1  # from the headers, not the start
    after_ip_attempt(state, 0.5, Attempt(11.0, 11.2, 11.1, 200))
    assert state.next_allowed == 12.1  # a shorter interval of another host does not bring it forward
    after_ip_attempt(state, 0.5, Attempt(20.0, 30.0, 20.1, 200))
    assert state.next_allowed == 30.0  # a slow body: the end
    after_ip_attempt(state, 1.0, Attempt(40.0, 41.0, None))
    assert state.next_allowed == 42.0  # no answer: from the end
