"""The watchdog is fed from the event loop: a stalled loop stops the pings (so systemd restarts the
node) and shows as event-loop lag in /metrics."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from polecat.processes.service_runner import NodeService
from polecat.service.systemd import Notifier, watchdog_interval
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config


class RecordingNotifier(Notifier):
    def __init__(self) -> None:
        super().__init__(None)
        self.sent: list[tuple[float, tuple[str, ...]]] = []

    def notify(self, *fields: str) -> None:
        self.sent.append((time.monotonic(), fields))


def test_watchdog_interval_from_the_environment() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "3000000"}) == 1.5
    assert watchdog_interval({}) is None and watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}) is None  # not for us


async def test_a_stalled_loop_misses_the_watchdog(test_web: TestWebFactory, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # ping every 0.2 s
    web = test_web(SiteSpec(hosts=1, pages_per_host=2))
    notifier = RecordingNotifier()
    svc = NodeService(crawl_config(web, tmp_path, node={"listen": "127.0.0.1:0"}), notifier=notifier)
    task = asyncio.ensure_future(svc.run(handle_signals=False))
    await asyncio.wait_for(svc.ready.wait(), 30)
    await asyncio.sleep(1.0)
    stalled = asyncio.get_running_loop().create_future()

    def stall() -> None:  # the loop stalls (a hostile page, a bug): nothing may ping for it
        time.sleep(1.5)
        stalled.set_result(time.monotonic())

    asyncio.get_running_loop().call_soon(stall)
    stall_end = await stalled
    await asyncio.sleep(0.6)
    body = await asyncio.to_thread(_scrape, svc.url + "/metrics")
    svc.stop()
    assert await asyncio.wait_for(task, 30) == 0
    pings = [t for t, fields in notifier.sent if "WATCHDOG=1" in fields]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) >= 1.5 and sum(g >= 1.5 for g in gaps) == 1, gaps
    assert all(0.1 <= g <= 0.9 for g in gaps if g < 1.5), gaps  # 0.2 s apart, on a busy machine
    assert any(t > stall_end for t in pings)
    assert notifier.sent[0][1][0] == "READY=1"
    assert "STOPPING=1" in notifier.sent[-1][1]
    samples = {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples}
    assert 1.0 <= samples["polecat_event_loop_lag_seconds"] < 5.0  # still visible after the stall


def _scrape(url: str) -> str:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as resp:
        return str(resp.read().decode())
