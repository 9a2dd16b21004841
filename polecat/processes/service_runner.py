"""``polecat node``: a crawler that runs as a service until SIGTERM.

Rules:
- The crawl never ends on its own: an empty frontier waits for seeds (from the API or the config).
- READY=1 goes to systemd once the API listens and the node can lease; a STATUS= line follows every
  :data:`STATUS_EVERY` seconds; WATCHDOG=1 is sent from the event loop every ``WatchdogSec``/2, so a
  stalled loop misses it and systemd restarts the node.
- SIGTERM or SIGINT: STOPPING=1, stop leasing, give in-flight requests ``fetch.stop_grace`` seconds,
  cancel the rest (their URLs stay queued), commit, exit 0. A second signal abandons at once.
- Exit 1 when the crawl stopped on a fatal storage error (what was committed is kept).
- With ``cluster.etcd`` set the node is one member of a multi-machine cluster
  (:mod:`polecat.processes.machine`): it joins before its crawler opens, serves the signed internal
  routes on the same listener, and a stop signal first hands every slice over, then drains. A stop
  signal while it still waits for etcd to answer (machine rule 12) ends the wait: a WARNING says it
  stopped before it started, exit 0, the crawler never opened.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.link import ClusterLink
from polecat.cluster.wire import THIS, Wire
from polecat.config import Config, split_listen
from polecat.errors import PolecatError
from polecat.frontier.records import Completion, Lease
from polecat.node.crawler import Crawler
from polecat.node.stats import LAG_TICK
from polecat.node.summary import progress_text
from polecat.processes.machine import INTERNAL_PATHS, ClusterNode
from polecat.service.activity import Activity
from polecat.service.api import Api, check_listen
from polecat.service.metrics import LoopLag, NodeMetrics
from polecat.service.systemd import Notifier, watchdog_interval

log = logging.getLogger("polecat.node.crawler")

TICK = 1.0
"""Seconds between watchdog pings (when systemd asks for less often) and looks at the status line."""
STATUS_EVERY = 10.0


def status_line(crawler: Crawler) -> str:
    """The STATUS= line: the progress line's words, after the node's state."""
    s = crawler.stats()
    state = "paused" if crawler.paused else "crawling" if s.queued or s.in_flight else "idle"
    return f"{state}: {progress_text(s)}"


class NodeService:
    """One node's lifetime: ``await NodeService(cfg).run()`` returns the exit status after a stop
    signal or :meth:`stop`. ``ready`` is set once the API listens (``url``, ``crawler`` usable).
    ``clock`` is the one the crawler, the cluster side, the API, the metrics and the ticker read;
    ``wire``, the wire versions the cluster side speaks (this release's; a test gives another to play a
    node of another release, polecat/cluster/wire.py)."""

    def __init__(self, cfg: Config, *, notifier: Notifier | None = None, clock: Clock = SYSTEM_CLOCK,
                 wire: Wire = THIS) -> None:
        check_listen(cfg)
        self.config = cfg
        self.clock = clock
        self.notifier = notifier or Notifier.from_env()
        self.activity = Activity()
        self.lag = LoopLag()
        self.url = ""
        self.ready = asyncio.Event()
        self._metrics: NodeMetrics | None = None
        self._stop = asyncio.Event()
        self._crawler: Crawler | None = None
        self.cluster: ClusterNode | None = None
        self._wire = wire

    @property
    def crawler(self) -> Crawler:
        assert self._crawler is not None, "the node is not running"
        return self._crawler

    def stop(self) -> None:
        """Begin the graceful drain (a second call abandons in-flight requests at once)."""
        self._stop.set()

    def _on_lease(self, lease: Lease, completion: Completion) -> None:
        if lease.kind == "page":
            self.activity.record(lease, completion, self.clock.wall())
        if self._metrics is not None:
            self._metrics.observe(lease, completion)

    async def run(self, *, handle_signals: bool = True) -> int:
        cfg = self.config
        self.cluster = ClusterNode(cfg, clock=self.clock, wire=self._wire) if cfg.cluster.etcd else None
        link = None
        if self.cluster is not None:
            link = await self._join(self.cluster, handle_signals)
            if link is None:
                return 0
        try:
            return await self._run(handle_signals, link)
        finally:
            if self.cluster is not None:
                await self.cluster.close()

    async def _join(self, cluster: ClusterNode, handle_signals: bool) -> ClusterLink | None:
        """Join the cluster; None when a stop signal (or :meth:`stop`) came first. The join may wait for
        etcd for ``cluster.etcd_start_wait`` seconds (machine rule 12): a signal's default action would
        kill the node mid-wait. Once joined the handlers stay, so a signal while the crawler opens stops
        it as soon as it runs."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM) if handle_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, self.stop)
        joining = asyncio.ensure_future(cluster.join())
        stopping = asyncio.ensure_future(self._stop.wait())
        joined = False
        try:
            await asyncio.wait([joining, stopping], return_when=asyncio.FIRST_COMPLETED)
            if joining.done():
                link = joining.result()  # a join that failed raises here (exit 1 or 2, with its reason)
                joined = True
                return link
            joining.cancel()
            await asyncio.wait([joining])
        finally:
            stopping.cancel()
            if not joined:
                for sig in signals:
                    loop.remove_signal_handler(sig)
        log.warning("stopped before start: a stop signal came while waiting for etcd "
                    "(cluster.etcd_start_wait); the crawler was never opened")
        return None

    async def _run(self, handle_signals: bool, link: ClusterLink | None) -> int:
        cfg = self.config
        loop = asyncio.get_running_loop()
        async with Crawler(cfg, on_lease=self._on_lease, link=link, clock=self.clock) as crawler:
            self._crawler = crawler
            self._metrics = NodeMetrics(crawler, self.lag, clock=self.clock,
                                        cluster=self.cluster.stats if self.cluster is not None else None)
            api = Api(crawler, self.activity, self._metrics.registry, clock=self.clock)
            if self.cluster is None:
                app = api.app(cfg.node.token, secret=cfg.cluster.secret)
            else:
                app = api.app(cfg.node.token, signed=INTERNAL_PATHS, auth=self.cluster.auth)
                self.cluster.routes(app)
                self.cluster.start(crawler)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            signals = (signal.SIGINT, signal.SIGTERM) if handle_signals else ()
            try:
                host, port = split_listen(cfg.node.listen)
                try:
                    await web.TCPSite(runner, host, port).start()
                except OSError as exc:
                    raise PolecatError(f"node.listen (--listen) {cfg.node.listen}: "
                                       f"{exc.strerror or exc}") from exc
                self.url = _url(runner.addresses[0])
                print(f"polecat node: listening on {self.url}", file=sys.stderr, flush=True)
                for sig in signals:
                    loop.add_signal_handler(sig, self.stop)
                code = await self._crawl(crawler)
            finally:
                for sig in signals:
                    loop.remove_signal_handler(sig)
                await runner.cleanup()
                if self.cluster is not None:  # no checkpoint round may outlive the crawler
                    await self.cluster.detach()
        self.notifier.close()
        return code

    async def _crawl(self, crawler: Crawler) -> int:
        run = asyncio.ensure_future(crawler.run(serve=True))
        self.notifier.notify("READY=1", f"STATUS={status_line(crawler)}")
        self.ready.set()
        ticker = asyncio.ensure_future(_tick(crawler, self.notifier, watchdog_interval(), self.clock))
        sampler = asyncio.ensure_future(_sample_lag(self.lag, self.clock))
        stopping = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait([run, stopping], return_when=asyncio.FIRST_COMPLETED)
        self.notifier.notify("STOPPING=1", "STATUS=draining")
        if self.cluster is not None and not run.done():
            await self.cluster.leave()  # every slice to its new owner while the crawler still commits
        crawler.stop()  # in-flight requests get fetch.stop_grace, then are cancelled (URLs stay queued)
        self._stop.clear()
        stopping = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait([run, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not run.done():
            log.warning("second stop signal: abandoning requests in flight (replayed at the next start)")
            run.cancel()
        ticker.cancel()
        sampler.cancel()
        stopping.cancel()
        await asyncio.wait([run, ticker, sampler, stopping])
        if not run.cancelled() and run.exception() is not None:
            log.error("node stopped: %s", run.exception())
            return 1
        return 0


async def serve(cfg: Config) -> int:
    """Run a node until a stop signal; returns the exit status."""
    return await NodeService(cfg).run()


async def _tick(crawler: Crawler, notifier: Notifier, watchdog: float | None,
                clock: Clock = SYSTEM_CLOCK) -> None:
    """Ping the watchdog and refresh the status line, from the event loop. The status period is read on
    ``clock.monotonic()``; the ticks themselves are the loop's ``asyncio.sleep`` (on the machine's
    clock, what a stalled loop delays: a loop too stalled to ping is one systemd should restart)."""
    period = min(TICK, watchdog) if watchdog else TICK
    last_status = clock.monotonic()
    while True:
        await asyncio.sleep(period)
        now = clock.monotonic()
        fields = ["WATCHDOG=1"] if watchdog else []
        if now - last_status >= STATUS_EVERY:
            fields.append(f"STATUS={status_line(crawler)}")
            last_status = now
        if fields:
            notifier.notify(*fields)


async def _sample_lag(lag: LoopLag, clock: Clock = SYSTEM_CLOCK) -> None:
    """Record how late the loop runs a timer due every :data:`~polecat.node.stats.LAG_TICK` seconds
    (read on ``clock.monotonic()``), until cancelled: the ``/metrics`` lag, stalls and worst."""
    while True:
        expected = clock.monotonic() + LAG_TICK
        await asyncio.sleep(LAG_TICK)
        now = clock.monotonic()
        lag.record(now, max(0.0, now - expected))


def _url(addr: object) -> str:
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return str(addr)
