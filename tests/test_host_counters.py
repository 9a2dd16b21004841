"""The host table's counters (polecat/frontier/host_table.py rule 12) against a full recount of the host
records, after any sequence of admissions, leases, completions, parked hosts, blocks, hand-overs, commits
and crashes; and what ``polecat status DIR`` reads to show them (no host record)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.frontier.controls import Controls
from polecat.frontier.host_table import ADVANCE_STEP, HOST_COUNTS, HostTable, parent_domains, quarantined
from polecat.frontier.observe import Observation
from polecat.frontier.politeness import HostState
from polecat.frontier.records import Idle, Lease, Wait, decode_host
from polecat.frontier.slices import slice_of
from polecat.frontier.status import read_status
from polecat.hosts import HostPatternMap, hostname
from polecat.writes import Delete
from tests.frontier_helpers import Rig, canon, done, politeness

HOSTS = 12
CFG = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=2.0),
             frontier=FrontierConfig(working_hosts=100))
WORKING = 4
"""A working set of 4 of 12 hosts: records leave memory, come back and are filed cold (rules 6-11). Below
the configuration's least, so set on the table itself (:func:`small`)."""


def small(rig: Rig) -> Rig:
    rig.raw._table.working_hosts = WORKING
    return rig


def host(i: int) -> str:
    """Every third host with a port (host_table rule 13 lists those by name); every fourth a level
    deeper (rule 15 lists each under every parent domain)."""
    return f"h{i}." + ("sub." if i % 4 == 1 else "") + "count.test" + (":8080" if i % 3 == 0 else "")


DOMAIN_PATTERNS = ("*.count.test", "*.sub.count.test", "*.h1.sub.count.test", "*.h2.count.test", "*.test")
"""``*.`` patterns of the hosts of :func:`host`: by their index (rule 15), and one label (a walk)."""


def walked(table: HostTable, pattern: str) -> list[str]:
    """The hosts in memory ``pattern`` matches, by a pass over memory (what rule 15 replaces)."""
    matcher: HostPatternMap[bool] = HostPatternMap([(pattern, True)])
    return sorted(h for h in table.hosts if h in matcher)


def recount(rig: Rig) -> dict[str, int]:
    """The counters of rule 12 counted from every committed host record."""
    got = {"hosts": 0, "with_queue": 0, "queued": 0, "fetched": 0}
    for _, raw in rig.db.items("hosts"):
        st = decode_host(raw)
        got["hosts"] += 1
        got["with_queue"] += st.queued > 0
        got["queued"] += st.queued
        got["fetched"] += st.fetched
    return got


def check(rig: Rig) -> None:
    """Commit, then: the stored counters, the table's and a recount agree, and the queue holds ``queued``."""
    rig.frontier.commit()
    counted = recount(rig)
    table = rig.raw._table
    assert json.loads(rig.db.get("meta", HOST_COUNTS) or b"{}") == counted
    assert (table.known_hosts, table.with_queue, table.queued, table.fetched) == tuple(counted.values())
    assert counted["queued"] == rig.db.count("queue")
    listed = sorted(key for keys in table.ported.values() for key in keys)
    assert listed == sorted(h for h in table.hosts if ":" in h)  # rule 13
    under: dict[str, set[str]] = {}
    for h in table.hosts:
        for parent in parent_domains(hostname(h)):
            under.setdefault(parent, set()).add(h)
    assert {d: {keys} if isinstance(keys, str) else keys for d, keys in table.parents.items()} == under
    assert table.quarantined == sum(map(quarantined, table.hosts.values()))  # rule 16
    for pattern in DOMAIN_PATTERNS:  # rule 15
        assert sorted(rig.raw._controls._matching(pattern)) == walked(table, pattern)


def check_gauges(rig: Rig, now: float) -> None:
    """The state gauges of rules 16-17 equal a pass over the hosts in memory at ``now`` (what they
    replace)."""
    table = rig.raw._table
    s = rig.raw.stats(now)
    ready = backoff = 0
    waiting: list[float] = []
    for h, at in table.scheduled.items():
        st = table.hosts[h]
        if st.parked:
            continue
        if at <= now:
            ready += 1
        else:
            waiting.append(at)
            backoff += bool(st.failures or st.strikes)
    assert (s.hosts_ready, s.hosts_backoff, s.next_ready_at) == (ready, backoff, min(waiting, default=0.0))
    assert s.hosts_waiting == len(table.scheduled) - ready + table.cold_rows
    assert rig.raw.quarantined_hosts() == sum(map(quarantined, table.hosts.values()))


def lease_one(rig: Rig, now: float, how: str) -> float:
    """One lease at ``now`` (the clock moved on to a host's time when none is due), completed as
    ``how`` says: fetched, failed, or the host parked."""
    got = rig.frontier.lease(now)
    if isinstance(got, Wait):
        return max(now, got.until or now)
    if isinstance(got, Idle) or not isinstance(got, Lease):
        return now
    if got.kind == "robots":
        rig.complete_robots(got, now)
    elif how == "park":
        rig.db.apply(rig.raw.complete(got, replace(done(now), park="refused by the test"), now + 0.01))
    else:
        rig.complete(got, now, failed=how == "fail", status=200)
    return now + 0.01


STEP = hs.one_of(
    hs.tuples(hs.just("seed"), hs.integers(0, HOSTS - 1)),
    hs.tuples(hs.just("add"), hs.integers(0, HOSTS - 1), hs.integers(0, 3)),
    hs.tuples(hs.just("lease"), hs.sampled_from(["ok", "ok", "fail", "park"]), hs.integers(1, 8)),
    hs.tuples(hs.just("block"), hs.integers(0, HOSTS - 1)),
    hs.tuples(hs.just("block"), hs.sampled_from(DOMAIN_PATTERNS[1:4])),
    hs.tuples(hs.just("hand"), hs.integers(0, HOSTS - 1)),
    hs.tuples(hs.just("commit")),
    hs.tuples(hs.just("throttle"), hs.sampled_from(DOMAIN_PATTERNS[:4])),
    hs.tuples(hs.just("wait"), hs.floats(0.0, 30.0)),
    hs.tuples(hs.just("crash")),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(STEP, min_size=1, max_size=40))
def test_counters_equal_a_recount_after_any_sequence(steps: list[tuple[object, ...]]) -> None:
    rig = small(Rig(Path("/nonexistent"), cfg=CFG, backend="memory"))
    other = small(Rig(Path("/nonexistent"), cfg=CFG, backend="memory"))  # the member a hand-over goes through
    now = 1_000.0
    for step in steps:
        kind = step[0]
        if kind == "seed":
            rig.frontier.add_seed(canon(f"http://{host(int(step[1]))}/"), now)  # type: ignore[call-overload]
        elif kind == "add":
            rig.frontier.add_many([canon(f"http://{host(int(step[1]))}/p{step[2]}")],  # type: ignore[call-overload]
                                  1, 0.5, now)
        elif kind == "lease":
            for _ in range(int(step[2])):  # type: ignore[call-overload]
                now = lease_one(rig, now, str(step[1]))
        elif kind == "block" and isinstance(step[1], str):  # a domain (rule 15)
            rig.frontier.block(step[1])
        elif kind == "block":  # by its name: a host with a port too
            rig.frontier.block(host(int(step[1])).partition(":")[0])  # type: ignore[call-overload]
        elif kind == "hand":  # the slice goes to the other member and comes back, its counts with it
            ids = [slice_of(host(int(step[1])))]  # type: ignore[call-overload]
            if rig.raw.in_flight_in(ids):
                continue
            other.frontier.adopt(rig.raw.export_slices(ids, now), now)
            rig.frontier.release_slices(ids)
            check(rig)
            rig.frontier.adopt(other.raw.export_slices(ids, now), now)
            other.frontier.release_slices(ids)
            check(other)
        elif kind == "commit":
            check(rig)
        elif kind == "throttle":
            rig.frontier.throttle_now(step[1], 0.5, now)
        elif kind == "wait":
            now += float(step[1])  # type: ignore[arg-type]
        else:
            rig.frontier.commit()
            rig.crash()
            rig.reopen(now)
            small(rig)
        check_gauges(rig, now)
    check(rig)
    rig.crash()
    rig.reopen(now)  # the counters come back from meta as the last commit wrote them
    check(rig)


def crawled(path: Path, cfg: Config = CFG) -> tuple[Rig, float]:
    """A frontier of :data:`HOSTS` hosts, three URLs each, 40 leases in, committed."""
    rig = small(Rig(path, cfg=cfg))
    now = 1_000.0
    for i in range(HOSTS):
        rig.frontier.add_many([canon(f"http://{host(i)}/p{k}") for k in range(3)], 1, 0.5, now)
    for _ in range(40):
        now = lease_one(rig, now, "ok")
    check(rig)
    return rig, now


def test_status_reads_the_counters_not_the_host_records(tmp_path: Path) -> None:
    rig, _ = crawled(tmp_path)
    counted = recount(rig)
    rig.crash()
    s = read_status(tmp_path / "frontier")
    assert (s.hosts, s.hosts_with_queue, s.queued, s.fetched) == tuple(counted.values())
    assert s.busiest == () and counted["fetched"] > 0
    full = read_status(tmp_path / "frontier", busiest=True)
    assert len(full.busiest) == min(10, counted["with_queue"]) and full.hosts == s.hosts


def test_data_without_the_counters_is_counted_once_on_open(tmp_path: Path) -> None:
    rig, now = crawled(tmp_path)
    rig.db.apply([Delete("meta", HOST_COUNTS)])  # as data written before the counters
    rig.db.commit()
    rig.crash()
    rig.reopen(now)  # counted at the open, once (a pass over the records); written with the next commit
    assert rig.db.get("meta", HOST_COUNTS) is None
    check(rig)


def test_status_of_a_running_node_reads_its_write_ahead_log(tmp_path: Path) -> None:
    """wal.py rule 6: a node's commits since its last LMDB commit are in its write-ahead log only; read
    while the frontier is open (as a running node's), status answers them, not the LMDB's older state
    (``polecat status`` of a live crawl said 0 fetched before)."""
    rig, _ = crawled(tmp_path, replace(CFG, frontier=FrontierConfig(working_hosts=100, log_mb=64)))
    counted = recount(rig)
    assert rig.db._in_lmdb < rig.db.seq  # the commits of crawled() went to the log (db.py rule 6)
    reader = ("import json, sys; from pathlib import Path; from polecat.frontier.status import read_status; "
              "s = read_status(Path(sys.argv[1])); "
              "print(json.dumps([s.hosts, s.hosts_with_queue, s.queued, s.fetched, s.commits, s.seen_urls, "
              "dict(s.done)]))")  # another process, as `polecat status` is (LMDB opens a dir once a process)
    got = subprocess.run([sys.executable, "-c", reader, str(tmp_path / "frontier")], capture_output=True,
                         text=True, timeout=60, check=True)
    hosts, with_queue, queued, fetched, commits, seen, outcomes = json.loads(got.stdout)
    assert (hosts, with_queue, queued, fetched) == tuple(counted.values())
    assert counted["fetched"] > 0 and commits == rig.db.seq
    assert seen == 3 * HOSTS
    assert outcomes == json.loads(rig.db.get("meta", b"done") or b"{}")


def test_status_keeps_the_logs_rows_of_the_tables_it_reads_only(tmp_path: Path) -> None:
    """wal.py rule 5, status.py ``_STATUS_LOGGED``: the log's host, queue and URL rows are not kept by
    status (issue 39: ~1 s of CPU at 1M hosts after a kill -9), yet it answers as a read keeping every
    table's does, the host records and URL records read where the freshness index cannot answer (other
    settings). Read while the frontier is open, from another process (LMDB opens a dir once a process)."""
    rig, now = crawled(tmp_path, replace(CFG, frontier=FrontierConfig(working_hosts=100, log_mb=64)))
    counted = recount(rig)
    assert rig.db._in_lmdb < rig.db.seq  # the commits of crawled() went to the log (db.py rule 6)
    reader = f"""
import json, sys
from pathlib import Path
from polecat.config import RefreshConfig
from polecat.frontier import status
from polecat.frontier.wal import NotOverlaid
frontier, now = Path(sys.argv[1]), {now!r}
refused = []
with status._snapshot(frontier, status._STATUS_TABLES, status._STATUS_LOGGED) as (_, snap, _):
    for table in ("hosts", "urls", "queue"):
        try:
            snap.get(table, b"x")
        except NotOverlaid:
            refused.append(table)
other = RefreshConfig(min_interval=RefreshConfig().min_interval * 2)  # not the index's settings
s = status.read_status(frontier, now=now)
print(json.dumps([refused, [s.hosts, s.hosts_with_queue, s.queued, s.fetched],
                  s == status._read_status(frontier, status._STATUS_TABLES, 10, None, now, busiest=False),
                  status.read_status(frontier, refresh=other, now=now)
                  == status._read_status(frontier, status._STATUS_TABLES, 10, other, now, busiest=False),
                  len(status.read_status(frontier, now=now, busiest=True).busiest)]))
"""
    got = subprocess.run([sys.executable, "-c", reader, str(tmp_path / "frontier")], capture_output=True,
                         text=True, timeout=60, check=True)
    refused, counts, same, same_other, busiest = json.loads(got.stdout)
    assert refused == ["hosts", "urls", "queue"]
    assert counts == list(counted.values())
    assert same and same_other and busiest == min(10, counted["with_queue"])


class CountingHosts(dict[str, HostState]):
    """:attr:`HostTable.hosts` that counts passes over it and records read by key."""

    passes = 0
    reads = 0

    def __iter__(self) -> Iterator[str]:
        self.passes += 1
        return super().__iter__()

    def items(self) -> Any:
        self.passes += 1
        return super().items()

    def values(self) -> Any:
        self.passes += 1
        return super().values()

    def __getitem__(self, host: str) -> HostState:
        self.reads += 1
        return super().__getitem__(host)


def test_a_domain_control_reads_only_the_hosts_it_matches() -> None:
    """Rule 15: a ``*.`` block or throttle over 2,000 hosts in memory reads the 20 it matches, with no pass
    over memory; ``*.test`` (one label) is the one that walks."""
    rig = Rig(Path("/nonexistent"), cfg=replace(CFG, frontier=FrontierConfig(working_hosts=10_000)),
              backend="memory")
    for start in range(0, 2_000, 500):  # a page's links are capped: four pages of them
        rig.frontier.add_many([canon(f"http://h{i}.d{i % 100}.test/") for i in range(start, start + 500)],
                              1, 0.5, 1_000.0)
    table = rig.raw._table
    assert len(table.hosts) == 2_000
    counting = CountingHosts(table.hosts)
    table.hosts = counting  # the test's own table: no other part reads it from here
    controls = Controls(table)
    controls.throttle_now("*.d7.test", 0.5, 1_001.0)
    assert (counting.passes, counting.reads) == (0, 20)
    dropped = controls.block("*.d8.test")
    assert dropped.value == 20 and (counting.passes, counting.reads) == (0, 40)
    controls.block("*.test")
    assert counting.passes == 1


def test_a_scrape_reads_no_host() -> None:
    """Rules 16-17: the stats and the host gauges of ``/metrics`` (ready, waiting, backing off,
    quarantined, known, with a queue) over 2,000 hosts in memory read counters and one heap head."""
    rig = Rig(Path("/nonexistent"), cfg=replace(CFG, frontier=FrontierConfig(working_hosts=10_000)),
              backend="memory")
    now = 1_000.0
    rig.frontier.add_many([canon(f"http://failing{i}.test/p{k}") for i in range(10) for k in range(3)],
                          1, 0.5, now)
    for _ in range(25):  # their robots.txt, then their pages fail
        now = lease_one(rig, now, "fail")
    for start in range(0, 1_990, 398):
        rig.frontier.add_many([canon(f"http://h{i}.d{i % 100}.test/") for i in range(start, start + 398)],
                              1, 0.5, now)
    table = rig.raw._table
    counting = CountingHosts(table.hosts)
    table.hosts = counting  # the test's own table: no other part reads it from here
    observe = Observation(table, rig.raw._intake)
    s = observe.stats(now)
    known, with_queue = observe.host_counts()
    quarantine = observe.quarantined_hosts()
    assert (counting.passes, counting.reads) == (0, 0)
    assert (known, with_queue) == (2_000, 2_000) and quarantine >= s.hosts_backoff > 0
    assert s.hosts_ready + s.hosts_waiting == 2_000
    check_gauges(rig, now)


def test_hosts_falling_due_together_are_counted_ready_in_bounded_steps() -> None:
    """Rule 17: 5,000 hosts due at one time (as the working set after an open) are moved to ready at most
    ADVANCE_STEP a call, each call going on from the last; the gauges then equal a pass over the hosts."""
    rig = Rig(Path("/nonexistent"), cfg=replace(CFG, frontier=FrontierConfig(working_hosts=10_000)),
              backend="memory")
    now = 1_000.0
    for start in range(0, 5_000, 500):  # a page brings 1,000 new hosts at most (max_new_hosts_per_page)
        rig.frontier.add_many([canon(f"http://h{i}.together.test/") for i in range(start, start + 500)],
                              1, 0.5, now)
    table = rig.raw._table
    assert len(table.due_heap) == 5_000 and not table.due
    popped = []
    while table.due_heap:
        before = len(table.due_heap)
        rig.raw.stats(now + 1.0)  # a scrape advances the counts (a lease call does the same)
        popped.append(before - len(table.due_heap))
    assert len(popped) > 1  # not all 5,000 in one call
    assert max(popped) <= ADVANCE_STEP and sum(popped) == 5_000 and len(popped) == -(-5_000 // ADVANCE_STEP)
    assert len(table.due) == 5_000
    check_gauges(rig, now + 1.0)
