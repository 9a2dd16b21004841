"""The benchmark's static server: pre-rendered pages served from memory by one or more worker processes
(benchmarks/httpserve.py, uvloop) sharing one port through SO_REUSEPORT, on 127.0.0.1..K, each logging
every request.

``render_site`` writes the site once (``pages.bin`` + ``offsets.bin`` + ``spec.json``); ``StaticServer``
starts the worker processes (``python -m benchmarks.server DIR PORT K LOGDIR``), waits until each has
bound, and on ``stop`` sends SIGTERM: each worker then writes its log (JSON lines of
:class:`~polecat.testing.serverlog.RequestRecord`, ``LOGDIR/log-PID.jsonl``) and exits. Pages are
mmapped, so the workers share one copy in the page cache.
"""

from __future__ import annotations

import array
import json
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.httpserve import serve
from polecat.testing.serverlog import RequestRecord, read_log
from polecat.testing.sitegen import Site, SiteSpec

__all__ = ["StaticServer", "load_spec", "render_site"]


def load_spec(path: Path) -> SiteSpec:
    raw = json.loads(path.read_text())
    raw["robots"] = tuple(raw["robots"])
    raw["noise"] = tuple(raw["noise"])
    raw["crawl_delays"] = tuple((h, float(d)) for h, d in raw["crawl_delays"])
    return SiteSpec(**raw)


def render_site(site: Site, port: int, out: Path) -> int:
    """Render every page for ``port`` into ``out``; returns the total body bytes."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(asdict(site.spec)))
    offsets = array.array("q", [0])
    with (out / "pages.bin").open("wb") as f:
        for page in range(len(site.pages)):
            body = site.render(page, port)
            f.write(body)
            offsets.append(offsets[-1] + len(body))
    (out / "offsets.bin").write_bytes(offsets.tobytes())
    return offsets[-1]


class StaticServer:
    """Worker processes serving a rendered site; see the module docstring."""

    def __init__(
        self, site_dir: Path, port: int, addresses: int, workers: int, log_dir: Path, cpus: str | None,
        module: str = "benchmarks.server",
    ) -> None:
        """``module``: the worker to run (``python -m MODULE SITE_DIR PORT ADDRESSES LOG_DIR``); for
        benchmarks.docweb, ``site_dir`` is its manifest."""
        self.site_dir, self.port, self.addresses, self.module = site_dir, port, addresses, module
        self.workers, self.log_dir, self.cpus = workers, log_dir, cpus
        self._procs: list[subprocess.Popen[bytes]] = []
        self.cpu_s = 0.0
        """CPU seconds the workers spent serving, from ready to SIGTERM (set by :meth:`stop`)."""

    def start(self, timeout: float = 120.0) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for f in self.log_dir.glob("*"):
            f.unlink()
        cmd = [sys.executable, "-m", self.module, str(self.site_dir), str(self.port)]
        cmd += [str(self.addresses), str(self.log_dir)]
        if self.cpus:
            cmd = ["taskset", "-c", self.cpus, *cmd]
        self._procs = [subprocess.Popen(cmd) for _ in range(self.workers)]
        deadline = time.monotonic() + timeout
        while len(list(self.log_dir.glob("ready-*"))) < self.workers:
            if any(p.poll() is not None for p in self._procs) or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("benchmark server workers failed to start")
            time.sleep(0.05)

    def served(self) -> int:
        """Requests for a page of the site the workers answered so far (benchmarks/httpserve.py)."""
        return sum(int.from_bytes(f.read_bytes()[:8], sys.byteorder, signed=True)
                   for f in self.log_dir.glob("served-*"))

    def stop(self) -> list[RequestRecord]:
        """Stop the workers and return the merged request log."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []
        self.cpu_s = sum(float(f.read_text()) for f in self.log_dir.glob("cpu-*.txt"))
        return read_log(sorted(self.log_dir.glob("log-*.jsonl")))


def main() -> None:
    site_dir, port, addresses, log_dir = sys.argv[1:5]
    import uvloop

    spec = load_spec(Path(site_dir) / "spec.json")
    uvloop.run(serve(spec, Path(site_dir), int(port), int(addresses), Path(log_dir)))


if __name__ == "__main__":
    main()
