"""benchmarks/cpu_sampler/ (CPU samples of each process) and benchmarks/cpu_parts.py (their parts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cpu_frames import main as frames_main
from benchmarks.cpu_parts import STARTUP, main, part_of

ROOT = Path(__file__).resolve().parent.parent


def test_a_sample_counts_in_the_part_of_its_innermost_named_frame() -> None:
    http = ["polecat/__main__.py:<module>", "aiohttp/web_protocol.py:_handle_request",
            "polecat/cluster/transport.py:_receive", "polecat/cluster/claimlink.py:receive",
            "polecat/cluster/claims.py:decide", "<string>:__init__"]
    assert part_of(http) == "claims: books and queues (claims.py)"
    assert part_of(http[:3]) == "HTTP transport (aiohttp, cluster/transport.py)"
    unix = ["polecat/cluster/claimlink.py:_send_frame", "polecat/cluster/unixwire.py:post",
            "asyncio/streams.py:readexactly"]
    assert part_of(unix) == "unix socket transport (unixwire.py, asyncio streams)"
    stream = ["polecat/cluster/claimstream.py:post", "aiohttp/client_ws.py:send_bytes",
              "aiohttp/_websocket/writer.py:send_frame"]
    assert part_of(stream) == "claims stream (claimstream.py, aiohttp's WebSocket)"
    assert part_of(["polecat/cluster/claims.py:<module>", "<frozen importlib._bootstrap>:_find_and_load",
                    "polecat/store/segstore.py:<module>"]) == STARTUP
    assert part_of(["asyncio/runners.py:run"]) == "event loop (uvloop's own work, lands on its run)"
    assert part_of(["json/encoder.py:encode"]) == "other"


def _record(d: Path, pid: int, ppid: int, argv: list[str], stacks: dict[str, int], cpu: float) -> None:
    (d / f"{pid}.json").write_text(json.dumps({"pid": pid, "ppid": ppid, "argv": argv, "cpu": cpu,
                                               "stacks": stacks}))


def test_a_worker_counts_in_its_parents_run_and_the_table_gives_the_difference_a_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims, store = "polecat/cluster/claims.py:decide", "polecat/store/segstore.py:put"
    _record(tmp_path, 10, 1, ["polecat", "crawl", "--data", "x/data-4-1"], {store: 10}, 0.04)
    _record(tmp_path, 11, 10, ["polecat.processes.worker", "w0.json"], {claims: 30, store: 60}, 0.36)
    _record(tmp_path, 20, 1, ["polecat", "crawl", "--data", "x/data-4-0"], {store: 10}, 0.04)
    _record(tmp_path, 21, 20, ["polecat.processes.worker", "w0.json"], {store: 70}, 0.28)
    assert main([str(tmp_path), "--pages", "100"]) == 0
    out = capsys.readouterr().out
    # 180 samples of 0.72 CPU s: 4 ms each, 40 us a page of 100 pages
    assert "| claims: books and queues (claims.py) | 30 | 0 | +30 | 150 % | +1200 |" in out
    assert "| store put (segment append, WARC, delta) | 70 | 80 | -10 | -50 % | -400 |" in out
    assert "| **all** | 100 | 80 | +20 | | +800 |" in out


def test_the_sampler_writes_the_stacks_and_cpu_of_a_polecat_process(tmp_path: Path) -> None:
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'benchmarks' / 'cpu_sampler'}{os.pathsep}{ROOT}",
           "CPU_SAMPLE_OUT": str(tmp_path)}
    subprocess.run([sys.executable, "-c", busy, "polecat"], env=env, check=True, timeout=60)
    (written,) = tmp_path.glob("*.json")
    record = json.loads(written.read_text())
    assert record["cpu"] >= 0.3 and "polecat" in record["argv"]
    assert sum(record["stacks"].values()) >= 10  # a tick is at most 10 ms


def test_a_frame_counts_each_sample_holding_it_once_with_its_callees_and_per_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fetch, dns = "polecat/node/lease_runner.py:_robots_fetch", "polecat/fetch/dns.py"
    stacks = {f"{fetch};polecat/fetch/http.py:fetch_robots": 30, f"{fetch};polecat/store/segstore.py:put": 10,
              f"{dns}:lookup;{dns}:_ask;{dns}:_answer": 20, "polecat/node/pipeline.py:handle": 40}
    _record(tmp_path, 10, 1, ["python", "-m", "polecat", "crawl", "--seeds-file", "s"], stacks, 0.4)
    _record(tmp_path, 20, 1, ["python", "-m", "benchmarks.bench_scale"], {fetch: 500}, 5.0)
    assert frames_main([str(tmp_path), f"{fetch}=100", f"{dns}:*=10"]) == 0
    out = capsys.readouterr().out
    # the crawl's 100 samples of 0.4 CPU s only (the bench process is not a crawl): 4 ms each
    assert f"{fetch}: 40 samples, 0.16 s (40.0 %), 1600.0 us a call of 100" in out
    assert "    polecat/fetch/http.py:fetch_robots: 30 samples, 0.12 s, 1200.0 us a call" in out
    # a module's functions nested in one sample count it once
    assert "polecat/fetch/dns.py:*: 20 samples, 0.08 s (20.0 %), 8000.0 us a call of 10" in out
    assert "    polecat/fetch/dns.py:_ask: 20 samples" in out
