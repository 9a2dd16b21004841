"""One worker process of ``polecat crawl --workers N``: a node with a cluster link, driven by the parent.

The parent (:mod:`.supervisor`) starts ``python -m polecat.processes.worker SPEC.json``. The spec names this
member, the member list (ids and hand-off addresses) and the configuration (its ``data_dir`` is this
worker's own directory). The protocol with the parent is line-based and local:

- stdout: one JSON report per line, every ``REPORT_PERIOD`` seconds and once at the end (``final``):
  ``{"seq", "quiet", "final", "stats": CrawlStats, "link": LinkStats}``.
- stdin: ``stop`` (finish in-flight requests, commit, exit 0), ``abort`` (abandon in-flight requests;
  their URLs are replayed next run). End of input (the parent died) counts as ``stop``.

A worker outlives no parent (:mod:`.orphan`): it also stops when its parent dies though its stdin stays
open (held by another process that inherited the pipe), on Linux by a parent-death signal (SIGTERM, which
stops it like ``stop``), elsewhere by noticing its parent id change within a report period. A worker told
to stop in any way that is still running ``STOP_BOUND`` seconds past the requests' grace exits on its
own after dumping every thread's stack to stderr (crash-safe: at most its commit window is fetched
again), so even a worker whose parent is gone cannot linger.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import logging
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from polecat import runloop
from polecat.cluster.batch import Batch
from polecat.cluster.claimlink import ContentClaims, Receivers
from polecat.cluster.handoff import Handoff
from polecat.cluster.link import ClusterLink
from polecat.cluster.membership import LocalMembership, Member
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.sender import HandoffSender
from polecat.cluster.unixwire import UnixTransport, serve_unix
from polecat.config import Config, config_from_mapping
from polecat.errors import PolecatError
from polecat.logs import LogSettings, configure
from polecat.processes.orphan import StopBound, die_with_parent, parent_gone

REPORT_PERIOD = 0.2
WORKER_FAILED = 2
"""Exit status of a worker that stopped on an error of its own (a storage fault, unusable data): unlike
a crash (a signal, an uncaught exception: status 1), restarting it would only fail again."""
LOCAL_MAX_BACKOFF = 1.0
"""A restarted sibling is back within a second or two: retry it at least that often."""
STOP_BOUND = 10.0
"""Seconds past ``fetch.stop_grace`` a stopping worker may take before it exits on its own (orphan.py
rule 3); longer than the parent's abort-then-kill bound, which comes first while the parent lives."""

log = logging.getLogger("polecat.worker")


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What the parent hands a worker."""

    self_id: str
    members: tuple[Member, ...]
    config: dict[str, Any]
    log: LogSettings
    """The parent's logging (polecat/logs.py rule 5): a worker logs at the same level, to the same file
    (or the stderr it inherits) in the same format, each record tagged ``worker=<self_id>``."""
    parent_pid: int = 0
    """The parent's process id, watched for its death (polecat/processes/orphan.py); 0: not watched."""

    def dump(self, path: Path) -> None:
        log = {"level": self.log.level, "file": None if self.log.file is None else str(self.log.file),
               "format": self.log.fmt}
        path.write_text(json.dumps({"self_id": self.self_id, "config": self.config,
                                    "members": [[m.id, m.address] for m in self.members],
                                    "log": log, "parent_pid": self.parent_pid}))

    @classmethod
    def load(cls, path: Path) -> WorkerSpec:
        raw = json.loads(path.read_text())
        log = raw["log"]
        return cls(raw["self_id"], tuple(Member(i, a) for i, a in raw["members"]), raw["config"],
                   LogSettings(int(log["level"]), None if log["file"] is None else Path(log["file"]),
                               "json" if log["format"] == "json" else "text"),
                   int(raw["parent_pid"]))


def config_mapping(cfg: Config) -> dict[str, Any]:
    """``cfg`` as plain data that :func:`~polecat.config.config_from_mapping` turns back into ``cfg``."""
    data: dict[str, Any] = json.loads(json.dumps(asdict(cfg), default=str))
    if data["fetch"].get("ca_bundle") is None:
        data["fetch"].pop("ca_bundle", None)
    return data


async def run_worker(spec: WorkerSpec) -> int:
    # Here, not at the top: the parent imports this module for WorkerSpec, and needs no node.
    from polecat.node.crawler import Crawler

    cfg = config_from_mapping(spec.config)
    membership = LocalMembership(spec.self_id, spec.members)
    address = {m.id: m.address for m in spec.members}
    outbox = Outbox(cfg.data_dir / "handoff", batch_urls=cfg.cluster.batch_urls)
    transport = UnixTransport()
    handoff = Handoff(spec.self_id, outbox, transport,
                      {k: v for k, v in address.items() if k != spec.self_id},
                      sender=HandoffSender(max_backoff=LOCAL_MAX_BACKOFF))
    sink: list[Crawler] = []

    async def deliver(batch: Batch) -> None:
        if not sink:  # answered "error": the sender keeps the batch and offers it again
            raise PolecatError(f"worker {spec.self_id} is still opening its data")
        await sink[0].member.receive(batch)

    receiver = HandoffReceiver(deliver, capacity=cfg.cluster.inbox_urls)
    link = ClusterLink(membership, handoff, receiver, max_backlog=cfg.cluster.max_backlog)
    cl = cfg.cluster
    if cl.content_claims:
        link.claims = ContentClaims(spec.self_id, link.ring.owner, transport, address,
                                    capacity=cl.claim_pages, wait=cl.claim_wait, book_capacity=cl.claim_book,
                                    near=cfg.dedup.near_duplicates, near_distance=cfg.dedup.minhash_distance)
    bound = StopBound(cfg.fetch.stop_grace + STOP_BOUND)
    # Listening before the data is open: a sibling that opened sooner gets its claims answered rather
    # than storing its first pages in full (polecat/cluster/claims.py rule 5).
    server = await serve_unix(Receivers(receiver, link.claims), address[spec.self_id])
    try:
        async with Crawler(cfg, link=link) as crawler:
            sink.append(crawler)
            sending = asyncio.create_task(handoff.run())
            claiming = asyncio.create_task(link.claims.run()) if link.claims is not None else None
            run = asyncio.ensure_future(crawler.run())

            def stop(why: str, *, abort: bool = False) -> None:
                if not bound.armed:
                    log.info("worker %s: stopping (%s)", spec.self_id, why)
                bound.arm()
                if abort:
                    run.cancel()
                else:
                    crawler.stop()

            control = asyncio.create_task(_control(stop))
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, stop, "SIGTERM")
            seq = 0
            try:
                while not run.done():
                    await asyncio.wait([run], timeout=REPORT_PERIOD)
                    seq += 1
                    if parent_gone(spec.parent_pid):
                        stop("the parent process died")
                    if not _report(seq, crawler.member.quiet, False, crawler, link):
                        stop("the parent no longer reads reports")  # killed: stop cleanly, keep what is done
                with contextlib.suppress(asyncio.CancelledError):
                    await run
            finally:
                control.cancel()
                await server.close()
                sending.cancel()
                if claiming is not None:
                    claiming.cancel()
                if link.claims is not None:
                    await link.claims.close()
                await asyncio.gather(sending, control, *(() if claiming is None else (claiming,)),
                                     return_exceptions=True)
                await transport.close()
            _report(seq + 1, crawler.member.quiet, True, crawler, link)
    finally:
        await server.close()  # again after a clean stop: closing twice is harmless
        await membership.close()
        outbox.close()
        _remove_socket(address[spec.self_id])
    return 0


def _remove_socket(address: str) -> None:
    """A worker whose parent was killed leaves no socket (nor, if it is the last, the directory)."""
    if address.startswith("unix:"):
        path = Path(address[len("unix:") :])
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
            if not any(p.suffix == ".sock" for p in path.parent.iterdir()):
                shutil.rmtree(path.parent)


def _report(seq: int, quiet: bool, final: bool, crawler: Any, link: ClusterLink) -> bool:
    """Write one report line; False when the parent no longer reads them."""
    line = json.dumps({"seq": seq, "quiet": quiet, "final": final, "stats": crawler.stats().as_dict(),
                       "link": asdict(link.stats())})
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # ValueError: stdout was closed after an earlier failure
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.close()
        return False
    return True


async def _control(stop: Callable[..., None]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).strip()
        if line == b"abort":
            stop("abort", abort=True)
            return
        if not line:
            stop("end of input: the parent process died")
            return
        stop(line.decode(errors="replace"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = WorkerSpec.load(Path(args[0]))
    die_with_parent()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps the stacks to stderr
    configure(spec.log.level, file=spec.log.file, fmt=spec.log.fmt, tag={"worker": spec.self_id})
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it forwards Ctrl-C as "stop"
    try:
        return runloop.run(run_worker(spec))
    except PolecatError as exc:
        print(f"polecat worker {spec.self_id}: error: {exc}", file=sys.stderr)
        return WORKER_FAILED


if __name__ == "__main__":
    sys.exit(main())
