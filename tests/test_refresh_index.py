"""The refresh indexes (polecat/frontier/refresh_index.py): the scan reads the due rows only and queues the
same URLs as a pass over every finished URL would; the freshness counters equal a full recount; each
periodic job's operations do not grow with a 10x larger frontier."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.config import Config, RefreshConfig
from polecat.frontier.keys import queue_key_num, url_key
from polecat.frontier.records import Lease, UrlRecord, Wait
from polecat.frontier.refresh import Freshness, History, observe
from polecat.frontier.refresh_index import INDEX_KEY
from polecat.frontier.refresh_queue import HostScan, RefreshQueue
from polecat.frontier.status import read_status
from polecat.hosts import host_key
from polecat.writes import Decided, Delete, Put, Write
from tests.frontier_helpers import Rig, canon, done


class FullScan(RefreshQueue):
    """The scan before the index (0.3.0): one pass over every finished URL, the oracle."""

    def requeue_due(self, now: float, limit: int = 100_000,
                    window: float | None = None) -> Decided[tuple[int, Freshness]]:
        hosts: dict[str, HostScan] = {}
        fresh, policy = Freshness(), self._policy
        for key, raw in self._db.items("urls"):
            rec = UrlRecord.decode(raw)
            if not rec.history:
                continue
            host = host_key(rec.url)
            h = History.from_hex(rec.history)
            policy.tally(fresh, host, rec.url, h, rec.importance, now)
            scan = hosts.setdefault(host, HostScan())
            index = scan.add(policy.rate(h, None, h.last_visit), rec.importance)
            due = rec.due
            if due is not None and h.prior_rate >= 0.0:
                due = policy.due_at(host, h, None, 0.0) or due
            if due is not None and due <= now:
                scan.due.append((index, h, key, rec))
        out: list[Write] = []
        queued = sum(self._requeue_host(host, scan, now, window, out)
                     for host, scan in hosts.items() if scan.due)
        return Decided((queued, fresh), out)


def effect(writes: list[Write], rig: Rig) -> tuple[list[tuple[bytes, bytes]], list[tuple[str, bytes, bytes]]]:
    """What a scan did, whatever order it met the hosts in: the URL records written, the URLs queued
    (their hosts, their keys' rank and depth, their rows' values: a host's number and the FIFO seq follow
    the order the scan met the hosts in, keys.py rule 1)."""
    names = {st.num: host for host, st in rig.raw._table.hosts.items()}
    urls = sorted((w.key, w.value) for w in writes if isinstance(w, Put) and w.table == "urls")
    queued = sorted((names[queue_key_num(w.key)], w.key[6:-6], w.value)
                    for w in writes if isinstance(w, Put) and w.table == "queue")
    return urls, queued


def seeded(rig: Rig, records: list[UrlRecord]) -> None:
    """Write finished URLs as completions of an earlier release left them, then open (the index is
    built from them, as for data of 0.3.0)."""
    rig.db.apply([Put("urls", url_key(rec.url), rec.encode()) for rec in records])
    rig.db.apply([Delete("meta", INDEX_KEY)])  # as before the index: the open builds it
    rig.db.commit()
    rig.crash()
    rig.reopen(rig.now)


def random_records(rng: random.Random, hosts: int, per_host: int) -> list[UrlRecord]:
    out = []
    for h in range(hosts):
        for i in range(per_host):
            hist, at = History(), rng.uniform(1.0, 50.0)
            for _ in range(rng.randint(1, 5)):
                hist = observe(hist, at, rng.random() < 0.5)
                at += rng.uniform(5.0, 400.0)
            due = None if rng.random() < 0.2 else hist.last_visit + rng.uniform(0.0, 500.0)
            out.append(UrlRecord(canon(f"http://h{h}.test/p{i}"), "fetched", "200", hist.last_visit,
                                 history=hist.encode().hex(), due=due,
                                 importance=rng.choice((0.25, 0.5, 1.0))))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), hosts=st.integers(1, 4), per_host=st.integers(1, 6),
       share=st.sampled_from((0.3, 1.0)), window=st.sampled_from((None, 5.0, 60.0)))
def test_the_index_queues_what_a_full_scan_queues(seed: int, hosts: int, per_host: int, share: float,
                                                  window: float | None) -> None:
    refresh = RefreshConfig(min_interval=10.0, max_interval=2_000.0, default_interval=100.0, min_visits=2,
                            refresh_share=share, never=("h3.test",), important_min=0.5)
    cfg = Config(scope=replace(Config().scope, mode="any"), refresh=refresh)
    rng = random.Random(seed)
    records = random_records(rng, hosts, per_host)
    indexed = Rig(Path("unused-a"), cfg=cfg, backend="memory")
    seeded(indexed, records)
    with mock.patch("polecat.frontier.frontier.RefreshQueue", FullScan):
        scanned = Rig(Path("unused-b"), cfg=cfg, backend="memory")
        seeded(scanned, records)
    assert isinstance(scanned.raw._refresh, FullScan)
    now = 0.0
    for _ in range(4):
        now += rng.uniform(50.0, 600.0)
        a = indexed.raw.requeue_due(now, window=window)
        b = scanned.raw.requeue_due(now, window=window)
        assert a.value == b.value and effect(a.writes, indexed) == effect(b.writes, scanned)
        assert indexed.raw.freshness(now) == indexed.raw._refresh.index.recount(now)
        indexed.db.apply(a.writes)
        scanned.db.apply(b.writes)
        # Fetch what was queued in both, each URL changed or not alike, so the histories move on.
        for _ in range(60):
            la, lb = indexed.frontier.lease(now), scanned.frontier.lease(now)
            assert type(la) is type(lb)
            if not isinstance(la, Lease):
                if not isinstance(la, Wait) or la.until is None:
                    break
                now = max(now + 0.01, la.until)
                continue
            assert isinstance(lb, Lease) and la.url == lb.url
            if la.kind == "robots":
                indexed.complete_robots(la, now)
                scanned.complete_robots(lb, now)
            else:
                result = replace(done(now), changed=rng.random() < 0.5)
                indexed.db.apply(indexed.raw.complete(la, result, now + 0.01))
                scanned.db.apply(scanned.raw.complete(lb, result, now + 0.01))
            now += 0.02
        if rng.random() < 0.5:
            for rig in (indexed, scanned):
                rig.raw.commit()


def test_a_commit_and_restart_keep_the_counters(tmp_path: Path) -> None:
    cfg = Config(scope=replace(Config().scope, mode="any"),
                 refresh=RefreshConfig(min_interval=10.0, max_interval=1_000.0, min_visits=1))
    rig = Rig(tmp_path, cfg=cfg)
    seeded(rig, random_records(random.Random(3), 3, 5))
    index = rig.raw._refresh.index
    for now in (100.0, 400.0, 900.0):
        assert rig.raw.freshness(now) == index.recount(now)
        rig.raw.commit()
    rig.crash()
    rig.reopen(900.0)
    index = rig.raw._refresh.index
    assert rig.raw.freshness(1_500.0) == index.recount(1_500.0)
    assert rig.raw.freshness(1_000.0) == index.recount(1_000.0)  # the clock stepped back: a recount


def scan_reads(per_host: int, tmp_path: Path) -> tuple[int, int]:
    """Rows a refresh scan and the freshness figures read, with ``per_host`` finished URLs on each of
    100 hosts, and 2 hosts of one URL due."""
    cfg = Config(scope=replace(Config().scope, mode="any"),
                 refresh=RefreshConfig(min_interval=10.0, max_interval=100_000.0, min_visits=1))
    rig = Rig(tmp_path, cfg=cfg, backend="memory")
    records = []
    for h in range(100):  # seen unchanged over 2,000 s: next due about 4,000 s after the last visit
        for i in range(per_host):
            hist = History()
            for at in (10.0, 1_010.0, 2_010.0):
                hist = observe(hist, at, False)
            records.append(UrlRecord(canon(f"http://h{h}.test/p{i}"), "fetched", "200", hist.last_visit,
                                     history=hist.encode().hex(), due=hist.last_visit + 4_000.0))
    for h in range(2):  # changed at each visit: due at the 10 s floor
        hist = observe(observe(History(), 1.0, True), 2.0, True)
        records.append(UrlRecord(canon(f"http://x{h}.test/"), "fetched", "200", 2.0,
                                 history=hist.encode().hex(), due=2.0))
    seeded(rig, records)
    index = rig.raw._refresh.index
    rig.raw.freshness(60.0)
    rig.raw.commit()
    index.reads = 0
    queued, _ = rig.frontier.requeue_due(2_100.0)
    assert queued == 2
    return index.reads, len(records)


def test_a_scan_reads_what_is_due_not_what_is_held(tmp_path: Path) -> None:
    small, held_small = scan_reads(10, tmp_path / "a")
    large, held_large = scan_reads(100, tmp_path / "b")
    assert held_large > 9 * held_small
    assert small == large <= 10  # two due rows, two hosts of one row each, the figures' head rows


def test_status_reads_the_counters_not_every_url(tmp_path: Path) -> None:
    refresh = RefreshConfig(min_interval=10.0, max_interval=1_000.0, min_visits=1)
    rig = Rig(tmp_path, cfg=Config(scope=replace(Config().scope, mode="any"), refresh=refresh))
    seeded(rig, random_records(random.Random(5), 4, 5))
    rig.raw.freshness(300.0)
    rig.raw.commit()
    index = rig.raw._refresh.index
    times = (300.0, 700.0, 2_000.0, 100.0)
    expected = {now: index.recount(now) for now in times}
    revisited = index.counts.revisited
    rig.crash()  # closed: status opens the data dir as another process would
    for now in times[:3]:
        with mock.patch("polecat.frontier.status.UrlRecord.decode", side_effect=AssertionError("a pass")):
            got = read_status(tmp_path / "frontier", refresh=refresh, now=now)
        assert got.freshness == expected[now] and got.revisited == revisited > 0
    # Other settings, or a time before the counters' cursor: counted from the URL records.
    other = read_status(tmp_path / "frontier", refresh=replace(refresh, min_interval=20.0), now=700.0)
    assert other.freshness.tracked == expected[700.0].tracked
    assert read_status(tmp_path / "frontier", refresh=refresh, now=100.0).freshness == expected[100.0]


def test_the_open_builds_the_index_across_lmdb_commits(tmp_path: Path) -> None:
    """refresh_index.py rule 6, db.py rule 16: the open's build hands its writes over between slices, and
    the open commits them to the LMDB as they grow (here every batch: ``log_mb`` 0), so a big frontier's
    build is not held in memory whole; the index built so equals a recount."""
    cfg = Config(scope=replace(Config().scope, mode="any"), frontier=replace(Config().frontier, log_mb=0.0),
                 refresh=RefreshConfig(min_interval=10.0, max_interval=1_000.0, min_visits=1))
    rig = Rig(tmp_path, cfg=cfg)
    records = random_records(random.Random(5), 40, 5)
    rig.db.apply([Put("urls", url_key(rec.url), rec.encode()) for rec in records])
    rig.db.apply([Delete("meta", INDEX_KEY)])  # as before the index: the open builds it
    rig.db.commit()
    before = rig.db.seq
    rig.crash()
    with mock.patch("polecat.frontier.refresh_index.REBUILD_BATCH", 20):
        rig.reopen(rig.now)
    assert rig.db.seq - before >= 200 * 3 // 20 // 2  # LMDB commits during the build, not one at its end
    index = rig.raw._refresh.index
    assert not index.stale and rig.raw.freshness(900.0) == index.recount(900.0)
    assert rig.db.count("refresh") == sum(1 for rec in records if rec.history)
