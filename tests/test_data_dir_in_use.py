"""A second writer of a data dir a crawl is running on is refused at once, naming the process that holds
it, before it saves or opens anything (it used to wait, silently, behind the running crawl's frontier)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.test_cli import polecat


def _wait_for_lock(lock: Path, pid: int, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not (lock.exists() and lock.read_text().strip() == str(pid)):
        assert time.monotonic() < deadline, f"{lock} never named pid {pid}"
        time.sleep(0.05)


def test_a_second_crawl_of_a_running_crawls_dir_is_refused_naming_it(test_web: TestWebFactory,
                                                                    tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=60, seed=9))
    data = tmp_path / "d"
    first = subprocess.Popen(
        [sys.executable, "-m", "polecat", "crawl", *web.seeds, "--data", str(data), "--rate", "2",
         "--dns-server", web.dns_address, "--allow-private", "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_lock(data / "store" / "LOCK", first.pid)
        saved = (data / "settings.json").read_text()
        for command in (["crawl", "--data", str(data), "--rate", "5"], ["upgrade", str(data)]):
            second = polecat(*command, timeout=60)  # bounded: it used to wait as long as the first ran
            assert second.returncode == 1, second.stderr
            assert f"open for writing by another process (pid {first.pid})" in second.stderr, second.stderr
            assert f"kill -TERM {first.pid}" in second.stderr
        assert (data / "settings.json").read_text() == saved  # the running crawl's settings are kept
        assert json.loads(saved)["politeness"]["rate"] == 2.0
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    resumed = polecat("crawl", "--data", str(data), "--rate", "20", "-q")  # free again once it stopped
    assert resumed.returncode == 0, resumed.stderr
