"""The frontier's bounded working set (polecat/frontier/host_table.py rules 6-8): host records past
``frontier.working_hosts`` wait in LMDB, in the ``ready`` index by due time, and come back when due,
with every politeness rule kept (no lost next-allowed time, no URL lost or fetched twice)."""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.frontier import host_table
from polecat.frontier.host_table import READY_INDEX, HostTable
from polecat.frontier.records import Idle, Lease, Wait, decode_host
from polecat.frontier.slices import slice_of
from polecat.writes import Delete, Write
from tests.frontier_helpers import Rig, canon, done, politeness

pytestmark = pytest.mark.usefixtures("frontier_backend")

RATE = 1.0
LEAVES = 2


def config(working_hosts: int) -> Config:
    return Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=RATE),
                  frontier=FrontierConfig(working_hosts=working_hosts))


def seed(rig: Rig, hosts: range, now: float, *, commit_every: int = 500) -> None:
    for i in hosts:
        rig.frontier.add_seed(canon(f"http://h{i}.ws.test/"), now)
        if rig.db.pending >= commit_every:
            commit(rig)
    commit(rig)


def commit(rig: Rig) -> None:
    rig.frontier.commit()
    assert rig.raw.hosts_in_memory <= rig.cfg.frontier.working_hosts


class Crawl:
    """Drives a rig to the end with a fake clock: every ``/`` page links :data:`LEAVES` leaves; records
    every request's start per host."""

    def __init__(self, rig: Rig, now: float) -> None:
        self.rig = rig
        self.now = now
        self.starts: defaultdict[str, list[float]] = defaultdict(list)
        self.pages: Counter[str] = Counter()

    def run(self, *, max_leases: int = 10**6, commit_every: int = 200, held: int = 0) -> bool:
        """Lease and complete until the frontier is idle (True) or ``max_leases`` calls were made;
        commit every ``commit_every`` changes or 0.25 s of the clock, as the node does. ``held``: pages
        are released as their requests end (leasing.py rule 7) and completed later, up to ``held`` of
        them waiting at once (as pages wait for their content claims), the oldest first."""
        rig = self.rig
        committed = self.now
        waiting: deque[Lease] = deque()
        for _ in range(max_leases):
            if self.now >= committed + 0.25:
                commit(rig)
                committed = self.now
            got = rig.frontier.lease(self.now)
            if isinstance(got, Idle):
                return True
            if isinstance(got, Wait):
                if waiting:  # a released page's record comes before the clock moves on
                    rig.complete(waiting.popleft(), self.now)
                    continue
                assert got.until is not None
                self.now = max(self.now, got.until)
                continue
            assert isinstance(got, Lease)
            assert got.not_before <= self.now
            self.starts[got.host].append(self.now)
            if got.kind == "robots":
                rig.complete_robots(got, self.now)
            else:
                self.pages[got.url] += 1
                if got.url.endswith(".test/"):
                    for k in range(LEAVES):
                        rig.frontier.add(canon(f"{got.url}leaf{k}"), 1, 0.5, self.now)
                if held:
                    rig.raw.release_request(got, done(self.now), self.now + 0.01)
                    waiting.append(got)
                    if len(waiting) > held:
                        rig.complete(waiting.popleft(), self.now)
                else:
                    rig.complete(got, self.now)
            if rig.db.pending >= commit_every:
                commit(rig)
        return False

    def check(self, hosts: int) -> None:
        assert len(self.pages) == hosts * (1 + LEAVES), "a URL was never fetched"
        assert set(self.pages.values()) == {1}, "a URL was fetched twice"
        for host, starts in self.starts.items():
            gaps = [b - a for a, b in pairwise(starts)]
            assert min(gaps, default=RATE) >= 1 / RATE - 1e-9, (host, starts)


@pytest.mark.lmdb_only  # the fake's sorted key lists make 100,000 inserts slow
@pytest.mark.slow
def test_the_bound_holds_with_100000_hosts_queued(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=config(1000))
    seed(rig, range(100_000), 0.0, commit_every=2000)
    assert rig.raw.queued == 100_000
    assert rig.raw.stats(0.0).hosts == 100_000
    assert rig.db.count("ready") >= 100_000 - 1000  # the rest wait in LMDB, by due time
    got = rig.frontier.lease(1.0)
    assert isinstance(got, Lease) and got.host == "h0.ws.test"  # the earliest seeded first, read back


def crawled(tmp_path: Path, hosts: int) -> Rig:
    """``hosts`` hosts crawled to the end through a working set of 100, each URL once and politely."""
    rig = Rig(tmp_path, cfg=config(100))
    seed(rig, range(hosts), 0.0)
    crawl = Crawl(rig, 0.0)
    assert crawl.run()
    crawl.check(hosts)
    assert rig.raw.queued == 0
    return rig


def test_a_crawl_through_a_small_working_set_fetches_everything_once_and_politely(tmp_path: Path) -> None:
    rig = crawled(tmp_path, 1500)
    table = rig.raw._table  # what is left in memory at the end: nothing scheduled, no stale entries kept
    assert not table.heap and not table.warm_heap and len(table.warm) <= rig.cfg.frontier.working_hosts


def test_the_cut_drops_a_batch_a_commit_and_the_crawl_still_fetches_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host table rule 18 with a batch of 8 and a bound of 100: each commit of the cut drops 8 records at
    most (more only past the bound), the cut goes on at the next commits down to 75, the bound holds at
    every commit, and the crawl fetches every URL once, politely, with the heaps' stale entries left."""
    monkeypatch.setattr(host_table, "CUT_BATCH", 8)
    cuts: list[tuple[int, int]] = []
    evict = HostTable._evict

    def counted(table: HostTable, keep: int, out: list[Write]) -> int:
        before = len(table.hosts)
        dropped = evict(table, keep, out)
        cuts.append((before, dropped))
        return dropped

    monkeypatch.setattr(HostTable, "_evict", counted)
    crawled(tmp_path, 600)
    assert all(dropped <= max(8, before - 100 + 1) for before, dropped in cuts)
    assert sum(dropped == 8 and before - 8 > 75 for before, dropped in cuts) >= 2  # went on at later commits


def test_a_feed_with_no_leases_keeps_the_heaps_stale_entries_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host table rule 20: URLs pushed round after round over 1,200 hosts through a working set of 400,
    nothing leased meanwhile, take dropped hosts back into memory a few a commit (too few for rule 18's
    rebuild) and schedule each again; the heaps stay within twice the scheduled hosts and the slack at
    every commit (rebuilt, not grown by an entry a host taken back), and the crawl after fetches each URL
    once, politely."""
    monkeypatch.setattr(host_table, "CUT_BATCH", 8)  # rule 18's own rebuild stays out of the way
    monkeypatch.setattr(host_table, "HEAP_SLACK", 50)
    rebuilds = 0
    rebuild = HostTable._rebuild_heaps

    def counted(table: HostTable) -> None:
        nonlocal rebuilds
        rebuilds += 1
        rebuild(table)

    monkeypatch.setattr(HostTable, "_rebuild_heaps", counted)
    rig = Rig(tmp_path, cfg=config(400))
    table = rig.raw._table
    pushed = [canon(f"http://h{i}.ws.test/p{r}") for r in range(4) for i in range(1200)]
    for url in pushed:
        rig.frontier.add(url, 1, 0.5, 0.0)
        if rig.db.pending >= 40:
            commit(rig)
            heaps = (table.heap, table.due_heap, table.warm_heap)
            assert max(map(len, heaps)) <= 2 * len(table.scheduled) + 50
    commit(rig)
    assert rebuilds >= 2 and rig.raw.queued == len(pushed)
    crawl = Crawl(rig, 1.0)
    assert crawl.run()
    assert crawl.pages.keys() == set(pushed) and set(crawl.pages.values()) == {1}
    for host, starts in crawl.starts.items():
        assert min((b - a for a, b in pairwise(starts)), default=RATE) >= 1 / RATE - 1e-9, host


def test_pages_released_before_their_records_are_each_fetched_once_politely(tmp_path: Path) -> None:
    """Leasing rule 7 through a small working set: a host with a released URL stays in memory (host
    table rule 6), and no released URL is leased again before its record."""
    rig = Rig(tmp_path, cfg=config(100))
    seed(rig, range(600), 0.0)
    crawl = Crawl(rig, 0.0)
    assert crawl.run(held=150)
    crawl.check(600)
    assert rig.raw.queued == 0 and not rig.raw._table.finishing


def test_a_restart_brings_back_hosts_in_memory_and_out_and_waits_one_interval(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=config(100))
    seed(rig, range(600), 0.0)
    crawl = Crawl(rig, 0.0)
    assert not crawl.run(max_leases=300)  # some hosts in rotation, some in flight at the crash
    rig.crash()
    reopened = crawl.now + 0.5
    rig.reopen(reopened)
    after = Crawl(rig, reopened)
    assert after.run()
    assert len(crawl.pages.keys() | after.pages.keys()) == 600 * (1 + LEAVES)
    assert set(after.pages.values()) == {1}
    for host, starts in after.starts.items():
        assert starts[0] >= reopened + 1 / RATE - 1e-9, host  # politeness rule 7, in memory or not


def test_data_without_the_ready_index_gets_it_on_open(tmp_path: Path) -> None:
    """As written by 0.2.0: host records, no ``ready`` or ``resident`` rows, no marker."""
    rig = Rig(tmp_path, cfg=config(50_000))
    seed(rig, range(400), 0.0)
    rig.db.apply([Delete("resident", key) for key, _ in rig.db.items("resident")]
                 + [Delete("meta", READY_INDEX)])
    rig.db.commit()
    assert rig.db.count("resident") == rig.db.count("ready") == 0
    rig.crash()
    rig.cfg = config(100)
    rig.reopen(10.0)
    assert rig.db.get("meta", READY_INDEX) is not None and rig.db.count("ready") == 400
    crawl = Crawl(rig, 10.0)
    assert crawl.run()
    crawl.check(400)


def test_hosts_blocked_or_released_out_of_memory(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=config(100))
    seed(rig, range(500), 0.0)
    assert rig.raw.hosts_in_memory < 500
    assert rig.frontier.block("*.ws.test") == rig.raw.hosts_in_memory  # one queued URL each, in memory
    crawl = Crawl(rig, 0.0)
    assert crawl.run()
    assert not crawl.starts and rig.raw.queued == 0  # the others dropped their queues when read back
    rig2 = Rig(tmp_path / "two", cfg=config(100))
    seed(rig2, range(500), 0.0)
    slices = {slice_of(f"h{i}.ws.test") for i in range(500)}
    rig2.db.apply(rig2.raw.release_slices(slices))
    assert rig2.raw.queued == 0 and rig2.raw.stats(0.0).hosts == 0
    answers = [rig2.frontier.lease(1.0) for _ in range(10)]  # the stale rows are dropped as they are read
    assert not any(isinstance(got, Lease) for got in answers) and isinstance(answers[-1], Idle)
    assert rig2.db.count("ready") == 0


def test_a_throttle_set_while_a_host_is_out_of_memory_applies_when_it_comes_back(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=replace(config(100), scope=ScopeConfig(mode="any")))
    seed(rig, range(300), 0.0)
    rig.frontier.throttle_now("*.ws.test", 0.1, 5.0)
    crawl = Crawl(rig, 5.0)
    assert not crawl.run(max_leases=400)
    assert crawl.starts and all(s[0] >= 5.0 + 10.0 - 1e-9 for s in crawl.starts.values())


def test_a_batch_of_seeds_decides_as_one_seed_at_a_time_would(tmp_path: Path) -> None:
    """intake.py rule 7: the batch answers each seed in order; the tables end up the same (host limits
    as they were before the batch: a.test is full before it)."""
    cfg = replace(config(100), scope=ScopeConfig(mode="host", max_url_length=40, max_queue_per_host=2))
    urls = [canon(u) for u in ("http://e.test/", "http://b.test/", "http://e.test/", "http://a.test/x",
                               "http://e.test/y", "http://c.test/" + "z" * 40, "http://d.blocked.test/")]
    one, batch = Rig(tmp_path / "one", cfg=cfg), Rig(tmp_path / "batch", cfg=cfg)
    for rig in (one, batch):
        rig.frontier.block("*.blocked.test")
        for before in ("http://b.test/", "http://a.test/", "http://a.test/full"):
            rig.frontier.add_seed(canon(before), 0.0)
    singles = [one.frontier.add_seed(u, 1.0) for u in urls]
    assert batch.frontier.add_seeds(urls, 1.0) == singles == [
        "accepted", "seen", "seen", "host_queue_full", "accepted", "url_too_long", "blocked"]
    for table in ("queue", "seen", "ops"):
        assert [k for k, _ in batch.db.items(table)] == [k for k, _ in one.db.items(table)], table
    assert batch.raw.queued == one.raw.queued == 5
    assert batch.raw.stats(1.0).rejected == one.raw.stats(1.0).rejected


def test_short_of_descriptors_a_warm_host_goes_before_cold_ones_due_earlier(tmp_path: Path) -> None:
    """leasing.py rule 6: a host whose last request just ended (its connection likely open) first."""

    def rig_with_a_warm_host(name: str) -> Rig:
        rig = Rig(tmp_path / name, cfg=config(1000))
        rig.frontier.add_seed(canon("http://warm.test/"), 0.0)
        robots = rig.frontier.lease(0.0)
        assert isinstance(robots, Lease) and robots.host == "warm.test"
        rig.complete_robots(robots, 0.0)
        for i in range(10):
            rig.frontier.add_seed(canon(f"http://cold{i}.test/"), 0.5)  # due before warm.test's page
        return rig

    plain = rig_with_a_warm_host("plain").frontier.lease(2.0)
    assert isinstance(plain, Lease) and plain.host == "cold0.test"
    rig = rig_with_a_warm_host("short")
    warm = rig.frontier.lease(2.0, prefer_warm=True)
    assert isinstance(warm, Lease) and (warm.host, warm.kind) == ("warm.test", "page")
    cold = rig.frontier.lease(2.0, prefer_warm=True)  # none warm left due: the earliest, not a stall
    assert isinstance(cold, Lease) and cold.host == "cold0.test"
    later = rig.frontier.lease(2.0 + 31.0, prefer_warm=True)  # warm.test is still in flight; cold1 next
    assert isinstance(later, Lease) and later.host == "cold1.test"


def test_seeds_of_new_hosts_past_the_bound_are_filed_cold_and_all_fetched(tmp_path: Path) -> None:
    """host_table.py rule 10: a batch of seeds past three quarters of the bound writes the new hosts'
    records and ``ready`` rows at once (no eviction pass), a host twice in one batch gets one record, and
    the crawl still fetches every URL once, politely."""
    rig = Rig(tmp_path, cfg=config(100))
    urls = [canon(f"http://h{i}.ws.test/") for i in range(400)] + [canon("http://h399.ws.test/again")]
    assert rig.frontier.add_seeds(urls, 0.0) == ["accepted"] * 401
    assert rig.raw.hosts_in_memory == 75  # three quarters of 100: the other 325 never entered memory
    assert rig.db.count("ready") == rig.db.count("hosts") == 325  # written with the batch's decision
    queued = Counter(decode_host(raw).queued for _, raw in rig.db.items("hosts"))
    assert queued == {1: 324, 2: 1}  # h399's two seeds in one record (one record encoding shared by the rest)
    commit(rig)
    table = rig.raw._table  # the counters of rule 12, moved once for the batch's cold hosts
    assert (table.known_hosts, table.with_queue, table.queued) == (400, 400, 401)
    assert rig.raw.stats(0.0).hosts == 400 and rig.raw.queued == 401
    crawl = Crawl(rig, 0.0)
    assert crawl.run()
    assert crawl.pages[canon("http://h399.ws.test/again")] == 1
    del crawl.pages[canon("http://h399.ws.test/again")]
    crawl.check(400)


@pytest.mark.lmdb_only  # 20,000 hosts: the fake's sorted key lists make it slow
@pytest.mark.slow
def test_parked_hosts_leave_memory_and_come_back_to_the_next_run(tmp_path: Path) -> None:
    """host_table.py rule 11, counted rather than timed: 20,000 seed hosts that all fail (each parked at
    its first request, as a dead name is) leave at most the working set's records, heap entries and park
    reasons in memory; every one is asked once in the run, and the next run asks each again. Twenty
    working sets' worth of parked hosts pass through memory, in ten batches of seeds each past it (100,000
    hosts took ~100 s of a loaded suite for the same paths; the 100,000-host bound is the test above)."""
    rig = Rig(tmp_path, cfg=config(1000))
    hosts = 20_000
    for start in range(0, hosts, 2000):
        rig.frontier.add_seeds([canon(f"http://h{i}.ws.test/") for i in range(start, start + 2000)], 0.0)
        commit(rig)
    table = rig.raw._table
    asked: Counter[str] = Counter()
    now = 1.0
    while not isinstance(got := rig.frontier.lease(now), Idle):
        if isinstance(got, Wait):  # memory full of parked hosts: the node's next commit drops them
            assert got.until is not None
            now = max(now, got.until)
            commit(rig)
            continue
        assert isinstance(got, Lease)
        asked[got.host] += 1
        failed = replace(done(now, failed=True, status=None, outcome="failed"), park="dns: NXDOMAIN")
        rig.db.apply(rig.raw.complete(got, failed, now + 0.01))
        if rig.db.pending >= 500:
            commit(rig)
            held = (table.hosts, table.parked, table.scheduled, table.heap, table.warm)
            assert max(map(len, held)) <= 1000
    commit(rig)
    assert len(asked) == hosts and set(asked.values()) == {1}
    assert rig.raw.stats(now).hosts_parked == hosts and len(rig.frontier.parked_hosts()) <= 1000
    rig.crash()
    rig.reopen(now + 1.0)
    assert rig.db.count("ready") + rig.raw.hosts_in_memory == hosts and rig.raw.stats(now).hosts_parked == 0
    got = rig.frontier.lease(now + 1.0)
    assert isinstance(got, Wait) and got.until is not None  # each at its record's own next-allowed time
    got = rig.frontier.lease(got.until)
    assert isinstance(got, Lease) and got.kind == "robots"
