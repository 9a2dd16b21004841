"""The benchmark's static server: pre-rendered pages served from memory by several aiohttp+uvloop
processes sharing one port through SO_REUSEPORT, on 127.0.0.1..K, each logging every request.

``render_site`` writes the site once (``pages.bin`` + ``offsets.bin`` + ``spec.json``); ``StaticServer``
starts the worker processes (``python -m benchmarks.server DIR PORT K LOGDIR``), waits until each has
bound, and on ``stop`` sends SIGTERM: each worker then writes its log (JSON lines of
:class:`~polecat.testing.serverlog.RequestRecord`, ``LOGDIR/log-PID.jsonl``) and exits. Pages are
mmapped, so the workers share one copy in the page cache.
"""

from __future__ import annotations

import array
import asyncio
import json
import mmap
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from aiohttp import web

from polecat.testing.serverlog import RequestRecord, read_log
from polecat.testing.sitegen import Site, SiteSpec
from polecat.testing.siteserve import SiteHandler, bind_loopback, etag_of

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
        self, site_dir: Path, port: int, addresses: int, workers: int, log_dir: Path, cpus: str | None
    ) -> None:
        self.site_dir, self.port, self.addresses = site_dir, port, addresses
        self.workers, self.log_dir, self.cpus = workers, log_dir, cpus
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self, timeout: float = 120.0) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for f in self.log_dir.glob("*"):
            f.unlink()
        cmd = [sys.executable, "-m", "benchmarks.server", str(self.site_dir), str(self.port)]
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
        return read_log(sorted(self.log_dir.glob("log-*.jsonl")))


async def _serve(site_dir: Path, port: int, addresses: int, log_dir: Path) -> None:
    site = Site(load_spec(site_dir / "spec.json"))
    offsets = array.array("q")
    offsets.frombytes((site_dir / "offsets.bin").read_bytes())
    with (site_dir / "pages.bin").open("rb") as f:
        pages = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(pages)
    etags: dict[int, str] = {}

    def body_of(page: int) -> tuple[memoryview, str]:
        body = view[offsets[page] : offsets[page + 1]]
        etag = etags.get(page)
        if etag is None:
            etag = etags[page] = etag_of(body)
        return body, etag

    handler = SiteHandler(site, port, body_of)
    log: list[RequestRecord] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        host, path, page = handler.locate(request)
        response = handler.respond(request, host, path, page)
        log.append(handler.record(request, host, page, start, response.status))
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    for sock in bind_loopback([f"127.0.0.{i + 1}" for i in range(addresses)], port, reuse_port=True):
        await web.SockSite(runner, sock, backlog=4096).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    (log_dir / f"ready-{os.getpid()}").touch()
    await stop.wait()
    await runner.cleanup()
    with (log_dir / f"log-{os.getpid()}.jsonl").open("w") as f:
        f.writelines(record.to_json() + "\n" for record in log)


def main() -> None:
    site_dir, port, addresses, log_dir = sys.argv[1:5]
    import uvloop

    uvloop.run(_serve(Path(site_dir), int(port), int(addresses), Path(log_dir)))


if __name__ == "__main__":
    main()
