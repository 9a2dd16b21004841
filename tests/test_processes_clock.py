"""The node's processes read one injected clock: a cluster machine's fencing and the ``polecat node``
service's ticker and activity, driven by a FakeClock (nothing here waits for time to pass)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from polecat.config import config_from_mapping
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease
from polecat.frontier.slices import SLICES
from polecat.node.stats import LAG_TICK
from polecat.processes import service_runner
from polecat.processes.machine import ClusterNode
from polecat.processes.service_runner import STATUS_EVERY, NodeService, _sample_lag, _tick
from polecat.service.metrics import LoopLag
from polecat.service.systemd import Notifier
from polecat.testing.fakes import FakeClock

SECRET = "a shared secret of the test cluster"


async def test_a_machine_fences_itself_when_its_clock_says_the_lease_is_half_gone(tmp_path: Path) -> None:
    """A checkpoint round ships only while the lease is fresh (failover rule 4): the machine asks the
    membership's ownership at its clock's ``monotonic()``, the clock the lease times were taken on."""
    cfg = config_from_mapping({"data_dir": str(tmp_path), "cluster": {
        "etcd": "http://127.0.0.1:1", "name": "t", "node_id": "a", "advertise": "http://127.0.0.1:2",
        "secret": SECRET, "lease_ttl": 10}})
    clock = FakeClock()
    node = ClusterNode(cfg, clock=clock)  # etcd is never called here
    own = node.membership.ownership
    try:
        own.lease_granted(clock.monotonic())
        own.view_changed(["a"], clock.monotonic())
        own.claimed(range(SLICES), ())
        assert node._shipped() == (frozenset(range(SLICES)), frozenset())
        clock.advance(own.ttl / 2 - 0.01)
        assert node._shipped() is not None
        clock.advance(0.01)
        assert node._shipped() is None  # fenced: no round
    finally:
        own.lease_lost()  # nothing held: closing releases no key in etcd
        await node.close()


class _Notifications(Notifier):
    def __init__(self) -> None:
        super().__init__(None)
        self.sent: list[tuple[str, ...]] = []
        self.arrived = asyncio.Event()

    def notify(self, *fields: str) -> None:
        self.sent.append(fields)
        self.arrived.set()

    async def next(self) -> tuple[str, ...]:
        self.arrived.clear()
        await self.arrived.wait()
        return self.sent[-1]


async def test_the_status_line_follows_the_services_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tick pings the watchdog; STATUS= comes once STATUS_EVERY has passed on the injected clock,
    however many ticks ran before."""
    monkeypatch.setattr(service_runner, "status_line", lambda crawler: "idle: test")
    clock, notes = FakeClock(), _Notifications()
    period = 0.001  # the watchdog's half-interval: the ticker's period (a real sleep, but short)
    ticker = asyncio.ensure_future(_tick(None, notes, period, clock))  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(30):  # a ticker that died fails the test instead of hanging it
            for _ in range(5):
                assert await notes.next() == ("WATCHDOG=1",)
            clock.advance(STATUS_EVERY)  # while the ticker sleeps
            assert await notes.next() == ("WATCHDOG=1", "STATUS=idle: test")
            assert await notes.next() == ("WATCHDOG=1",)
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)


class _Samples(LoopLag):
    """A LoopLag that says when it got a sample."""

    def __init__(self) -> None:
        super().__init__()
        self.got = asyncio.Event()

    def record(self, now: float, lag: float) -> None:
        super().record(now, lag)
        self.got.set()

    async def next(self) -> None:
        self.got.clear()
        await self.got.wait()


async def test_a_lag_sample_the_clock_saw_come_late_is_counted_as_lag_and_as_a_stall() -> None:
    clock, lag = FakeClock(), _Samples()
    sampler = asyncio.ensure_future(_sample_lag(lag, clock))
    try:
        async with asyncio.timeout(30):
            for _ in range(3):  # samples on time: no lag, no stall
                await lag.next()
            assert (lag.seconds, lag.stalls, lag.worst) == (0.0, 0, 0.0)
            clock.advance(0.3)  # while the sampler sleeps: the loop ran its timer 0.3 s late
            await lag.next()
            assert lag.stalls == 1 and lag.worst == lag.seconds == pytest.approx(0.3 - LAG_TICK)
            await lag.next()
            assert lag.stalls == 1  # the next one came on time
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)


async def test_the_service_counts_requests_in_the_minute_of_its_clock(tmp_path: Path) -> None:
    clock = FakeClock(wall=1_000_000.0)
    svc = NodeService(config_from_mapping({"data_dir": str(tmp_path)}), notifier=Notifier(None), clock=clock)
    now = clock.wall()
    svc._on_lease(Lease("a.test", "http://a.test/", "page"),
                  Completion(Attempt(now - 0.2, now - 0.1, now - 0.15, 200), "fetched"))
    assert svc.activity.rate_series(now)[-1] == (now // 60 * 60, 1)
