"""The parent process of ``polecat crawl --workers N``: one crawl over N worker processes on one machine.

Rules:
1. Layout: polecat/cluster/layout.py. The parent is the coordinator: it fixes the member list, so the
   Ring gives every worker the same slice owners; a changed count moves slices first
   (polecat/cluster/resize.py), before any worker starts.
2. Hand-off addresses are unix sockets in a private temporary directory, made fresh for each run.
3. A worker that dies without being asked to stop (kill -9, crash) is started again on its own data; a
   worker that dies within ``FAST_DEATH`` seconds of starting ``MAX_FAST_DEATHS`` times in a row, or
   that stops on an error of its own (exit status ``WORKER_FAILED``: disk full, unusable data), is a
   fault: every worker is stopped and the command fails with the reason.
4. The crawl ends when every worker stays quiet (polecat/cluster/termination.py), when the workers'
   fetches reach ``scope.max_pages``, or on SIGINT/SIGTERM, which the parent forwards as "stop" (a
   second one as "abort"). A stop is bounded: workers still running ``ABORT_AFTER`` seconds past the
   requests' own grace (``fetch.stop_grace``) are sent "abort", and ``KILL_AFTER`` seconds later they
   are killed (crash-safe by design: at most their commit window is fetched again), so a stuck worker
   can never keep the command from ending. ``max_pages`` (like the ``max_hosts`` and ``max_queued``
   budgets) is split evenly into per-worker caps, so the run never goes past it; a worker whose hosts
   run dry leaves its share unused.
5. Progress and the summary are the workers' reports merged (polecat/processes/aggregate.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from polecat import logs
from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.layout import needs_resize, record_layout, resolve_workers, share, worker_config
from polecat.cluster.link import LinkStats
from polecat.cluster.membership import Member
from polecat.cluster.resize import resize
from polecat.cluster.termination import Report, Termination
from polecat.config import Config
from polecat.errors import PolecatError
from polecat.node import verdict
from polecat.node.stats import CrawlStats
from polecat.processes.aggregate import merge_stats, stats_from_dict
from polecat.processes.worker import WORKER_FAILED, WorkerSpec, config_mapping

log = logging.getLogger("polecat.supervisor")

POLL = 0.1
PROGRESS_PERIOD = 0.5
"""The progress callback's period (the one-process crawl redraws its line as often)."""
FAST_DEATH = 3.0
MAX_FAST_DEATHS = 3
ABORT_AFTER = 2.0
KILL_AFTER = 5.0


@dataclass(slots=True)
class _Worker:
    index: int
    spec_path: Path
    proc: asyncio.subprocess.Process | None = None
    reader: asyncio.Task[None] | None = None
    last: dict[str, Any] | None = None
    started: float = 0.0
    fast_deaths: int = 0
    retired: list[dict[str, Any]] = field(default_factory=list)
    """The last report of each earlier life of this worker (it died and was restarted)."""
    done: bool = False

    @property
    def id(self) -> str:
        return f"w{self.index}"


@dataclass(frozen=True, slots=True)
class RunResult:
    stats: CrawlStats
    interrupted: bool
    restarts: int
    handoff: LinkStats


class Supervisor:
    """Runs one crawl over ``workers`` processes (see the rules above). ``clock.monotonic()`` times the
    restart backoff (rule 3), the stop's bound (rule 4), the progress period and the run's duration;
    the monitor's poll is an ``asyncio.sleep`` of :data:`POLL` between readings of it."""

    def __init__(self, cfg: Config, workers: int, *,
                 on_progress: Callable[[CrawlStats], None] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = cfg
        self.n = workers
        self._clock = clock
        self._on_progress = on_progress
        self._last_progress = 0.0
        self._workers: list[_Worker] = []
        self._termination = Termination()
        self._stopping = False
        self._stop_at: float | None = None
        self._aborted = False
        self.interrupted = 0
        self.restarts = 0
        self._started = 0.0
        self._fault: str | None = None
        self._ended = ""

    def _specs(self, sock_dir: Path) -> list[_Worker]:
        cfg = self.config
        members = tuple(Member(f"w{k}", f"unix:{sock_dir}/w{k}.sock") for k in range(self.n))
        s = cfg.scope
        # Workers log as this process does (level, file, format: polecat/logs.py rule 5).
        log = replace(logs.current(), level=logging.getLogger("polecat").getEffectiveLevel())
        out = []
        for k in range(self.n):
            # Crawl-wide bounds are split over the workers (each owns about 1/N of the hosts), so
            # together they never exceed them; 0 (no limit) stays 0.
            scope = replace(s, max_pages=share(s.max_pages, self.n, k) if s.max_pages else 0,
                            max_hosts=share(s.max_hosts, self.n, k),
                            max_queued=share(s.max_queued, self.n, k))
            wcfg = replace(worker_config(cfg, k, self.n), scope=scope)
            spec_path = sock_dir / f"w{k}.json"
            WorkerSpec(f"w{k}", members, config_mapping(wcfg), log, os.getpid()).dump(spec_path)
            out.append(_Worker(k, spec_path))
        return out

    async def run(self) -> RunResult:
        data = self.config.data_dir
        if needs_resize(data, self.n):
            moved = resize(self.config, self.n, clock=self._clock)
            print(f"polecat: {moved.old} -> {moved.new} workers: {moved.slices_moved} slices moved "
                  f"({moved.hosts} hosts, {moved.queued} queued URLs, {moved.outbox_urls} URLs from "
                  f"hand-off outboxes) in {moved.seconds:.1f}s", file=sys.stderr)
        else:
            record_layout(data, self.n)
        sock_dir = Path(tempfile.mkdtemp(prefix="polecat-"))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        self._started = self._clock.monotonic()
        try:
            self._workers = self._specs(sock_dir)
            for w in self._workers:
                await self._spawn(w)
            await self._monitor()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            for w in self._workers:
                if w.proc is not None and w.proc.returncode is None:
                    w.proc.kill()
                    await w.proc.wait()
            shutil.rmtree(sock_dir, ignore_errors=True)
        if self._fault is not None:
            raise PolecatError(self._fault)
        return RunResult(self.stats(), bool(self.interrupted), self.restarts, self.handoff())

    def stats(self) -> CrawlStats:
        live = [stats_from_dict(w.last["stats"]) for w in self._workers if w.last is not None]
        retired = [stats_from_dict(r["stats"]) for w in self._workers for r in w.retired]
        return merge_stats(live, retired, self._clock.monotonic() - self._started, ended=self._ended)

    def handoff(self) -> LinkStats:
        """The hand-off counters summed over every worker and every life of it."""
        reports = [r for w in self._workers for r in (*w.retired, *([w.last] if w.last else []))]
        return LinkStats(*(sum(r["link"][f.name] for r in reports) for f in dataclasses.fields(LinkStats)))

    async def _spawn(self, w: _Worker) -> None:
        w.last = None
        w.started = self._clock.monotonic()
        w.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "polecat.processes.worker", str(w.spec_path),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True)
        w.reader = asyncio.create_task(self._read(w, w.proc))
        if self._stopping:
            self._send(w, "stop")

    async def _read(self, w: _Worker, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            with contextlib.suppress(ValueError, KeyError):
                report = json.loads(line)
                if report["stats"] is not None:
                    w.last = report

    def _send(self, w: _Worker, command: str) -> None:
        if w.proc is not None and w.proc.stdin is not None and w.proc.returncode is None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                w.proc.stdin.write(command.encode() + b"\n")

    def stop(self, *, abort: bool = False) -> None:
        """Ask every worker to stop (``abort``: abandon in-flight requests)."""
        self._stopping = True
        if self._stop_at is None:
            self._stop_at = self._clock.monotonic()
        for w in self._workers:
            self._send(w, "abort" if abort else "stop")

    def _on_signal(self) -> None:
        self._ended = verdict.STOPPED
        self.interrupted += 1
        self.stop(abort=self.interrupted > 1)  # before saying so (polecat/logs.py rule 6)
        if self.interrupted == 1:
            logs.say("\npolecat: stopping all workers after in-flight requests (Ctrl-C again to abort)")

    async def _monitor(self) -> None:
        limit = self.config.scope.max_pages
        while True:
            await asyncio.sleep(POLL)
            for w in self._workers:
                if w.proc is not None and w.proc.returncode is not None and not w.done:
                    await self._exited(w)
            if all(w.done for w in self._workers):
                return
            if self._stopping:
                self._escalate()
                continue
            stats = self.stats()
            now = self._clock.monotonic()
            if self._on_progress is not None and now - self._last_progress >= PROGRESS_PERIOD:
                self._last_progress = now
                self._on_progress(stats)
            if limit and stats.fetches >= limit:
                self._ended = verdict.MAX_PAGES
                self.stop()
            elif self._termination.observe({w.id: _report(w.last) for w in self._workers}):
                capped = any(w.last is not None and w.last["stats"]["ended"] == verdict.MAX_PAGES
                             for w in self._workers)  # a worker spent its share of --max-pages
                self._ended = (verdict.MAX_PAGES if capped else verdict.GAVE_UP if stats.queued
                               else verdict.QUEUE_EMPTY)
                self.stop()

    def _escalate(self) -> None:
        """Rule 4's bound on a stop: "abort" once, then kill what is still running."""
        assert self._stop_at is not None
        late = self._clock.monotonic() - self._stop_at - self.config.fetch.stop_grace
        running = [(w, w.proc) for w in self._workers if w.proc is not None and w.proc.returncode is None]
        if late >= ABORT_AFTER + KILL_AFTER:
            for w, proc in running:
                log.warning("worker %s did not stop; killing it", w.id)
                proc.kill()
        elif late >= ABORT_AFTER and not self._aborted:
            self._aborted = True
            for w, _ in running:
                log.warning("worker %s is slow to stop; aborting its requests", w.id)
                self._send(w, "abort")

    async def _exited(self, w: _Worker) -> None:
        assert w.proc is not None
        if w.reader is not None:
            await w.reader  # its last report is in
        code = w.proc.returncode
        if self._stopping or (w.last is not None and w.last.get("final")):
            w.done = True
            if code not in (0, None):
                log.warning("worker %s exited with %s while stopping", w.id, code)
            return
        fast = self._clock.monotonic() - w.started < FAST_DEATH
        w.fast_deaths = w.fast_deaths + 1 if fast else 0
        if code == WORKER_FAILED or w.fast_deaths >= MAX_FAST_DEATHS:
            w.done = True
            self._ended = verdict.FAILED
            self._fault = (
                f"worker {w.id} stopped on an error; see its message above" if code == WORKER_FAILED
                else f"worker {w.id} died {MAX_FAST_DEATHS} times right after starting (exit status "
                     f"{code}); see its messages above")
            self.stop()
            return
        log.warning("worker %s died (exit status %s); restarting it on its own data", w.id, code)
        if w.last is not None:
            w.retired.append(w.last)
        self.restarts += 1
        self._termination.reset()
        await self._spawn(w)


def _report(last: dict[str, Any] | None) -> Report | None:
    if last is None:
        return None
    s, link = last["stats"], last["link"]
    return Report(last["seq"], bool(last["quiet"]),
                  (s["fetches"], link["urls_routed_out"], link["urls_acked"], link["urls_received"]))


async def crawl_with_workers(cfg: Config, *, workers: int | None = None,
                             on_progress: Callable[[CrawlStats], None] | None = None) -> RunResult:
    """Library entry point: run the crawl ``cfg`` describes over ``workers`` processes (default
    ``cfg.workers``; "auto" = cores) and return the merged stats. Stop it with SIGINT/SIGTERM."""
    return await Supervisor(cfg, workers or resolve_workers(cfg), on_progress=on_progress).run()
