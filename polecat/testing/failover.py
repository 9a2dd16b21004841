"""A failover scenario with real processes, for the failover test and ``benchmarks.bench_failover``.

Three ``polecat node --config`` processes on 127.0.0.x share a crawl of a :class:`TestWeb`, with slice
checkpoints in a ``file://`` store (or the one given), pages in object storage where ``store`` names one
(``[store] url``); once ``kill_at`` of the pages are fetched, the
node owning the most hosts is SIGKILLed and its data dir deleted. The run waits for every page, then
stops one survivor gracefully (its slices are handed to the last one), then the last one. What happened
is read back from the server's request log, etcd and the nodes' logs (:class:`FailoverRun`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from polecat.cluster.aetcd_client import AetcdClient
from polecat.cluster.ring import Ring
from polecat.config import StoreConfig
from polecat.frontier.slices import slice_of
from polecat.frontier.traps import is_probe
from polecat.hosts import host_key
from polecat.store.segstore import SegmentStore
from polecat.testing.etcd import EtcdServer
from polecat.testing.serverlog import RequestRecord
from polecat.testing.web import TestWeb

NODES = ("n0", "n1", "n2")
CLUSTER = "fo"
RESTORED = re.compile(r"restored (\d+) slices of (\S+) from its checkpoint round \d+ \(\d+ URLs queued\) "
                      r"in ([0-9.]+) s")
HANDED = re.compile(r"handed (\d+) slices over in ([0-9.]+) s")


@dataclass(frozen=True, slots=True)
class FailoverRun:
    """What one run saw. Times are ``time.monotonic()`` of this process (the test web's clock)."""

    victim: str
    victim_hosts: frozenset[str]
    slices_of_victim: int
    killed: float
    expired: float
    """When the victim's member key left etcd (its lease expired), polled every 20 ms."""
    first_fetch: float
    """The first request to one of the victim's hosts after ``expired`` (by a new owner)."""
    restored: tuple[tuple[str, int, float], ...]
    """(node, slices, seconds) of each restore from the victim's checkpoint."""
    handed: tuple[tuple[int, float], ...]
    """(slices, seconds) of each hand-over of the graceful leave at the end."""
    exit_codes: dict[str, int]
    data: dict[str, Path]
    logs: dict[str, Path]
    victim_store: str = ""
    """The store id of the victim's page store (its segments' names in object storage begin with it)."""


def is_page_request(record: RequestRecord) -> bool:
    """Whether the server's ``record`` asked for a page: robots.txt and soft-404 probes
    (polecat/frontier/traps.py) are not pages."""
    return record.target != "/robots.txt" and not is_probe(record.url)


def page_urls(web: TestWeb) -> list[str]:
    """Page URLs the server saw, robots.txt and soft-404 probes left out, in arrival order."""
    return [r.url for r in web.log if is_page_request(r)]


def refetched(web: TestWeb) -> int:
    """Pages the server was asked for more than once (what failover and hand-overs cost)."""
    return sum(n > 1 for n in Counter(page_urls(web)).values())


def refetched_since(web: TestWeb, at: float) -> list[float]:
    """For each page the server was asked for more than once, when it was first asked, in seconds after
    ``at`` (negative: before), sorted."""
    first: dict[str, float] = {}
    count: Counter[str] = Counter()
    for r in web.log:
        if is_page_request(r):
            first[r.url] = min(first.get(r.url, r.start), r.start)
            count[r.url] += 1
    return sorted(first[u] - at for u, n in count.items() if n > 1)


def also(joiner: str | None, leaver: str | None) -> str:
    """``", n3 joining, n1 leaving"`` (the parts that apply) for a scenario's summary line."""
    return (f", {joiner} joining" if joiner else "") + (f", {leaver} leaving" if leaver else "")


def node_toml(web: TestWeb, data: Path, listen: str, etcd: str, node_id: str, checkpoints: str, *,
              rate: float, ttl: int, interval: float, options: tuple[tuple[str, str], ...] = (),
              store: str = "") -> str:
    """A node's config; ``store``: the ``[store] url`` (with the checkpoints' ``options``)."""
    q = json.dumps
    opts = "{" + ", ".join(f"{k} = {q(v)}" for k, v in options) + "}"
    pages = ["[store]", f"url = {q(store)}", f"options = {opts}"] if store else []
    return "\n".join([
        f"data_dir = {q(str(data))}",
        "[scope]", f"seeds = {q(web.seeds)}", 'mode = "host"',
        "[politeness]", f"rate = {rate}",
        "[fetch]", 'user_agent = "polecat-test/0.1 (+http://example.invalid/bot)"',
        "[dns]", f"nameservers = [{q(web.dns_address)}]", "allow_private = true",
        "[refresh]", "enabled = false",
        "[node]", f"listen = {q(listen)}",
        "[cluster]", f"etcd = {q(etcd)}", f"name = {q(CLUSTER)}", f"node_id = {q(node_id)}",
        f"advertise = {q('http://' + listen)}", f"lease_ttl = {ttl}", f"checkpoints = {q(checkpoints)}",
        f"checkpoint_interval = {interval}",
        f"checkpoint_options = {opts}", *pages, ""])


async def run_failover(web: TestWeb, etcd: EtcdServer, work: Path, *, rate: float = 10.0, ttl: int = 2,
                       interval: float = 0.5, kill_at: float = 1 / 3, within: float = 120.0,
                       checkpoints: str = "", options: tuple[tuple[str, str], ...] = (),
                       store: str = "", ready: Callable[[str], bool] | None = None) -> FailoverRun:
    """The scenario of the module docstring; raises AssertionError if a step does not happen in time.
    ``ready``, when given, must also say yes of the victim (called in a thread, every quarter second)
    before it is killed: e.g. that its checkpoints hold what the test is about, which takes longer the
    more the machine is loaded."""
    truth = web.ground_truth("host")
    ring = Ring(NODES)
    victim = max(NODES, key=lambda n: sum(ring.owner(slice_of(host_key(u))) == n for u in truth))
    data = {n: work / n for n in NODES}
    logs = {n: work / f"{n}.log" for n in NODES}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    codes: dict[str, int] = {}
    try:
        for k, node in enumerate(NODES):
            host = f"127.0.0.{40 + k}"
            conf = work / f"{node}.toml"
            conf.write_text(node_toml(web, data[node], f"{host}:{loopback_port(host)}", etcd.endpoint, node,
                                      checkpoints or f"file://{work}/checkpoints", rate=rate, ttl=ttl,
                                      interval=interval, options=options, store=store))
            procs[node] = start_node(conf, logs[node])
        await until(lambda: len(set(page_urls(web))) >= len(truth) * kill_at, within, "the kill point")
        deadline = time.monotonic() + within
        while ready is not None and not await asyncio.to_thread(ready, victim):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {victim} to be ready to kill")
            await asyncio.sleep(0.25)
        victim_store = store_id(data[victim] / "store")
        procs[victim].kill()
        killed = time.monotonic()
        shutil.rmtree(data[victim])  # its disk is lost
        expired = await _lease_expiry(etcd, victim, ttl * 5)
        await every_page(web, truth, within, "every page")
        for node in NODES:  # the first survivor leaves gracefully (hand-over), then the last one
            if node != victim:
                procs[node].send_signal(signal.SIGTERM)
                codes[node] = await wait_exit(procs[node], 60)
    finally:
        kill_rest(procs.values())
    victim_hosts = frozenset(host_key(u) for u in truth if ring.owner(slice_of(host_key(u))) == victim)
    first = min(r.start for r in web.log if r.start > expired and host_key(r.url) in victim_hosts)
    text = {n: logs[n].read_text() for n in NODES if n != victim}
    restored = tuple((n, int(m[1]), float(m[3])) for n in text for m in RESTORED.finditer(text[n])
                     if m[2] == victim)
    handed = tuple((int(m[1]), float(m[2])) for t in text.values() for m in HANDED.finditer(t))
    return FailoverRun(victim, victim_hosts, len(ring.slices_of(victim)), killed, expired, first, restored,
                       handed, codes, data, logs, victim_store)


def store_id(root: Path) -> str:
    """The id of the page store in ``root`` (read while its node runs)."""
    with SegmentStore.open(root, StoreConfig(), read_only=True) as store:
        return store.store_id


INTERVAL = 0.5
"""The checkpoint interval of :func:`cluster_confs`' nodes."""
ROUND_S = 2.0
"""How long a checkpoint round may take on a loaded 2-core machine (snapshot to manifest, the wait for
acknowledgements included: failover.py SETTLE_WAIT): a dead node's last shipped round is at most
``INTERVAL + ROUND_S`` old, or :func:`round_allowance` where its rounds took longer."""


def round_allowance(log: Path, before: float) -> float:
    """How old the last checkpoint round shipped by the node logging to ``log`` can be when it stops
    shipping at ``before`` (wall seconds): :data:`INTERVAL` and the longest of its rounds logged before
    then (each logged with its length), at least :data:`ROUND_S`. A machine loaded past what ROUND_S
    assumes makes the rounds, and so the window of pages its heirs fetch again, longer (the cut-off test's
    first refetched page was first fetched 2.54 s before the cut, against 2.5 s, in a CI run beside a
    50M-URL benchmark); the rounds' own lengths say by how much. A round that ends after ``before`` is
    left out: one under way through a freeze counts the freeze."""
    lengths = [float(length) for at, length in _ROUND_LINE.findall(log.read_text(errors="replace"))
               if datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() < before]
    return INTERVAL + max([ROUND_S, *lengths])


_ROUND_LINE = re.compile(
    r"^(\S+) INFO polecat\.cluster\.failover: slice checkpoint round \d+: .* in ([0-9.]+) s", re.MULTILINE)
"""A checkpoint round's line (polecat/cluster/failover.py): its time, and its length in seconds."""


def cluster_confs(web: TestWeb, etcd: str, work: Path, nodes: Iterable[str], *, first_ip: int, rate: float,
                  ttl: int, interval: float = INTERVAL) -> dict[str, Path]:
    """A ``polecat node`` config for each of ``nodes``, the k-th listening on 127.0.0.<first_ip + k>,
    data in ``work/<node>``, checkpoints in ``work/checkpoints``; its log goes to ``work/<node>.log``."""
    confs = {}
    for k, node in enumerate(nodes):
        host = f"127.0.0.{first_ip + k}"
        confs[node] = work / f"{node}.toml"
        confs[node].write_text(node_toml(web, work / node, f"{host}:{loopback_port(host)}", etcd, node,
                                         f"file://{work}/checkpoints", rate=rate, ttl=ttl, interval=interval))
    return confs


def loopback_port(host: str) -> int:
    """A free TCP port on ``host`` (a loopback address)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_node(conf: Path, log: Path) -> subprocess.Popen[bytes]:
    """``polecat node --config conf`` logging at info level to ``log`` (appended)."""
    env = {**os.environ, "POLECAT_CLUSTER_SECRET": "the secret of the failover scenario"}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "polecat", "node", "--config", str(conf),
                                 "--log-level", "info"], env=env, stderr=out)


async def until(cond: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``cond`` every 50 ms (AssertionError naming ``what`` after ``within`` seconds)."""
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def every_page(web: TestWeb, truth: Iterable[str], within: float, what: str) -> None:
    """Wait until the server saw every URL of ``truth``; after ``within`` seconds an AssertionError names
    ``what`` and the URLs never asked for, each with its host's slice (to follow them in the nodes'
    logs)."""
    want = set(truth)
    try:
        await until(lambda: set(page_urls(web)) >= want, within, what)
    except AssertionError:
        missing = sorted(want - set(page_urls(web)))
        named = ", ".join(f"{u} (slice {slice_of(host_key(u))})" for u in missing[:20])
        raise AssertionError(f"timed out waiting for {what}: {len(missing)} of {len(want)} pages never "
                             f"asked for: {named}") from None


async def wait_exit(proc: subprocess.Popen[bytes], within: float) -> int:
    """The exit status of ``proc``, polled (AssertionError after ``within`` seconds)."""
    deadline = time.monotonic() + within
    while (code := proc.poll()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"node {proc.pid} did not exit within {within} s of SIGTERM")
        await asyncio.sleep(0.05)
    return code


async def stop_all(procs: Mapping[str, subprocess.Popen[bytes]], logs: Mapping[str, Path],
                   within: float = 60) -> None:
    """SIGTERM every node at once; each must then exit with 0 within ``within`` seconds (an
    AssertionError shows the tail of its log otherwise)."""
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for n, p in procs.items():
        assert await wait_exit(p, within) == 0, logs[n].read_text()[-3000:]


def kill_rest(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGKILL and reap the nodes still running (a stopped one is continued first, so that it dies)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()


async def _lease_expiry(etcd: EtcdServer, node: str, within: float) -> float:
    """When ``node``'s member key disappeared from etcd (its lease expired), polling every 20 ms."""
    client = AetcdClient(etcd.endpoint)
    try:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            kvs, _ = await client.get_prefix(f"/{CLUSTER}/members/")
            if f"/{CLUSTER}/members/{node}" not in kvs:
                return time.monotonic()
            await asyncio.sleep(0.02)
    finally:
        await client.close()
    raise AssertionError(f"{node}'s lease did not expire within {within} s")
