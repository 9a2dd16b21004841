"""``polecat crawl --workers N`` with real processes on loopback: coverage, politeness, crash, resume."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from polecat.cluster.layout import node_dirs
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests, queue_counts_disagree
from tests.test_crawl_restart import COMMIT_MS, crawl_cmd, finish, start, wait_for_requests


def polecat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=120)


def worker_pids(parent: int) -> list[int]:
    """The parent's worker processes (its children running polecat.processes.worker)."""
    out = subprocess.run(["pgrep", "-P", str(parent), "-f", "polecat.processes.worker"], capture_output=True,
                         text=True)
    return sorted(int(p) for p in out.stdout.split())


def paths(web: TestWeb) -> Counter[str]:
    """Requested pages as host/path (the port differs between two test webs)."""
    return Counter(u.split("//", 1)[1].split(":", 1)[0] + "/" + u.split("/", 3)[3]
                   for u in page_requests(web))


@pytest.mark.slow
def test_two_workers_fetch_what_one_worker_fetches_once_each_politely(test_web: TestWebFactory,
                                                                       tmp_path: Path) -> None:
    spec, rate = SiteSpec(hosts=20, pages_per_host=50, seed=7), 20.0
    one = test_web(spec)
    code, output = finish(start(crawl_cmd(one, tmp_path / "one", rate), tmp_path / "one"))
    assert code == 0, output
    web = test_web(spec)
    data = tmp_path / "two"
    code, output = finish(start(crawl_cmd(web, data, rate, "--workers", "2"), data))
    assert code == 0, output
    assert "ended: queue empty" in output
    counts = paths(web)
    assert set(counts) == set(paths(one))  # the same fetched set as one worker
    assert set(page_requests(web)) == web.ground_truth("host")
    assert max(counts.values()) == 1, [u for u, n in counts.items() if n > 1]
    assert politeness_violations(web.log, web.min_intervals(rate)) == []
    robots = Counter(r.host for r in web.log if r.target == "/robots.txt")
    assert max(robots.values()) == 1  # each host has one owner
    # Both workers fetched, and the readers see the whole crawl whichever worker fetched a page.
    assert (data / "workers" / "0" / "store").is_dir() and (data / "workers" / "1" / "store").is_dir()
    pages = polecat("pages", str(data))
    assert {line.split("\t")[0] for line in pages.stdout.splitlines()[1:]} == web.ground_truth("host")
    status = polecat("status", str(data))
    assert f"fetched {len(web.ground_truth('host'))}" in status.stdout, status.stdout
    for url in sorted(web.ground_truth("host"))[:: len(counts) // 5]:
        assert polecat("cat", str(data), url).returncode == 0
    verify = polecat("store", "verify", str(data))
    assert verify.returncode == 0 and verify.stdout.startswith("OK"), verify.stdout


@pytest.mark.slow
def test_kill_9_of_a_worker_restarts_it_on_its_own_data(test_web: TestWebFactory, tmp_path: Path) -> None:
    hosts, rate = 20, 10.0
    web = test_web(SiteSpec(hosts=hosts, pages_per_host=60, seed=5))
    data = tmp_path / "data"
    proc = start(crawl_cmd(web, data, rate, "--workers", "2"), data)
    kills = 0
    for target in (150, 450):
        wait_for_requests(web, target, proc)
        victims = worker_pids(proc.pid)
        assert len(victims) == 2, victims
        os.kill(victims[kills % 2], signal.SIGKILL)
        kills += 1
        deadline = time.monotonic() + 30
        while len(worker_pids(proc.pid)) < 2 or set(worker_pids(proc.pid)) == set(victims):
            assert time.monotonic() < deadline, "the dead worker was not restarted"
            time.sleep(0.05)
    code, output = finish(proc, timeout=240)
    assert code == 0, output
    counts = Counter(page_requests(web))
    assert set(counts) == web.ground_truth("host")
    # Each worker's frontier agrees with itself after its kills (polecat/node/commits.py rule 16).
    assert {node.name: queue_counts_disagree(node) for node in node_dirs(data)} == {"0": [], "1": []}
    repeats = sum(n - 1 for n in counts.values())
    assert repeats <= kills * (hosts + hosts * rate * (COMMIT_MS / 1000 + 0.3)), repeats
    assert politeness_violations(web.log, web.min_intervals(rate)) == []
    verify = polecat("store", "verify", str(data))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_sigint_stops_every_worker_and_the_rerun_resumes(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=3))
    data = tmp_path / "data"
    cmd = crawl_cmd(web, data, 10.0, "--workers", "2")
    proc = start(cmd, data)
    wait_for_requests(web, 80, proc)
    pids = worker_pids(proc.pid)
    proc.send_signal(signal.SIGINT)
    code, output = finish(proc)
    assert code == 130, output
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)  # every worker ended with the parent
    assert 0 < len(page_requests(web)) < len(web.ground_truth("host"))
    # What the stopped workers left agrees with itself (polecat/node/commits.py rule 16).
    assert {node.name: queue_counts_disagree(node) for node in node_dirs(data)} == {"0": [], "1": []}
    code, output = finish(start(cmd, data))
    assert code == 0, output
    counts = Counter(page_requests(web))
    assert set(counts) == web.ground_truth("host")
    assert max(counts.values()) == 1, [u for u, n in counts.items() if n > 1]
    assert politeness_violations(web.log, web.min_intervals(10.0)) == []


@pytest.mark.slow
def test_hand_off_under_pressure_slows_senders_and_loses_nothing(test_web: TestWebFactory,
                                                                 tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=9, pages_per_host=25, seed=21, cross_host_ratio=0.6))
    rate, data = 20.0, tmp_path / "data"
    config = tmp_path / "pressure.toml"
    # Tiny batches, an inbox that holds two of them, and a small backlog bound: every path of the
    # back-pressure is taken many times.
    config.write_text("[frontier]\ncommit_ms = 300\n[cluster]\nbatch_urls = 4\ninbox_urls = 8\n"
                      "max_backlog = 24\n")
    cmd = [*crawl_cmd(web, data, rate, "--workers", "3", "--scope", "any"), "--config", str(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    counts = Counter(page_requests(web))
    assert set(counts) == web.ground_truth("any")
    assert max(counts.values()) == 1, [u for u, n in counts.items() if n > 1]
    assert politeness_violations(web.log, web.min_intervals(rate)) == []
    start = output.index("workers: ")  # the hand-off paragraph, wrapped at 80 columns
    line = " ".join(output[start : output.index("worker restarts", start)].split())
    n = {k: int(v) for v, k in re.findall(r"(\d+) (URLs handed|acknowledged|received|inbox waits|"
                                          r"lease pauses)", line)}
    # Every URL handed to another worker was acknowledged, i.e. committed by its owner: none lost.
    assert n["URLs handed"] == n["acknowledged"] == n["received"] > 0, line
    assert n["inbox waits"] > 0 and n["lease pauses"] > 0, line  # senders were slowed, not dropped


def test_a_worker_that_fails_on_its_own_data_stops_the_crawl_with_the_reason(test_web: TestWebFactory,
                                                                              tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=4, pages_per_host=10, seed=2))
    data = tmp_path / "data"
    code, output = finish(start(crawl_cmd(web, data, 20.0, "--workers", "2", "--max-pages", "5"), data))
    assert code == 0, output
    (data / "workers" / "1" / "frontier" / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    started = time.monotonic()
    code, output = finish(start(crawl_cmd(web, data, 20.0, "--workers", "2"), data))
    assert code == 1, output  # the failed-crawl exit code, not a restart loop
    assert "polecat worker w1: error:" in output and "worker w1 stopped on an error" in output, output
    assert output.count("polecat worker w1: error:") == 1  # not restarted
    assert time.monotonic() - started < 60


def test_a_worker_that_never_stops_cannot_keep_the_crawl_from_ending(test_web: TestWebFactory,
                                                                    tmp_path: Path) -> None:
    """A stuck worker (here: SIGSTOPped, so it reads no "stop" and no "abort") is killed a bounded time
    after Ctrl-C; without the bound the parent waits for it forever."""
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=5))
    data = tmp_path / "data"
    proc = start(crawl_cmd(web, data, 10.0, "--workers", "2"), data)
    wait_for_requests(web, 40, proc)
    stuck, *_ = worker_pids(proc.pid)
    os.kill(stuck, signal.SIGSTOP)
    stopped_at = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, output = finish(proc)
    assert code == 130, output
    assert time.monotonic() - stopped_at < 2.0 + 2.0 + 5.0 + 5.0  # stop_grace + ABORT_AFTER + KILL_AFTER
    assert not Path(f"/proc/{stuck}").exists() or "Z" in Path(f"/proc/{stuck}/stat").read_text().split()[2]


# An embedding application: it runs the crawl in-process and, once the workers run, forks a child (as
# multiprocessing's fork start method does) that inherits every pipe to the workers, so their stdin
# stays open after this process dies. The child's pid goes to the file named by HOLDER_PID.
_EMBEDDER = """
import os, subprocess, sys, threading, time
from polecat.commands.main import main

def hold():
    while len(subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "polecat.processes.worker"],
                             capture_output=True, text=True).stdout.split()) < 2:
        time.sleep(0.05)
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    with open(os.environ["HOLDER_PID"], "w") as f:
        f.write(str(pid))

threading.Thread(target=hold, daemon=True).start()
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_workers_stop_soon_after_their_parent_is_killed_and_the_rerun_resumes(test_web: TestWebFactory,
                                                                             tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=13))
    data, holder_file = tmp_path / "data", tmp_path / "holder.pid"
    cmd = crawl_cmd(web, data, 10.0, "--workers", "2")
    config = tmp_path / "commit.toml"
    config.write_text(f"[frontier]\ncommit_ms = {COMMIT_MS}\n")
    parent = subprocess.Popen([sys.executable, "-c", _EMBEDDER, *cmd[3:], "--config", str(config)],
                              env={**os.environ, "HOLDER_PID": str(holder_file)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    holder, workers = 0, []
    try:
        wait_for_requests(web, 80, parent)
        while not holder_file.exists() or not holder_file.read_text():
            assert parent.poll() is None
            time.sleep(0.05)
        holder = int(holder_file.read_text())
        workers = [pid for pid in worker_pids(parent.pid) if pid != holder]  # its script names the module
        assert len(workers) == 2, workers
        parent.kill()
        parent.wait()
        killed_at = time.monotonic()
        while any(Path(f"/proc/{pid}").exists() for pid in workers):
            assert time.monotonic() - killed_at < 10.0, "a worker outlived its killed parent"
            time.sleep(0.05)
    finally:
        for pid in (holder, *workers):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert 0 < len(page_requests(web)) < len(web.ground_truth("host"))
    # What the stopped workers left agrees with itself (polecat/node/commits.py rule 16).
    assert {node.name: queue_counts_disagree(node) for node in node_dirs(data)} == {"0": [], "1": []}
    code, output = finish(start(cmd, data))
    assert code == 0, output
    assert set(page_requests(web)) == web.ground_truth("host")
    assert politeness_violations(web.log, web.min_intervals(10.0)) == []


def test_max_pages_split_over_workers_says_so_when_the_run_stops_short(test_web: TestWebFactory,
                                                                       tmp_path: Path) -> None:
    """One host belongs to one worker: it spends its share of --max-pages and the run ends short of
    the number given. The summary says why instead of leaving "max pages reached" at half of it."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=30, seed=4))
    run = subprocess.run(crawl_cmd(web, tmp_path / "data", 50.0, "--workers", "2", "--max-pages", "10"),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ended: max pages reached" in run.stdout
    said = " ".join(run.stdout.split())
    assert "--max-pages 10 is split over the 2 workers by the hosts each owns: 5 fetched" in said, said
