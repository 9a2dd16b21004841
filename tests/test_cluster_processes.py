"""Cluster nodes as real processes (``polecat node --config``), secret from the environment: two nodes
share a crawl, one stops on SIGTERM (handing its slices over) and exits 0, the other finishes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from polecat.testing.etcd import EtcdServer
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests
from tests.test_cluster_nodes import _port


def _toml(web_seeds: list[str], dns: str, data: Path, listen: str, etcd: str, node_id: str, *,
          ttl: int = 3) -> str:
    q = json.dumps
    return "\n".join([
        f"data_dir = {q(str(data))}",
        "[scope]", f"seeds = {q(web_seeds)}", 'mode = "host"',
        "[politeness]", "rate = 10.0",
        "[fetch]", 'user_agent = "polecat-test/0.1 (+http://example.invalid/bot)"',
        "[dns]", f"nameservers = [{q(dns)}]", "allow_private = true",
        "[refresh]", "enabled = false",
        "[node]", f"listen = {q(listen)}",
        "[cluster]", f"etcd = {q(etcd)}", 'name = "p"', f"node_id = {q(node_id)}",
        f"advertise = {q('http://' + listen)}", f"lease_ttl = {ttl}", ""])


def _wait(cond: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_two_node_processes_share_a_crawl_and_one_leaves_on_sigterm(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=10, pages_per_host=40, seed=9))
    truth = web.ground_truth("host")
    env = {**os.environ, "POLECAT_CLUSTER_SECRET": "the secret of the process test"}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for k in range(2):
            host = f"127.0.0.{30 + k}"
            conf = tmp_path / f"n{k}.toml"
            conf.write_text(_toml(web.seeds, web.dns_address, tmp_path / f"n{k}", f"{host}:{_port(host)}",
                                  etcd_server.endpoint, f"n{k}"))
            with (tmp_path / f"n{k}.log").open("wb") as log:
                cmd = [sys.executable, "-m", "polecat", "node", "--config", str(conf)]
                procs.append(subprocess.Popen(cmd, env=env, stderr=log))
        _wait(lambda: len(set(page_requests(web))) >= len(truth) // 3, 90, "a third of the pages")
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(60) == 0, (tmp_path / "n0.log").read_text()[-2000:]
        _wait(lambda: set(page_requests(web)) >= truth, 120, "every page")
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(60) == 0, (tmp_path / "n1.log").read_text()[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    fetched = Counter(page_requests(web))
    assert set(fetched) == truth
    assert sum(n - 1 for n in fetched.values()) <= 0.02 * len(truth)
    assert politeness_violations(web.log, web.min_intervals(10.0)) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_node_still_waiting_for_etcd_stops_cleanly_on_a_stop_signal(sig: signal.Signals,
                                                                      tmp_path: Path) -> None:
    """Machine rule 12: a node whose etcd is not up yet waits up to ``cluster.etcd_start_wait`` (60 s);
    a stop signal then (systemd stopping it, Ctrl-C) ends the wait at once: exit 0, a WARNING that it
    stopped before it started, no traceback, and its data dir as it was (no crawler opened)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "keep").write_text("an operator's file")
    etcd = f"http://127.0.0.1:{_port('127.0.0.1')}"  # nothing listens there: refused, tried again
    conf = tmp_path / "n.toml"
    conf.write_text(_toml(["http://h01.test/"], "127.0.0.1:53", data, f"127.0.0.1:{_port('127.0.0.1')}",
                          etcd, "n0"))
    log = tmp_path / "n.log"
    env = {**os.environ, "POLECAT_CLUSTER_SECRET": "the secret of the process test"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "polecat", "node", "--config", str(conf)], env=env,
                                stderr=out)
    try:
        _wait(lambda: "etcd not reachable at start-up (try 1)" in log.read_text(), 60, "the first try")
        proc.send_signal(sig)
        code = proc.wait(20)  # far under the 60 s it would wait for etcd
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 0, text[-2000:]
    assert "stopped before start" in text and "Traceback" not in text, text[-2000:]
    assert sorted(p.name for p in data.iterdir() if p.name != "handoff") == ["keep"]  # no frontier, store
    assert (data / "keep").read_text() == "an operator's file"
