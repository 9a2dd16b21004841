"""The node's loop runs the frontier's decisions: fake clock, fake fetcher, in-memory store, no sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from polecat import Crawler
from polecat.cluster.batch import Batch, HandoffUrl
from polecat.cluster.handoff import Handoff
from polecat.cluster.link import ClusterLink
from polecat.cluster.membership import Member
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver
from polecat.config import Config, config_from_mapping
from polecat.dedup.bloom import ScalableBloom
from polecat.errors import PolecatError
from polecat.frontier.opener import open_frontier
from polecat.frontier.records import Completion, Lease
from polecat.frontier.traps import is_probe
from polecat.node import commits
from polecat.testing.cluster import FakeMembership, FakeTransport
from polecat.testing.fakes import Canned, FakeClock, FakeFetcher, MemoryPageStore
from polecat.writes import Write


def page(*links: str, text: str = "text of a page") -> Canned:
    anchors = "".join(f'<a href="{u}">link</a>' for u in links)
    return Canned(200, f"<html><body><p>{text}</p>{anchors}</body></html>".encode())


async def test_loop_fetches_every_page_once_robots_first(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.0005)
    fetcher = FakeFetcher(clock, {
        "http://a.test/": page("/1", "/2", "http://b.test/x"),
        "http://a.test/1": page("/2", "/"),
        "http://a.test/2": page(),
        "http://b.test/": page("/x"),
        "http://b.test/x": Canned(200, b"plain", (("Content-Type", "text/plain"),)),
        "http://b.test/robots.txt": Canned(200, b"User-agent: *\nDisallow: /private\n",
                                           (("Content-Type", "text/plain"),)),
    })
    store = MemoryPageStore()
    cfg = config_from_mapping({
        "data_dir": str(tmp_path), "scope": {"seeds": ["http://a.test/", "http://b.test/"], "mode": "host"},
        "politeness": {"rate": 200.0}, "frontier": {"commit_ms": 20.0},
    })
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=store) as crawler:
        stats = await crawler.run()
    calls = Counter(fetcher.calls)
    assert max(calls.values()) == 1
    assert set(calls) == {"http://a.test/robots.txt", "http://b.test/robots.txt", "http://a.test/",
                          "http://a.test/1", "http://a.test/2", "http://b.test/", "http://b.test/x"}
    for host in ("a.test", "b.test"):
        mine = [u for u in fetcher.calls if f"//{host}/" in u]
        assert mine[0] == f"http://{host}/robots.txt"
    assert stats.politeness_violations == 0 and stats.queued == 0
    assert all(store.history(u) for u in calls if not u.endswith("/robots.txt")) and store.flushes >= 1
    # The robots answers were recorded by the frontier: a second run asks for none again.
    fetcher.calls.clear()
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=store) as crawler:
        crawler.add_seed("http://a.test/fresh")
        await crawler.run()
    assert fetcher.calls == ["http://a.test/fresh"]


class SlowFlushStore(MemoryPageStore):
    """A store whose flush takes a while (in the checkpoint's worker thread) and says what it covered."""

    def __init__(self) -> None:
        super().__init__()
        self.durable = 0
        """Records made durable by the last finished flush (a prefix of the log)."""

    def flush(self) -> None:
        covered = len(self.log)  # the batch is taken at the start; later puts wait for the next flush
        time.sleep(0.005)
        self.durable = covered
        super().flush()


def hosts_of_pages(data_dir: Path, n_hosts: int, commit_ops: int) -> tuple[dict[str, Canned], Config]:
    """``n_hosts`` hosts of a root page linking 8 pages, and a config that checkpoints every few ops."""
    hosts = [f"h{i}.test" for i in range(n_hosts)]
    pages = {f"http://{h}/": page(*(f"/p{j}" for j in range(8))) for h in hosts}
    # Distinct pages: identical ones would make each host a soft-404 suspect and add probe fetches.
    pages |= {f"http://{h}/p{j}": page(text=f"page {j} of {h}") for h in hosts for j in range(8)}
    cfg = config_from_mapping({
        "data_dir": str(data_dir), "scope": {"seeds": [f"http://{h}/" for h in hosts], "mode": "host"},
        "politeness": {"rate": 1000.0}, "frontier": {"commit_ms": 1.0, "commit_ops": commit_ops},
    })
    return pages, cfg


async def test_commit_covers_only_pages_the_flush_made_durable(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 12, commit_ops=8)
    fetcher = FakeFetcher(clock, pages)
    store = SlowFlushStore()
    completed: list[str] = []
    commits = 0
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=store) as crawler:
        frontier = crawler.frontier
        complete, prepare = frontier.complete, frontier.prepare_commit

        def recording_complete(lease: Lease, result: Completion, now: float) -> list[Write]:
            if lease.kind == "page" and not is_probe(lease.url):  # a soft-404 probe stores nothing
                completed.append(lease.url)
            return complete(lease, result, now)

        def checked_commit() -> list[Write]:  # what a commit holds is fixed here: nothing is written after it
            nonlocal commits
            commits += 1
            # Pages that write a store record (not, e.g., a soft-404 probe) must have it durable.
            stored = {r.url for r in store.log}
            durable = {r.url for r in store.log[: store.durable]}
            assert set(completed) & stored <= durable, (set(completed) & stored) - durable
            return prepare()

        frontier.complete = recording_complete  # type: ignore[method-assign]
        frontier.prepare_commit = checked_commit  # type: ignore[method-assign]
        stats = await crawler.run()
    assert stats.queued == 0 and set(pages) <= set(completed) and commits > 5


async def gate_during(tmp_path: Path, lmdb_commits: bool) -> list[tuple[bool, bool]]:
    """A crawl whose every periodic frontier commit is an LMDB commit (``lmdb_commits``) or a log append
    (polecat/frontier/db.py rule 6); per commit, seen from the writer thread while it runs: whether the
    loop ran a callback meanwhile, and whether the frontier's gate was open then."""
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 6, commit_ops=8)
    seen: list[tuple[bool, bool]] = []
    fetcher = FakeFetcher(clock, pages)
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        db: Any = crawler._db
        loop, gate = asyncio.get_running_loop(), crawler._commits.frontier_free

        def watch() -> None:
            # A periodic commit (the final ones run on the loop); a blocked loop is seen once.
            if crawler._commits.periodic and all(ok for ok, _ in seen):
                ran, gate_open = threading.Event(), []
                loop.call_soon_threadsafe(lambda: (gate_open.append(gate.is_set()), ran.set()))
                seen.append((ran.wait(2), bool(gate_open) and gate_open[0]))

        if lmdb_commits:
            db.log_bytes = 0
            commit_txn = db._writer._commit
            db._writer._commit = lambda *args: (watch(), commit_txn(*args))[1]
        else:
            db.log_bytes = 1 << 30  # a log no commit of the test fills: every commit a log append
            append = db.wal.append
            db.wal.append = lambda *args: (watch(), append(*args))[1]
        stats = await crawler.run()
    assert stats.queued == 0 and len(seen) > 3
    return seen


async def test_the_frontier_commit_runs_while_the_loop_goes_on_and_the_frontier_waits(tmp_path: Path) -> None:
    seen = await gate_during(tmp_path, lmdb_commits=True)
    assert seen == [(True, False)] * len(seen)  # the loop ran during every LMDB commit; the frontier waited


async def test_frontier_calls_go_on_during_a_commit_that_is_a_log_append(tmp_path: Path) -> None:
    """commits.py rule 2: a log append leaves the transaction to the loop: the gate stays open."""
    seen = await gate_during(tmp_path, lmdb_commits=False)
    assert seen == [(True, True)] * len(seen)


def test_crawler_methods_before_open_raise_a_clear_error(tmp_path: Path) -> None:
    crawler = Crawler(config_from_mapping({"data_dir": str(tmp_path)}))
    for call in (lambda: crawler.add_seed("http://a.test/"), lambda: crawler.block("a.test"),
                 crawler.stats, lambda: crawler.frontier):
        with pytest.raises(PolecatError, match="crawler is not open"):
            call()
    with pytest.raises(AttributeError, match="no_such"):
        crawler.no_such  # type: ignore[attr-defined]  # noqa: B018


async def test_unblock_and_unthrottle_through_the_crawler(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.0005)
    fetcher = FakeFetcher(clock, {"http://a.test/": page("/1"), "http://a.test/1": page()})
    cfg = config_from_mapping({"data_dir": str(tmp_path), "scope": {"mode": "any"},
                               "politeness": {"rate": 200.0}})
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        crawler.block("*.test")
        crawler.throttle("a.test", 50.0)
        assert crawler.add_seed("http://a.test/") == "blocked"
        assert crawler.unblock("*.test") and not crawler.unblock("*.test")
        assert crawler.frontier.host_rate("a.test") == 50.0
        assert crawler.unthrottle("a.test") and not crawler.unthrottle("a.test")
        assert crawler.frontier.host_rate("a.test") == 200.0
        assert crawler.add_seed("http://a.test/") == "accepted"
        await crawler.run()
    assert fetcher.calls == ["http://a.test/robots.txt", "http://a.test/", "http://a.test/1"]
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        assert crawler.frontier.blocks() == [] and crawler.frontier.throttles() == []  # persisted


class BrokenFlushStore(MemoryPageStore):
    """A store whose periodic flush (in the checkpoint's worker thread) hits a bug after the first one."""

    def flush(self) -> None:
        if self.flushes >= 1:
            raise RuntimeError("flush bug")
        super().flush()


async def test_an_unexpected_checkpoint_error_stops_the_crawl_instead_of_hanging(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 4, commit_ops=4)
    async with Crawler(cfg, clock=clock, fetcher=FakeFetcher(clock, pages),
                       store=BrokenFlushStore()) as crawler:
        with pytest.raises(PolecatError, match="flush bug"):
            await asyncio.wait_for(crawler.run(), 30)


class FailingFlushStore(MemoryPageStore):
    """A store that cannot make anything durable."""

    def flush(self) -> None:
        raise OSError(5, "Input/output error")


async def test_a_receive_waiting_for_a_commit_that_never_comes_ends_with_the_crawl(tmp_path: Path) -> None:
    """URLs handed over by another worker are acknowledged after a commit holds them; when the crawl
    stops without that commit (a storage fault here, an abort in a worker), the receive must fail (the
    sender keeps the batch) instead of waiting for ever and holding its worker's shutdown."""
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 2, commit_ops=4)
    async with Crawler(cfg, clock=clock, fetcher=FakeFetcher(clock, pages),
                       store=FailingFlushStore()) as crawler:
        batch = Batch("w1", 1, (HandoffUrl("http://h0.test/x", 1, 1.0),))
        receiving = asyncio.create_task(crawler.member.receive(batch))
        await asyncio.sleep(0)  # it waits for a commit
        with pytest.raises(PolecatError, match="Input/output error"):
            await asyncio.wait_for(crawler.run(), 30)
        done, _ = await asyncio.wait([receiving], timeout=2.0)
        assert done, "the receive still waits after the crawl ended"
        assert isinstance(receiving.exception(), PolecatError)


async def test_a_receive_that_waited_for_the_frontier_asks_again_whether_the_node_takes_it(
        tmp_path: Path) -> None:
    """Member rule 3: a batch taken in just before its node began to leave waited for a commit, then
    queued its URLs in a slice the leave was handing over (machine rule 7): refused once the frontier
    is free, nothing queued (the sender keeps the batch)."""
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 2, commit_ops=4)
    fetcher = FakeFetcher(clock, pages)
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        queued = crawler.frontier.queued
        leaving = False
        crawler._commits.frontier_free.clear()  # a commit under way
        batch = Batch("w1", 1, (HandoffUrl("http://h0.test/x", 1, 1.0),))
        receiving = asyncio.create_task(crawler.member.receive(batch, taking=lambda: not leaving))
        await asyncio.sleep(0)
        leaving = True
        crawler._commits.frontier_free.set()
        with pytest.raises(PolecatError, match="leaving"):
            await asyncio.wait_for(receiving, 5)
        assert crawler.frontier.queued == queued


async def test_a_loop_at_its_concurrency_bound_goes_on_when_every_lease_ends_at_once(tmp_path: Path) -> None:
    """The fake fetcher answers at once, so each lease ends in the loop iteration after it starts: the
    loop, woken by a lease that still counted as in flight, went back to sleep for good (a real crawl
    stalled this way with 256 requests in flight ending together)."""
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 3, commit_ops=1000)
    cfg = dataclasses.replace(cfg, fetch=dataclasses.replace(cfg.fetch, concurrency=1))
    fetcher = FakeFetcher(clock, pages)
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        stats = await asyncio.wait_for(crawler.run(), 30)
    assert stats.ended == "queue empty" and set(fetcher.calls) >= set(pages)


async def test_the_outbox_commit_and_the_bloom_snapshot_run_while_the_loop_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The periodic checkpoint's other fsyncs leave the loop too: the hand-off outbox commits on its own
    writer thread and the Bloom snapshot is written by the saver thread, each while the loop runs."""
    monkeypatch.setattr(commits, "BLOOM_SAVE_INTERVAL", 0.0)  # a snapshot at every commit
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 6, commit_ops=8)
    fetcher = FakeFetcher(clock, pages)
    box = Outbox(tmp_path / "handoff")
    link = ClusterLink(FakeMembership("w1", [Member("w1", "unix:/tmp/w1.sock")]),
                       Handoff("w1", box, FakeTransport({}), {}), HandoffReceiver(_refuse), max_backlog=10**6)
    seen: dict[str, list[tuple[bool, bool]]] = {"outbox": [], "bloom": []}
    """Per off-loop fsync: whether it ran off the loop's thread, and whether the loop ran meanwhile."""
    loop = asyncio.get_running_loop()
    crawler = Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore(), link=link)

    def watched(what: str, call: Any) -> Any:
        def run(*args: Any) -> Any:
            if crawler._commits.periodic and len(seen[what]) < 4:  # the last ones run on the loop
                ran = threading.Event()
                loop.call_soon_threadsafe(ran.set)
                seen[what].append((threading.current_thread() is not threading.main_thread(), ran.wait(2)))
            return call(*args)
        return run

    box._writer._commit = watched("outbox", box._writer._commit)  # type: ignore[method-assign]
    monkeypatch.setattr(ScalableBloom, "save", watched("bloom", ScalableBloom.save))
    async with crawler:
        task = asyncio.create_task(crawler.run())
        await asyncio.sleep(0)  # run() starts its committer: commit() now asks it
        async with asyncio.timeout(30):
            while len(fetcher.calls) < len(pages) + 6 or min(map(len, seen.values())) < 3:
                await crawler.commit()  # a periodic commit, made even once nothing is pending
        crawler.stop()
        stats = await task
    box.close()
    assert stats.queued == 0
    assert seen["outbox"] and seen["bloom"] and all(v == [(True, True)] * len(v) for v in seen.values())


async def test_a_crawl_saves_its_bloom_snapshot_once_at_the_stop_tagged_with_the_last_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run() ends with a commit and __aexit__ with another: a snapshot saved with the first is stale as
    soon as the second is made (its tag is no longer the counter), so only the last one is written, and
    the next open uses it instead of rebuilding the filter from the table."""
    tags: list[int] = []
    save = ScalableBloom.save

    def counted(bloom: ScalableBloom, path: Path, tag: int) -> None:
        tags.append(tag)
        save(bloom, path, tag)

    monkeypatch.setattr(ScalableBloom, "save", counted)
    clock = FakeClock(tick=0.0002)
    pages, cfg = hosts_of_pages(tmp_path, 2, commit_ops=4)
    fetcher = FakeFetcher(clock, pages)
    async with Crawler(cfg, clock=clock, fetcher=fetcher, store=MemoryPageStore()) as crawler:
        stats = await crawler.run()
    assert stats.ended == "queue empty" and len(tags) == 1
    local = open_frontier(cfg, clock.wall())
    try:
        assert ScalableBloom.load(tmp_path / "seen.bloom")[1] == local.db.seq == tags[0]
        assert len(pages) <= local.seen.stats().urls
    finally:
        local.close()


async def _refuse(batch: Batch) -> None:
    raise AssertionError(batch)


async def test_a_lease_that_ends_wakes_the_loop_only_when_that_can_change_its_decision(
        tmp_path: Path) -> None:
    """The loop sleeping until a host's next-allowed time is woken by a lease that ends only if some host
    is due before that time; sleeping with no timer (a full set of slots, leases in flight), always; while
    it runs, never (it decides afresh before it sleeps)."""
    clock = FakeClock(tick=0.0)
    cfg = config_from_mapping({"data_dir": str(tmp_path), "scope": {"mode": "any"}})
    async with Crawler(cfg, clock=clock, fetcher=FakeFetcher(clock, {}), store=MemoryPageStore()) as crawler:
        assert crawler.add_seed("http://a.test/") == "accepted"
        now = clock.wall()
        assert crawler.frontier.next_due() == now  # a.test's first request may go now
        waker = crawler._waker
        wake = waker.event
        for sleeping, until, woken in [(True, now + 5.0, True), (True, now - 1.0, False), (True, now, False),
                                       (True, None, True), (False, now + 5.0, False), (False, None, False)]:
            wake.clear()
            waker.sleeping, waker.until = sleeping, until
            waker.after_lease()
            assert wake.is_set() == woken, (sleeping, until)
        waker.sleeping = False
