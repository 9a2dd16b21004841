"""Sans-IO frontier tests: real LMDB on a temp dir, a fake clock, no sockets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polecat.config import Config, ScopeConfig
from polecat.frontier.keys import robots_key
from polecat.frontier.records import Idle, Lease, Refused, RobotsOutcome, Wait
from polecat.frontier.slices import SLICES
from polecat.writes import Delete, Put
from tests.frontier_helpers import Rig, canon, done, politeness

pytestmark = pytest.mark.usefixtures("frontier_backend")  # each test on LMDB and on the in-memory fake


def lease_or_fail(rig: Rig, now: float) -> Lease:
    got = rig.frontier.lease(now)
    assert isinstance(got, Lease), got
    return got


def open_host(rig: Rig, url: str, now: float, robots: bytes = b"") -> float:
    """Seed ``url`` and answer its host's robots.txt; returns the time after that request."""
    rig.frontier.add_seed(canon(url), now)
    lease = lease_or_fail(rig, now)
    assert lease.kind == "robots" and lease.url.endswith("/robots.txt")
    rig.complete_robots(lease, now, body=robots)
    return now + 0.01


def test_robots_first_then_pages_spaced_by_interval(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    t = open_host(rig, "http://a.test/", 1000.0)
    rig.frontier.add(canon("http://a.test/x"), 1, 0.5, t)
    # The robots request counts: the first page waits one interval after it.
    got = rig.frontier.lease(t)
    assert isinstance(got, Wait) and got.until is not None and got.until >= 1000.005 + 1.0
    first = lease_or_fail(rig, got.until)
    assert first.url == "http://a.test/"
    # One in flight per host: nothing else while it runs.
    assert isinstance(rig.frontier.lease(got.until + 5), Wait)
    rig.complete(first, got.until, duration=0.2)
    second_at = rig.frontier.lease(got.until + 0.2)
    assert isinstance(second_at, Wait) and second_at.until is not None
    # Anchor is when headers arrived (start + duration/2).
    assert abs(second_at.until - (got.until + 0.1 + 1.0)) < 1e-9


def test_next_due_is_never_after_the_next_lease(tmp_path: Path) -> None:
    """The node sleeps until ``next_due``: it may be early (a host rescheduled since), never late."""
    rig = Rig(tmp_path)
    assert rig.frontier.next_due() is None
    t = open_host(rig, "http://a.test/", 1000.0)
    rig.frontier.add(canon("http://a.test/x"), 1, 0.5, t)
    got = rig.frontier.lease(t)
    assert isinstance(got, Wait) and got.until is not None
    due = rig.frontier.next_due()
    assert due is not None and due <= got.until
    lease = lease_or_fail(rig, got.until)
    assert rig.frontier.next_due() is None  # the one host is in flight: nothing is scheduled
    rig.complete(lease, got.until, duration=0.2)
    after = rig.frontier.lease(got.until + 0.2)
    assert isinstance(after, Wait) and after.until is not None
    due = rig.frontier.next_due()
    assert due is not None and due <= after.until


def test_priority_within_host_and_depth_tie_break(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1000.0)))
    t = open_host(rig, "http://a.test/", 0.0)
    lease = lease_or_fail(rig, t + 1)
    rig.complete(lease, t + 1)
    rig.frontier.add(canon("http://a.test/low"), 1, 0.01, t)
    rig.frontier.add(canon("http://a.test/high"), 3, 0.5, t)
    rig.frontier.add(canon("http://a.test/high-shallow"), 1, 0.5, t)
    order = []
    now = t + 2
    for _ in range(3):
        lease = lease_or_fail(rig, now)
        order.append(lease.url.rsplit("/", 1)[1])
        rig.complete(lease, now)
        now += 1
    assert order == ["high-shallow", "high", "low"]


def test_earliest_ready_host_first_and_idle_at_end(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    for h in ("a", "b"):
        rig.frontier.add_seed(canon(f"http://{h}.test/"), 0.0)
    leases = [lease_or_fail(rig, 0.0), lease_or_fail(rig, 0.0)]
    assert {lease.host for lease in leases} == {"a.test", "b.test"}
    rig.complete_robots(leases[1], 0.0)
    rig.complete_robots(leases[0], 0.5)
    nxt = lease_or_fail(rig, 5.0)
    assert nxt.host == leases[1].host  # its next-allowed time came first
    rig.complete(nxt, 5.0)
    last = lease_or_fail(rig, 5.0)
    rig.complete(last, 5.0)
    assert isinstance(rig.frontier.lease(100.0), Idle)


def test_robots_disallowed_urls_are_recorded_skipped(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    t = open_host(rig, "http://a.test/", 0.0, robots=b"User-agent: *\nDisallow: /private/\n")
    rig.frontier.add(canon("http://a.test/private/x"), 1, 2.0, t)  # higher priority, but disallowed
    lease = lease_or_fail(rig, 10.0)
    assert lease.url == "http://a.test/"
    rec = rig.frontier.url_record("http://a.test/private/x")
    assert rec is not None and rec.outcome == "skipped" and rec.reason == "robots"


def test_crawl_delay_spaces_requests(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    t = open_host(rig, "http://a.test/", 0.0, robots=b"User-agent: *\nCrawl-delay: 7\n")
    got = rig.frontier.lease(t)
    assert isinstance(got, Wait) and got.until is not None and got.until >= 0.005 + 7


def test_robots_unreachable_closes_host(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.frontier.add_seed(canon("http://a.test/"), 0.0)
    lease = lease_or_fail(rig, 0.0)
    rig.complete_robots(lease, 0.0, status=500)
    got = rig.frontier.lease(5.0)
    assert isinstance(got, Wait) and got.until is not None and got.until >= 0.75 * rig.cfg.robots.retry_base
    again = lease_or_fail(rig, got.until)
    assert again.kind == "robots"  # after the backoff, robots is retried before any page


def test_retry_after_and_aimd(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    t = open_host(rig, "http://a.test/", 0.0)
    rig.frontier.add(canon("http://a.test/b"), 1, 0.5, t)
    lease = lease_or_fail(rig, 2.0)
    rig.complete(lease, 2.0, "retry", status=429, retry_after=120.0)
    st = rig.frontier.host_state("a.test")
    assert st is not None and st.rate_factor == 0.5
    got = rig.frontier.lease(3.0)
    assert isinstance(got, Wait) and got.until is not None and got.until >= 2.01 + 120.0
    lease = lease_or_fail(rig, got.until)
    rig.complete(lease, got.until)
    assert st.rate_factor > 0.5  # additive recovery after a success


def test_quarantine_backoff_then_park_and_url_failure(tmp_path: Path) -> None:
    cfg = Config(scope=ScopeConfig(mode="any"),
                 politeness=politeness(park_after_failures=3, max_url_attempts=5))
    rig = Rig(tmp_path, cfg=cfg)
    now = open_host(rig, "http://a.test/", 0.0)
    waits = []
    for _ in range(3):
        got = rig.frontier.lease(now)
        if isinstance(got, Wait):
            assert got.until is not None
            now = got.until
            got = rig.frontier.lease(now)
        assert isinstance(got, Lease)
        rig.complete(got, now, "retry", failed=True, duration=1.0)
        st = rig.frontier.host_state("a.test")
        assert st is not None
        waits.append(st.next_allowed - (now + 1.0))
        now += 1.0
    assert 30 <= waits[0] < 45 and 60 <= waits[1] < 90  # 30 s doubling, jitter in [1, 1.5)
    assert isinstance(rig.frontier.lease(now + 10_000), Idle)  # parked: nothing more this run
    st = rig.frontier.stats(now)
    assert st.hosts_parked == 1


def test_url_failing_n_times_is_recorded_done(tmp_path: Path) -> None:
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(max_url_attempts=2))
    rig = Rig(tmp_path, cfg=cfg)
    now = open_host(rig, "http://a.test/", 0.0)
    for _ in range(2):
        got = rig.frontier.lease(now + 100)
        assert isinstance(got, Lease)
        rig.complete(got, now + 100, "retry", status=500)
        now += 200
    rec = rig.frontier.url_record("http://a.test/")
    assert rec is not None and rec.outcome == "failed" and rec.reason == "500"
    assert rig.frontier.queued == 0


def test_block_drops_queue_and_refuses(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    now = open_host(rig, "http://a.b.test/", 0.0)
    for i in range(5):
        rig.frontier.add(canon(f"http://a.b.test/{i}"), 1, 0.1, now)
    assert rig.frontier.block("*.b.test") == 6
    assert rig.frontier.add(canon("http://c.b.test/"), 1, 0.1, now) == "blocked"
    assert isinstance(rig.frontier.lease(now + 100), Idle)
    rec = rig.frontier.url_record("http://a.b.test/3")
    assert rec is not None and rec.reason == "blocked"


def test_throttle_override_sets_interval(tmp_path: Path) -> None:
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(throttle=(("*.slow.test", 0.1),)))
    rig = Rig(tmp_path, cfg=cfg)
    t = open_host(rig, "http://x.slow.test/", 0.0)
    got = rig.frontier.lease(t)
    assert isinstance(got, Wait) and got.until is not None and got.until >= 10.0


def test_config_controls_apply_when_new_and_an_operators_change_survives_restarts(tmp_path: Path) -> None:
    """Controls module rules: the file's throttles and blocks apply at the first start; an operator who
    lifts them through the API keeps them lifted across restarts while the file says the same; a new rate
    or a pattern named again applies again."""
    def config(throttle: tuple[tuple[str, float], ...], block: tuple[str, ...]) -> Config:
        return Config(scope=ScopeConfig(mode="any", block=block), politeness=politeness(throttle=throttle))

    rig = Rig(tmp_path, cfg=config((("*.slow.test", 0.5),), ("bad.test",)))
    assert rig.frontier.throttles() == [("*.slow.test", 0.5)] and rig.frontier.blocks() == ["bad.test"]
    assert rig.frontier.unthrottle("*.slow.test") and rig.frontier.unblock("bad.test")
    rig.db.commit()
    rig.crash()
    rig.reopen(10.0)
    assert rig.frontier.throttles() == [] and rig.frontier.blocks() == []  # the operator's word stands
    rig.cfg = config((("*.slow.test", 0.25),), ("bad.test",))
    rig.db.commit()
    rig.crash()
    rig.reopen(20.0)
    assert rig.frontier.throttles() == [("*.slow.test", 0.25)]  # a new rate in the file applies
    assert rig.frontier.blocks() == []
    rig.cfg = config((("*.slow.test", 0.25),), ())  # the block leaves the file...
    rig.db.commit()
    rig.crash()
    rig.reopen(30.0)
    rig.cfg = config((("*.slow.test", 0.25),), ("bad.test",))  # ...and comes back: it applies again
    rig.db.commit()
    rig.crash()
    rig.reopen(40.0)
    assert rig.frontier.blocks() == ["bad.test"]


def test_data_written_before_the_config_records_applies_the_config_once(tmp_path: Path) -> None:
    """A frontier from before the ``config-*`` records holds the controls but no record of the file: the
    file applies once more (as every start did then), and is recorded from then on."""
    cfg = Config(scope=ScopeConfig(mode="any", block=("bad.test",)), politeness=politeness(
        throttle=(("*.slow.test", 0.5),)))
    rig = Rig(tmp_path, cfg=cfg)
    rig.db.apply([Delete("ops", key) for key, _ in rig.db.items("ops") if b"config-" in key])
    rig.db.apply(rig.raw.unthrottle("*.slow.test").writes)  # lifted by an operator before the upgrade
    rig.db.commit()
    rig.crash()
    rig.reopen(10.0)
    assert rig.frontier.throttles() == [("*.slow.test", 0.5)] and rig.frontier.blocks() == ["bad.test"]
    assert rig.frontier.unthrottle("*.slow.test")
    rig.db.commit()
    rig.crash()
    rig.reopen(20.0)
    assert rig.frontier.throttles() == []


def test_scope_and_budgets(tmp_path: Path) -> None:
    cfg = Config(scope=ScopeConfig(mode="host", max_depth=2, max_url_length=40, max_queue_per_host=3,
                                   deny=(r"/nope",)))
    rig = Rig(tmp_path, cfg=cfg)
    f = rig.frontier
    f.add_seed(canon("http://a.test/"), 0.0)
    assert f.add(canon("http://other.test/"), 1, 0.1, 0.0) == "out_of_scope"
    assert f.add(canon("http://a.test/deep"), 3, 0.1, 0.0) == "too_deep"
    assert f.add(canon("http://a.test/" + "x" * 40), 1, 0.1, 0.0) == "url_too_long"
    assert f.add(canon("http://a.test/nope"), 1, 0.1, 0.0) == "denied"
    assert f.add(canon("http://a.test/1"), 1, 0.1, 0.0) == "accepted"
    assert f.add(canon("http://a.test/1"), 1, 0.1, 0.0) == "seen"
    assert f.add(canon("http://a.test/2"), 1, 0.1, 0.0) == "accepted"
    assert f.add(canon("http://a.test/3"), 1, 0.1, 0.0) == "host_queue_full"


def test_restart_keeps_queue_next_allowed_and_replays_in_flight(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    now = open_host(rig, "http://a.test/", 0.0)
    rig.frontier.add(canon("http://a.test/next"), 1, 0.1, now)
    rig.frontier.commit()
    lease = lease_or_fail(rig, 5.0)
    rig.complete(lease, 5.0)  # completed but never committed
    rig.frontier.add(canon("http://a.test/uncommitted"), 1, 0.1, 5.0)
    rig.crash()
    rig.reopen()
    assert rig.frontier.queued == 2  # the in-flight one is replayed; the uncommitted add is gone
    first = rig.frontier.lease(1.0)
    # next-allowed survived the restart: the robots request at t=0 still spaces the first page
    assert isinstance(first, Wait) and first.until is not None and first.until >= 1.005
    rig.frontier.commit()
    st = rig.frontier.host_state("a.test")
    assert st is not None
    persisted = st.next_allowed
    rig.db.close()
    rig.reopen()
    st2 = rig.frontier.host_state("a.test")
    assert st2 is not None and st2.next_allowed == persisted


def test_mega_host_does_not_starve_others(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=1000.0)))
    now = open_host(rig, "http://big.test/", 0.0)
    for i in range(20_000):
        rig.frontier.add(canon(f"http://big.test/p{i}"), 1, 0.5, now)
    rig.frontier.add_seed(canon("http://small.test/"), now)
    small = []
    for _ in range(6):
        now += 0.01
        lease = lease_or_fail(rig, now)
        if lease.host == "small.test":
            small.append(lease.kind)
        if lease.kind == "robots":
            rig.complete_robots(lease, now, duration=0.0001)
        else:
            rig.complete(lease, now, duration=0.0001)
    assert small == ["robots", "page"]  # small.test interleaves with the 20,000-URL host


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(
        st.tuples(st.sampled_from(["lease", "complete", "add", "tick"]), st.integers(0, 3),
                  st.floats(0.0, 3.0), st.sampled_from([200, 200, 200, 429, 503, 0])),
        min_size=5, max_size=120,
    ),
    ahead=st.sampled_from([0.0, 0.0, 0.7, 2.5]),
)
def test_property_no_two_starts_closer_than_interval(tmp_path_factory: object, events: list,  # type: ignore[type-arg]
                                                     ahead: float) -> None:
    """For any sequence of events: at most one lease per host at once, and starts never closer than the
    host's interval after the previous response's headers (rule 2); so too with leases taken ``ahead``
    (leasing.py rule 12), each started at its ``not_before`` if that is later than the call."""
    path = tmp_path_factory.mktemp("prop")  # type: ignore[attr-defined]
    rig = Rig(path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=2.0)))
    now = 0.0
    open_leases: dict[str, tuple[Lease, float]] = {}
    last_anchor: dict[str, tuple[float, float]] = {}  # host -> (headers_at + interval lower bound)
    counter = 0
    for kind, h, dt, status in events:
        host = f"h{h}.test"
        if kind == "add":
            counter += 1
            rig.frontier.add_seed(canon(f"http://{host}/p{counter}"), now)
        elif kind == "tick":
            now += dt
        elif kind == "lease":
            got = rig.frontier.lease(now, ahead=ahead)
            if isinstance(got, Lease):
                assert got.host not in open_leases
                assert got.not_before <= now + ahead
                now = max(now, got.not_before)  # held until then (polecat/node/leases.py rule 7)
                if got.host in last_anchor:
                    assert now >= last_anchor[got.host][0] - 1e-9
                open_leases[got.host] = (got, now)
        elif kind == "complete" and open_leases:
            lease, started = open_leases.pop(sorted(open_leases)[0])
            end = max(now, started) + 0.05
            failed = status == 0
            if lease.kind == "robots":
                rig.complete_robots(lease, started, duration=end - started)
            else:
                rig.complete(lease, started, "retry" if status != 200 else "fetched", status=status or 200,
                             duration=end - started, failed=failed)
            st_ = rig.frontier.host_state(lease.host)
            assert st_ is not None
            # the minimum spacing implied by the rules: headers_at + 1/rate (rate may only be lower)
            last_anchor[lease.host] = (started + (end - started) / 2 + 0.5 if not failed else end, end)
            now = end
    rig.db.close()


def test_restart_waits_one_interval_from_restart_time(tmp_path: Path) -> None:
    """A request may have been in flight, uncommitted, when the process died: no burst after restart."""
    rig = Rig(tmp_path)
    open_host(rig, "http://a.test/", 0.0)
    rig.frontier.commit()
    lease = lease_or_fail(rig, 50.0)  # in flight when the process dies
    assert lease.kind == "page"
    rig.crash()
    rig.reopen(now=50.2)
    got = rig.frontier.lease(50.2)
    assert isinstance(got, Wait) and got.until is not None and got.until >= 51.2


def test_key_by_ip_shares_one_budget_across_hosts(tmp_path: Path) -> None:
    cfg = Config(scope=ScopeConfig(mode="any"), politeness=politeness(key_by_ip=True, rate=1.0))
    rig = Rig(tmp_path, cfg=cfg)
    f = rig.frontier
    for h in ("a", "b"):
        f.add_seed(canon(f"http://{h}.test/"), 0.0)
    first, second = lease_or_fail(rig, 0.0), lease_or_fail(rig, 0.0)
    assert f.bind_ip(first, "10.0.0.1", 0.0)
    assert not f.bind_ip(second, "10.0.0.1", 0.0)  # same server: withdrawn while the IP is busy
    assert isinstance(f.lease(0.5), Wait)
    rig.complete_robots(first, 0.0, duration=0.2)
    # The waiting host may go only one interval after the IP's previous response headers.
    got = f.lease(0.5)
    assert isinstance(got, Wait) and got.until is not None and got.until >= 0.1 + 1.0
    again = lease_or_fail(rig, got.until)
    assert f.bind_ip(again, "10.0.0.1", got.until)
    # Whichever host went, the other is held back while the shared IP is busy.
    other = f.lease(got.until + 5)
    assert isinstance(other, Wait) or not f.bind_ip(other, "10.0.0.1", got.until + 5)
    assert isinstance(f.lease(got.until + 5), Wait)


def test_hold_and_release_an_extra_request(tmp_path: Path) -> None:
    """A robots.txt redirect hop borrows its target host under the same rules as a lease."""
    rig = Rig(tmp_path)
    f = rig.frontier
    now = open_host(rig, "http://a.test/", 0.0)
    page = lease_or_fail(rig, now + 1)  # a.test is busy with a page
    assert f.hold("a.test", now + 1) == now + 1 + 0.05
    rig.complete(page, now + 1, duration=0.1)
    retry_at = f.hold("a.test", now + 1.2)
    assert retry_at is not None and retry_at >= now + 1 + 0.05 + 1.0  # the interval after the page
    assert f.hold("a.test", retry_at) is None  # held: nothing else may go
    assert not isinstance(f.lease(retry_at + 10), Lease)
    f.release("a.test", done(retry_at, duration=0.2).attempt)
    assert f.next_allowed("a.test") >= retry_at + 0.1 + 1.0
    assert f.hold("b.test", 0.0) is None  # a host with nothing queued can be borrowed too
    f.release("b.test", done(0.0).attempt)
    assert f.hold("b.test", 0.5) == f.next_allowed("b.test")


def test_a_hop_that_borrows_a_scheduled_host_pushes_back_its_next_lease(tmp_path: Path) -> None:
    """Politeness rule 8: a robots.txt hop to a host already waiting in the ready heap spaces its next
    request like any other request (the server saw a page 2.5 ms after such a hop)."""
    rig = Rig(tmp_path)
    f = rig.frontier
    now = open_host(rig, "http://a.test/", 0.0)
    f.add(canon("http://a.test/next"), 1, 0.5, now)
    ready = f.lease(now)
    assert isinstance(ready, Wait) and ready.until is not None  # a.test is scheduled for ready.until
    assert f.hold("a.test", ready.until) is None  # a hop from another host's robots.txt lands here
    f.release("a.test", done(ready.until, duration=0.01).attempt)
    after = f.lease(ready.until + 0.02)
    assert isinstance(after, Wait) and after.until is not None and after.until >= ready.until + 1.0
    assert lease_or_fail(rig, after.until).host == "a.test"


@pytest.mark.lmdb_only
def test_complete_returns_its_writes_and_writes_nothing_itself(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.frontier.add_seed(canon("http://a.test/"), 0.0)
    robots = lease_or_fail(rig, 0.0)
    answered = replace(done(0.0), robots=RobotsOutcome(200, b"User-agent: *\n"))
    got = rig.raw.complete(robots, answered, 0.01)
    assert len(got) == 1 and isinstance(got[0], Put) and got[0].key == robots_key("http://a.test")
    assert rig.frontier.robots_answer("http://a.test") is None  # not written until applied
    rig.db.apply(got)
    assert rig.frontier.robots_answer("http://a.test") is not None
    page = lease_or_fail(rig, 5.0)
    writes = rig.raw.complete(page, done(5.0), 5.01)
    # The URL moves to done, and its refresh rows follow its record (refresh_index.py rule 4).
    assert [type(w).__name__ + ":" + w.table for w in writes] == [
        "Delete:queue", "Put:urls", "Put:refresh", "Put:due", "Put:fresh"]
    assert rig.frontier.url_record(page.url) is None and rig.db.txn.get(page.key, db=rig.db.queue) is not None
    rig.db.apply(writes)
    rec = rig.frontier.url_record(page.url)
    assert rec is not None and rec.outcome == "fetched" and rig.db.txn.get(page.key, db=rig.db.queue) is None
    rig.frontier.commit()
    rig.crash()
    rig.reopen(10.0)
    assert rig.frontier.queued == 0 and rig.frontier.url_record(page.url) is not None


def test_robots_hops_are_frontier_decisions(tmp_path: Path) -> None:
    """Politeness rule 8 as decisions (polecat/frontier/hops.py): the node only runs Lease, Wait, Refused."""
    rig = Rig(tmp_path)
    f = rig.frontier
    f.add_seed(canon("http://a.test/"), 0.0)
    f.add_seed(canon("http://b.test/"), 0.0)
    robots_a = lease_or_fail(rig, 0.0)
    robots_b = lease_or_fail(rig, 0.0)
    assert {robots_a.host, robots_b.host} == {"a.test", "b.test"} and robots_a.kind == "robots"
    other = "b.test" if robots_a.host == "a.test" else "a.test"
    # Back to the leased host: wait for its interval after the first response.
    f.release(robots_a.host, done(0.0, duration=0.1).attempt)
    same = f.hop(robots_a, robots_a.host, "http://x/robots.txt", 0.2, 0.2)
    assert isinstance(same, Wait) and same.until == f.next_allowed(robots_a.host) > 0.2
    go = f.hop(robots_a, robots_a.host, "http://x/robots.txt", same.until, 0.2)
    assert isinstance(go, Lease) and go.host == robots_a.host
    # To a host busy with its own lease: ask again shortly, and give up past the bound.
    busy = f.hop(robots_a, other, "http://y/robots.txt", 1.5, 1.5)
    assert isinstance(busy, Wait) and busy.until is not None and 1.5 < busy.until < 2.0
    late = f.hop(robots_a, other, "http://y/robots.txt", 40.0, 1.5)
    assert isinstance(late, Refused) and other in late.reason
    # Once free and allowed, the hop holds it: nothing else goes there until it is given back.
    rig.complete_robots(robots_b, 2.0)
    free_at = f.next_allowed(other)
    held = f.hop(robots_a, other, "http://y/robots.txt", free_at, free_at)
    assert isinstance(held, Lease) and held.host == other
    got = f.lease(free_at + 5)
    assert not (isinstance(got, Lease) and got.host == other)


def test_a_released_request_frees_its_host_before_its_record(tmp_path: Path) -> None:
    """Leasing rule 7: the host's next request goes at its next-allowed time while the released URL waits
    for its record, is never leased again meanwhile, counts as in flight, and is recorded when completed."""
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=10.0)))
    now = open_host(rig, "http://a.test/", 0.0)
    for path in ("x", "y"):
        rig.frontier.add(canon(f"http://a.test/{path}"), 1, 0.1, now)
    first = lease_or_fail(rig, 1.0)
    rig.raw.release_request(first, done(1.0), 1.01)
    assert rig.frontier.in_flight_in(range(SLICES)) == 1
    wait = rig.frontier.lease(1.01)
    assert isinstance(wait, Wait) and wait.until is not None and wait.until >= 1.005 + 0.1  # politeness kept
    second = lease_or_fail(rig, wait.until)
    assert second.url != first.url
    rig.complete(second, wait.until)
    third = lease_or_fail(rig, wait.until + 1)
    assert third.url not in {first.url, second.url}
    rig.complete(third, wait.until + 1)
    # Only the released URL is left queued: nothing to lease, and a block leaves it to its completion.
    assert isinstance(rig.frontier.lease(wait.until + 2), Wait)
    assert rig.frontier.block("a.test") == 0
    assert rig.frontier.url_record(first.url) is None
    rig.db.apply(rig.raw.complete(first, done(1.0), wait.until + 3))
    rec = rig.frontier.url_record(first.url)
    assert rec is not None and rec.outcome == "fetched"
    assert rig.frontier.queued == 0 and rig.frontier.in_flight_in(range(SLICES)) == 0


def test_a_released_request_not_completed_is_replayed_after_a_crash(tmp_path: Path) -> None:
    """Leasing rule 7 keeps the frontier's invariant: the released URL's key stays queued until its
    completion, so a crash before it fetches it again."""
    rig = Rig(tmp_path)
    open_host(rig, "http://a.test/", 0.0)
    rig.frontier.commit()
    lease = lease_or_fail(rig, 5.0)
    rig.raw.release_request(lease, done(5.0), 5.01)
    rig.frontier.commit()
    assert isinstance(rig.frontier.lease(10.0), Wait)  # its one URL is released, not leased again
    rig.crash()
    rig.reopen(20.0)
    assert rig.frontier.queued == 1
    assert lease_or_fail(rig, 30.0).url == lease.url


def test_withdrawing_a_released_request_leaves_its_url_queued(tmp_path: Path) -> None:
    """A released lease whose node lost its host's slice while its record waited (lease_runner rule 7):
    the URL goes back to the queue, and the lease in flight of the same host is left alone."""
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=10.0)))
    now = open_host(rig, "http://a.test/", 0.0)
    rig.frontier.add(canon("http://a.test/x"), 1, 0.1, now)
    first = lease_or_fail(rig, 1.0)
    rig.raw.release_request(first, done(1.0), 1.01)
    second = lease_or_fail(rig, 2.0)
    rig.raw.withdraw(first, 2.01)
    assert isinstance(rig.frontier.lease(3.0), Wait)  # the second is still in flight
    rig.complete(second, 3.0)
    assert lease_or_fail(rig, 4.0).url == first.url


def test_a_lease_taken_ahead_is_of_a_host_due_within_it_and_goes_at_its_time(tmp_path: Path) -> None:
    """leasing.py rule 12: a host due within ``ahead`` seconds is leased, its ``not_before`` its time; one
    lease per host still."""
    rig = Rig(tmp_path)
    t = open_host(rig, "http://a.test/", 1000.0)
    rig.frontier.add(canon("http://a.test/x"), 1, 0.5, t)
    rig.frontier.add(canon("http://a.test/y"), 1, 0.5, t)
    got = rig.frontier.lease(t)
    assert isinstance(got, Wait) and got.until is not None and got.until > t + 0.5
    assert isinstance(rig.frontier.lease(t, ahead=got.until - t - 0.1), Wait)  # not due within it
    first = rig.frontier.lease(t, ahead=got.until - t + 0.1)
    assert isinstance(first, Lease) and first.kind == "page" and first.not_before == got.until
    assert isinstance(rig.frontier.lease(got.until + 5, ahead=10.0), Wait)  # its host is in flight


def lease_all(rig: Rig, now: float) -> list[str]:
    """Lease and complete (robots.txt answered empty, pages fetched) until the frontier is idle; the
    URLs leased."""
    leased = []
    while not isinstance(got := rig.frontier.lease(now), Idle):
        if isinstance(got, Wait):
            assert got.until is not None
            now = got.until
            continue
        leased.append(got.url)
        if got.kind == "robots":
            rig.complete_robots(got, now)
        else:
            rig.complete(got, now)
    return leased


def test_what_is_decided_after_a_commit_s_records_are_taken_goes_into_that_commit(tmp_path: Path) -> None:
    """host_table.py rule 28: a URL queued after prepare_commit (its host's count and the queue's
    sequence changed) and a host new to the table meanwhile (its record, its resident row) are written by
    late_writes into the same commit, so after a crash right after it every queued URL is counted and
    leased, and the queue's sequence goes on past the last URL's (a number given twice overwrites a row).
    Without them the commit held the rows, not the counts."""
    rig = Rig(tmp_path)
    t = open_host(rig, "http://a.test/", 0.0)
    rig.db.apply(rig.raw.prepare_commit())
    late = canon("http://a.test/late")
    rig.frontier.add(late, 1, 1.0, t)
    rig.frontier.add_seed(canon("http://b.test/"), t)
    rig.db.apply(rig.raw.late_writes())
    rig.db.commit()
    assert not [w for w in rig.raw.late_writes() if isinstance(w, Put) and w.table == "hosts"]  # none since
    qseq = rig.raw._table.qseq
    rig.crash()
    rig.reopen(100.0)
    table = rig.raw._table
    assert table.qseq == qseq and table.queued == 3
    assert table.hosts["a.test"].queued == 2 and table.hosts["b.test"].queued == 1
    assert sorted(lease_all(rig, 100.0)) == sorted(
        ["http://a.test/", late, "http://b.test/", "http://b.test/robots.txt"])


@pytest.mark.parametrize(("robots", "counted", "missed"), [(b"", 2, 2),
                                                       (b"User-agent: *\nDisallow: /private/\n", 1, 3)])
def test_a_host_counting_fewer_urls_than_its_queue_holds_is_counted_again_as_its_count_runs_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, robots: bytes, counted: int, missed: int) -> None:
    """host_table.py rule 27: a record that counts fewer URLs than its queue holds (what a kill -9 left
    before polecat/node/commits.py rule 16) has the rows its count missed counted back in at the commit
    after its count ran out, so every queued URL is leased, whether the URL that spent the count was
    fetched or skipped by robots.txt; before, the host was never leased again and the URLs left stayed
    queued."""
    rig = Rig(tmp_path)
    t = open_host(rig, "http://a.test/", 0.0, robots=robots)
    urls = [canon(f"http://a.test/p{i}") for i in range(3)]
    for url in urls:
        rig.frontier.add(url, 1, 1.0, t)
    if robots:  # read first by the next lease, and skipped: that spends the count of 1
        rig.frontier.add(canon("http://a.test/private/x"), 1, 10.0, t)
    table = rig.raw._table
    st = table.hosts["a.test"]
    table.count_queued("a.test", st, counted - st.queued)  # the record (and counters) miss rows
    fetched = lease_all(rig, 10.0)
    assert len(fetched) < len(urls) + 1  # its count spent, the others are not leased
    with caplog.at_level("WARNING", logger="polecat.frontier"):
        rig.raw.commit()
    fetched += lease_all(rig, 20.0)
    assert sorted(fetched) == sorted(["http://a.test/", *urls])
    assert st.queued == 0 and table.queued == 0 and not list(rig.db.items("queue"))
    assert f"its queue holds {missed}; counted again" in caplog.text
