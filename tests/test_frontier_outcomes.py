"""How a request's end becomes a completion (polecat/frontier/outcomes.py), without sockets."""

from __future__ import annotations

import pytest

from polecat.config import RobotsConfig
from polecat.errors import BlockedAddressError, ConnectError, DnsError, FetchError, TlsError
from polecat.frontier.outcomes import page_failed, robots_answered, robots_failed, sitemaps_named
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Lease
from polecat.frontier.robots import RobotsPolicy
from polecat.node import verdict


@pytest.mark.parametrize("exc, outcome, failed, parked", [
    (DnsError("a.test: NXDOMAIN"), "retry", True, False),
    (ConnectError("refused"), "retry", True, False),
    (TlsError("bad certificate"), "failed", False, False),
    (BlockedAddressError("a.test is a loopback address"), "failed", False, True),
])
def test_rule_1_a_page_failure_is_a_retry_a_failure_or_parks_the_host(
        exc: FetchError, outcome: str, failed: bool, parked: bool) -> None:
    c = page_failed(10.0, 11.0, exc)
    assert (c.outcome, c.attempt.failed, c.attempt.unusable) == (outcome, failed, False)
    assert (c.attempt.started, c.attempt.ended, c.attempt.headers_at) == (10.0, 11.0, None)
    assert c.reason == exc.kind and c.detail == f"{exc.kind}: {exc}"
    assert c.park == (c.detail if parked else "")


@pytest.mark.parametrize("exc", [DnsError("x"), TlsError("wrong version number")])
def test_rule_2_a_robots_failure_is_a_strike_whatever_the_error(exc: FetchError) -> None:
    c = robots_failed(10.0, 11.0, exc, None)
    assert c.attempt.unusable and c.robots is not None and c.robots.error is exc
    assert c.outcome == page_failed(10.0, 11.0, exc).outcome


def test_rule_2_a_failed_hop_to_another_host_keeps_the_leased_hosts_own_attempt() -> None:
    own = Attempt(5.0, 5.5, 5.2, status=301)
    c = robots_failed(10.0, 11.0, ConnectError("refused"), own)
    assert c.attempt == Attempt(5.0, 5.5, 5.2, status=301, unusable=True)
    assert (c.outcome, c.reason) == ("fetched", "robots:connect")
    assert c.robots is not None and isinstance(c.robots.error, ConnectError)


@pytest.mark.parametrize("status, unusable", [(200, False), (404, False), (301, False), (429, True),
                                              (503, True)])
def test_rule_3_a_robots_answer_that_is_no_answer_is_a_strike(status: int, unusable: bool) -> None:
    c = robots_answered(Attempt(1.0, 2.0, 1.5, status=status), status, b"", 30.0, "127.0.0.1")
    assert c.attempt.unusable is unusable and c.outcome == "fetched" and c.reason == str(status)
    assert c.robots is not None and (c.robots.status, c.robots.retry_after) == (status, 30.0)
    assert c.ip == "127.0.0.1"


def test_rule_4_a_2xx_robots_txt_in_force_names_its_sitemaps() -> None:
    policy = RobotsPolicy(RobotsConfig(), "polecat")
    lease = Lease("a.test", "http://a.test/robots.txt", "robots")
    body = b"User-agent: *\nDisallow:\nSitemap: http://a.test/s.xml\n"
    answered = robots_answered(Attempt(1.0, 2.0, 1.5, status=200), 200, body, None, None)
    assert sitemaps_named(policy, lease, answered, 3.0) is None  # not recorded yet: no rules in force
    policy.record_response("http://a.test", 200, body, 2.0)
    assert sitemaps_named(policy, lease, answered, 3.0) == ("http://a.test", ("http://a.test/s.xml",))
    missing = robots_answered(Attempt(1.0, 2.0, 1.5, status=404), 404, b"", None, None)
    assert sitemaps_named(policy, lease, missing, 3.0) is None
    page = Lease("a.test", "http://a.test/", "page")
    assert sitemaps_named(policy, page, answered, 3.0) is None


def test_an_idle_run_ends_on_its_budget_on_hosts_given_up_or_on_an_empty_queue() -> None:
    assert verdict.idle_end(budget_full=True, queued=5) == verdict.MAX_PAGES
    assert verdict.idle_end(budget_full=False, queued=5) == verdict.GAVE_UP
    assert verdict.idle_end(budget_full=False, queued=0) == verdict.QUEUE_EMPTY
