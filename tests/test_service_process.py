"""``polecat node`` as a real process: the systemd notify protocol (READY, WATCHDOG cadence, STOPPING,
clean exit with the frontier committed) and the CLI client commands against it."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests

TOKEN = "t0ken-for-the-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def polecat(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=60, check=check, env={**os.environ, "POLECAT_TOKEN": TOKEN})


def messages(sock: socket.socket, until: float) -> list[tuple[float, str]]:
    got = []
    while (left := until - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            got += [(time.monotonic(), line) for line in sock.recv(4096).decode().splitlines()]
        except TimeoutError:
            break
    return got


@pytest.mark.slow
def test_node_under_systemd_and_the_cli_client(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=2, pages_per_host=8))
    port = free_port()
    node_url = f"http://127.0.0.1:{port}"
    (tmp_path / "node.toml").write_text(f"""
data_dir = "{tmp_path / 'data'}"
[node]
listen = "127.0.0.1:{port}"
[politeness]
rate = 20.0
[fetch]
user_agent = "polecat-test/0.1 (+http://example.invalid/bot)"
[dns]
nameservers = ["{web.dns_address}"]
allow_private = true
""")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "1000000",
           "POLECAT_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "polecat", "node", "--config",
                             str(tmp_path / "node.toml")], env=env, stderr=subprocess.PIPE, text=True)
    try:
        first: list[tuple[float, str]] = []
        deadline = time.monotonic() + 30
        while not any(line == "READY=1" for _, line in first) and time.monotonic() < deadline:
            first += messages(notify, time.monotonic() + 1)
        assert any(line == "READY=1" for _, line in first), first
        assert any(line.startswith("STATUS=idle") for _, line in first)

        # The node is idle with no seeds; the client gives it work and controls.
        out = polecat("seeds", "add", web.seeds[0], "not-a-url", "--node", node_url).stdout
        assert f"queued   {web.seeds[0]}" in out and "refused  not-a-url" in out
        polecat("throttle", "set", "*.slow.test", "0.5", "--node", node_url)
        assert polecat("throttle", "ls", "--node", node_url).stdout == "*.slow.test = 0.5 req/s\n"
        polecat("block", "add", "bad.test", "--node", node_url)
        assert polecat("block", "ls", "--node", node_url).stdout == "bad.test\n"
        bad = polecat("throttle", "set", "x.test", "0", "--node", node_url, check=False)
        assert bad.returncode == 1 and "req_per_s: must be in" in bad.stderr
        unauth = subprocess.run([sys.executable, "-m", "polecat", "pause", "--node", node_url],
                                capture_output=True, text=True, timeout=60,
                                env={k: v for k, v in os.environ.items() if k != "POLECAT_TOKEN"})
        assert unauth.returncode == 1 and "401" in unauth.stderr
        assert json.loads(polecat("pause", "--node", node_url).stdout) == {"paused": True}
        assert json.loads(polecat("resume", "--node", node_url).stdout) == {"paused": False}

        backlog = messages(notify, time.monotonic() + 0.01)  # sent while the client ran
        pings = messages(notify, time.monotonic() + 3)
        beats = [t for t, line in pings if line == "WATCHDOG=1"]
        assert len(beats) >= 4, pings
        gaps = [b - a for a, b in itertools.pairwise(beats)]
        # Every WatchdogSec/2 = 0.5 s; systemd restarts a node whose pings are WatchdogSec (1 s) apart.
        assert all(0.2 <= g < 1.0 for g in gaps) and 0.4 <= sum(gaps) / len(gaps) <= 0.7, gaps

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = json.loads(polecat("status", "--node", node_url, "--json").stdout)
            if status["fetches"] and not status["queued"] and not status["in_flight"]:
                break
            time.sleep(0.2)
        assert status["fetches"] == len(page_requests(web)) >= 4
        assert status["throttles"] == [{"host_pattern": "*.slow.test", "req_per_s": 0.5}]
        host = web.seeds[0].split("//")[1].rstrip("/")
        one_host = polecat("status", "--node", node_url, "--host", host, "--json").stdout
        assert json.loads(one_host)["host"] == host
        # Without --json: a summary a person reads at 80 columns, as `polecat status DIR` prints.
        summary = polecat("status", "--node", node_url).stdout.splitlines()
        assert len(summary) < 30 and max(map(len, summary)) <= 80, summary
        assert "queued 0, in flight 0" in summary[0] and f"fetched {status['fetches']} in" in summary[1]
        assert "  throttle *.slow.test = 0.5 req/s" in summary and "  blocked bad.test" in summary
        one = polecat("status", "--node", node_url, "--host", host).stdout.splitlines()
        assert one[0] == f"host {host}: active" and one[-1].startswith("robots.txt "), one
        assert one[1].startswith("queued 0, in flight 0, fetched "), one

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        tail = messages(notify, time.monotonic() + 0.5)
        assert "STOPPING=1" in [line for _, line in backlog + pings + tail]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
    on_disk = polecat("status", str(tmp_path / "data")).stdout
    assert f"queued 0, fetched {status['fetches']}," in on_disk
    assert "blocked bad.test" in on_disk and "throttle *.slow.test = 0.5 req/s" in on_disk
    figures = json.loads(polecat("status", str(tmp_path / "data"), "--json").stdout)
    assert figures["fetched"] == status["fetches"] and figures["blocked"] == ["bad.test"]
