"""The activity record behind the status page and host status (sans-IO, explicit times)."""

from __future__ import annotations

from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease
from polecat.service.activity import Activity, is_error

T0 = 1_800_000_000.0  # a minute and hour boundary


def done(status: int | None, outcome: str = "fetched", at: float = T0) -> Completion:
    return Completion(Attempt(at, at + 0.1, at + 0.05 if status else None, status), outcome,  # type: ignore[arg-type]
                      str(status) if status else "timeout")


def lease(host: str = "a.test") -> Lease:
    return Lease(host, f"http://{host}/p", "page")


def test_error_rule() -> None:
    assert not is_error(done(200)) and not is_error(done(304, "not_modified"))
    assert is_error(done(404)) and is_error(done(None, "retry")) and is_error(done(None, "failed"))


def test_rate_series_covers_the_last_hour_by_minute() -> None:
    a = Activity()
    for i in range(5):
        a.record(lease(), done(200, at=T0 + i), T0 + i)
    a.record(lease(), done(200, at=T0 + 125), T0 + 125)
    series = a.rate_series(T0 + 130)
    assert len(series) == 60 and series[-1] == (T0 + 120, 1) and series[-3] == (T0, 5)
    assert sum(n for _, n in a.rate_series(T0 + 3600 + 100)) == 1  # the first minute aged out
    assert sum(n for _, n in a.rate_series(T0 + 7200)) == 0


def test_host_window_is_24_hours_and_errors_rank_hosts() -> None:
    a = Activity(recent=2)
    a.record(lease("a.test"), done(200), T0)
    a.record(lease("a.test"), done(500, "retry", T0 + 10), T0 + 10)
    for i in range(3):
        a.record(lease("b.test"), done(None, "failed", T0 + 20 + i), T0 + 20 + i)
    h = a.host("a.test", T0 + 60)
    assert (h.fetched_24h, h.errors_24h, h.error_rate, h.last_fetch) == (2, 1, 0.5, T0 + 10)
    assert a.top_error_hosts(T0 + 60) == [("b.test", 3), ("a.test", 1)]
    assert [e.at for e in a.recent_errors()] == [T0 + 22, T0 + 21]  # newest first, bounded
    assert a.host("a.test", T0 + 25 * 3600).fetched_24h == 0
    assert a.host("nope.test", T0).last_fetch is None
