"""A node frozen for three lease TTLs (SIGSTOP, then SIGCONT: a GC pause, a paused VM), with real
processes (issue 32). Its lease expires while it sleeps; its slices move to the others, restored from its
checkpoint. When it wakes it must not fetch for what it no longer owns (not even a request leased just
before the freeze: ownership rule 10), nor hand over what it decided under the lease that is gone: the
server sees no host asked too fast, and every page is fetched. The freeze runs alone, with a fourth node
joining during it, or with one of the two other nodes leaving gracefully during it (SIGTERM: it flags
itself leaving and hands its slices, its heir's restore of the frozen node's included, to the one that
stays: ownership rule 8)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from polecat.cluster.ring import Ring
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import (
    also,
    cluster_confs,
    every_page,
    kill_rest,
    page_urls,
    refetched,
    refetched_since,
    round_allowance,
    start_node,
    stop_all,
    until,
    wait_exit,
)
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory

RATE = 20.0
DELAYED = tuple((f"h0{k}.test", 0.1) for k in range(1, 5))
"""Half the hosts ask for a Crawl-delay of twice the rate's interval (the issue's fleet test)."""
TTL = 2
NODES = ("f0", "f1", "f2")


DURING = {"alone": None, "a-node-joins-during-it": "join", "a-node-leaves-during-it": "leave"}
"""What else happens while the node is frozen: nothing, a fourth node joins, or a node that is not
frozen leaves gracefully."""


@pytest.mark.parametrize("during", DURING.values(), ids=DURING.keys())
@pytest.mark.slow
async def test_a_node_frozen_for_three_ttls_wakes_without_fetching_what_it_lost(
        during: str | None, test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """With ``join``, a fourth node joins while the frozen one sleeps: slices move to it from the
    heirs (restored a moment ago) and from the frozen node once it wakes and registers again. With
    ``leave``, a node that is not frozen is SIGTERMed while the other one (its heir) is restoring the
    frozen node's slices: it hands every slice to the one that stays (the frozen node is not a member
    then), and must exit 0; the woken node registers again and gets its share back by hand-over."""
    web = test_web(SiteSpec(hosts=8, pages_per_host=40, seed=33, crawl_delays=DELAYED))
    truth = web.ground_truth("host")
    ring = Ring(NODES)
    frozen = max(NODES, key=lambda n: sum(ring.owner(slice_of(host_key(u))) == n for u in truth))
    joiner = "f3" if during == "join" else None
    leaver = next(n for n in NODES if n != frozen) if during == "leave" else None
    every = NODES + ((joiner,) if joiner else ())
    logs = {n: tmp_path / f"{n}.log" for n in every}
    confs = cluster_confs(web, etcd_server.endpoint, tmp_path, every, first_ip=60, rate=RATE, ttl=TTL)
    procs = {n: start_node(confs[n], logs[n]) for n in NODES}
    try:
        await until(lambda: len(set(page_urls(web))) >= len(truth) // 3, 90, "a third of the pages")
        procs[frozen].send_signal(signal.SIGSTOP)
        stopped, stopped_wall = time.monotonic(), time.time()
        await asyncio.sleep(1.5 * TTL)  # its lease has expired: the heirs are restoring its slices
        if joiner:
            procs[joiner] = start_node(confs[joiner], logs[joiner])
            # joined (it listens once a member) while the node sleeps: on a loaded machine a start took
            # longer than the freeze, and the stop at the end found it still importing (killed: -15)
            await until(lambda: b"listening on" in logs[joiner].read_bytes(), 60, "the fourth node joined")
        if leaver:
            procs[leaver].send_signal(signal.SIGTERM)
        await asyncio.sleep(1.5 * TTL)
        procs[frozen].send_signal(signal.SIGCONT)
        if leaver:
            assert await wait_exit(procs[leaver], 60) == 0, logs[leaver].read_text()[-3000:]
        await every_page(web, truth, 120, "every page after the freeze")
        await stop_all({n: p for n, p in procs.items() if n != leaver}, logs)
    finally:
        kill_rest(procs.values())
    violations = politeness_violations(web.log, web.min_intervals(RATE))
    twice = refetched(web)
    print(f"\nfreeze of {frozen} for {3 * TTL} s{also(joiner, leaver)}: {len(violations)} "
          f"violations, {twice} of {len(truth)} pages fetched twice")
    # What the frozen node fetched after the snapshot of its last shipped checkpoint round is fetched
    # again by its heirs (at-least-once): that snapshot is at most INTERVAL + ROUND_S old, or as old as its
    # logged rounds took on a loaded machine (round_allowance) (10-73 pages
    # of 307 over the runs, on a loaded 2-core VM; a round that waited for a frozen peer's
    # acknowledgements made it older: checkpoint_plan rule 7).
    firsts = refetched_since(web, stopped)
    assert firsts == [] or firsts[0] >= -round_allowance(logs[frozen], stopped_wall), firsts[:5]
    # A join or a leave moves slices once more (hand-overs, URLs re-routed): 0-34 pages over the runs.
    # The 34 (a leave, seen once) fit one host of the frozen node's that the leaver restored, finished
    # and handed to the third node, which kept it (nothing queued) while the woken owner fetched its
    # stale queue again (found in the code and logs, not reproduced); such a slice is shipped on now
    # (ownership rule 7). 0-1 pages in 6 runs of the leave since, each a request that started at the
    # SIGSTOP itself.
    assert sum(f > 0 for f in firsts) <= 0.15 * len(truth)
    # The woken node sends nothing under its expired lease (ownership rule 10: the send gate, the abort
    # of requests in flight) and its heirs wait its abort bound before a restored host's first request
    # (rule 11): no host is asked by two owners too close together, Crawl-delay included.
    assert violations == [], violations[:5]
