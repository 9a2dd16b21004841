"""The content claim book outlives its owner's run and moves with its slices (polecat/cluster/claims.py
rule 8): kept in the frontier's ``claims`` table, loaded at open, exported, adopted and released with the
URL slice of the same number."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgpack
import pytest

from polecat.cluster.claimlink import CLAIM_HEADER, ContentClaims
from polecat.cluster.claims import UNANSWERED, Answer, Claim, ClaimBook, book_key, content_slice
from polecat.cluster.ring import Ring
from polecat.frontier.db import FrontierDB
from polecat.frontier.slices import slice_prefix
from polecat.store.base import FetchRecord, content_hash
from polecat.testing.cluster import LoopbackTransport
from polecat.testing.etcd import EtcdServer
from polecat.testing.fakes import MemoryPageStore
from polecat.testing.sitegen import SiteSpec, ground_truth
from polecat.testing.web import TestWeb
from polecat.writes import Delete, Put
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests, stored_records
from tests.frontier_helpers import Rig
from tests.service_helpers import wait_for
from tests.test_cluster_nodes import _start as start_cluster_node
from tests.test_cluster_nodes import host_owners
from tests.test_cluster_wire import _seed_on as seed_on
from tests.test_cluster_workers import worker_pids
from tests.test_crawl_restart import COMMIT_MS, finish, start

T0 = 1_790_000_000.0
PARAMS = {"t": 1}


def digest(i: int) -> bytes:
    return content_hash(f"body {i}".encode())


def rows(writes: list[Put | Delete], into: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    out = {} if into is None else into
    for w in writes:
        if isinstance(w, Put):
            out[w.key] = w.value
        else:
            out.pop(w.key, None)
    return out


# --- the book (sans-IO) -------------------------------------------------------------------------------

def test_a_record_is_kept_once_durable_and_a_new_book_answers_its_copies_at_once() -> None:
    book = ClaimBook(capacity=10, hold=0.5)
    book.decide("w0", [Claim(1, digest(1), "http://a/x", T0)], T0)
    assert book.take_writes() == []  # not durable yet: a crash may still lose the page
    book.durable("w0", [digest(1)])
    writes = book.take_writes()
    assert writes == [Put("claims", book_key(digest(1)), msgpack.packb(["http://a/x", T0, T0]))]
    assert book_key(digest(1))[:2] == slice_prefix(content_slice(digest(1)))
    book.durable("w0", [digest(1)])  # reported again: nothing more to keep
    assert book.take_writes() == []

    again = ClaimBook(capacity=10, hold=0.5)  # the owner restarted
    assert again.load(rows(writes).items()) == 1
    assert again.decide("w1", [Claim(7, digest(1), "http://b/x", T0 + 5)], T0 + 5) == \
        [("w1", Answer(7, ("http://a/x", T0)))]
    # A refetch of the original itself is still "first" (rule 2), never a revisit of itself.
    refetch = Claim(8, digest(1), "http://a/x", T0 + 6)
    assert again.decide("w0", [refetch], T0 + 6) == [("w0", Answer(8, None))]


def test_a_full_book_drops_its_oldest_kept_record_and_loads_oldest_first() -> None:
    book = ClaimBook(capacity=2, hold=0.5)
    for i in range(3):
        book.decide("w0", [Claim(i, digest(i), f"http://a/{i}", T0)], T0 + i)
        book.durable("w0", [digest(i)])
    kept = rows(book.take_writes())
    assert set(kept) == {book_key(digest(1)), book_key(digest(2))}  # the oldest's row deleted with it

    loaded = ClaimBook(capacity=1, hold=0.5)  # a smaller book: the newest record stays, the row goes
    loaded.load(kept.items())
    assert rows(loaded.take_writes(), dict(kept)) == {book_key(digest(2)): kept[book_key(digest(2))]}
    copy = Claim(9, digest(2), "http://b/2", T0)
    assert loaded.decide("w1", [copy], T0)[0][1].original == ("http://a/2", T0)


def test_a_kept_record_that_does_not_decode_is_skipped_and_counted() -> None:
    book = ClaimBook(capacity=10, hold=0.5)
    good = msgpack.packb(["http://a/1", T0, T0])
    assert book.load([(book_key(digest(1)), b"\xc1junk"), (book_key(digest(2)), good)]) == 1
    assert book.unreadable == 1 and len(book) == 1


def test_a_released_slice_leaves_the_book() -> None:
    book = ClaimBook(capacity=10, hold=0.5)
    for i in range(4):
        book.decide("w0", [Claim(i, digest(i), f"http://a/{i}", T0)], T0)
    assert book.forget([content_slice(digest(0)), content_slice(digest(1))]) == 2
    assert len(book) == 2


# --- the owner's book in its frontier -----------------------------------------------------------------

def _claims(self_id: str, db: FrontierDB | None, store: MemoryPageStore) -> ContentClaims:
    """A member that owns every content slice, its book kept in ``db``."""
    claims = ContentClaims(self_id, Ring((self_id,)).owner, LoopbackTransport(), {self_id: f"mem:{self_id}"},
                           capacity=100, wait=2.0, book_capacity=1000)
    claims.bind(store, db)
    return claims


def _record(url: str, body: bytes) -> FetchRecord:
    return FetchRecord.for_body(url, body, fetched_at=T0, headers=(("Content-Type", "text/html"),))


BODIES = [f"<p>page {i}</p>".encode() for i in range(20)]


async def _originals(claims: ContentClaims, host: str) -> None:
    held = [claims.claim(_record(f"http://{host}/{i}", b), b) for i, b in enumerate(BODIES)]
    async with asyncio.timeout(5):
        await asyncio.gather(*held)
    claims.after_flush(claims.before_flush())  # the store flushed them: durable (claims rule 7)


async def _copies(claims: ContentClaims, store: MemoryPageStore) -> None:
    held = [claims.claim(_record(f"http://mirror.test/{i}", b), b) for i, b in enumerate(BODIES)]
    async with asyncio.timeout(5):
        await asyncio.gather(*held)
    revisits = {r.url: r.duplicate_of for r in store.log if r.kind == "revisit"}
    assert revisits == {f"http://mirror.test/{i}": f"http://a.test/{i}" for i in range(len(BODIES))}


def test_a_restarted_owner_answers_copies_of_what_it_recorded_before_as_copies(tmp_path: Path) -> None:
    async def go() -> None:
        db = FrontierDB(tmp_path / "frontier", map_size=1 << 26, params=PARAMS)
        first = _claims("w0", db, MemoryPageStore())
        await _originals(first, "a.test")
        db.commit()
        await first.close()
        db.close()

    asyncio.run(go())
    asyncio.run(_restarted(tmp_path))


async def _restarted(path: Path) -> None:
    """The owner opens its frontier in ``path`` again: copies of what it kept are answered as copies."""
    db = FrontierDB(path / "frontier", map_size=1 << 26, params=PARAMS)
    store = MemoryPageStore()
    await _copies(_claims("w0", db, store), store)
    db.close()


def test_an_owner_killed_with_sigkill_keeps_its_committed_book(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import asyncio, os, signal
        from pathlib import Path
        from polecat.frontier.db import FrontierDB
        from polecat.testing.fakes import MemoryPageStore
        from tests.test_claim_book import _claims, _originals
        async def go():
            db = FrontierDB(Path({str(tmp_path)!r}) / "frontier", map_size=1 << 26, params={PARAMS!r})
            await _originals(_claims("w0", db, MemoryPageStore()), "a.test")
            db.commit()
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(go())
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert run.returncode == -signal.SIGKILL, run.stderr
    asyncio.run(_restarted(tmp_path))


def test_a_content_slice_book_moves_with_its_url_slice(tmp_path: Path) -> None:
    """Exported with the URL slice of the same number, adopted (the new owner answers a copy of an
    earlier original as a copy), and gone from the old owner once released."""
    a, b = Rig(tmp_path / "a", backend="lmdb"), Rig(tmp_path / "b", backend="lmdb")
    assert isinstance(a.db, FrontierDB) and isinstance(b.db, FrontierDB)

    async def go() -> None:
        old = _claims("w0", a.db, MemoryPageStore())
        await _originals(old, "a.test")
        ids = frozenset(content_slice(content_hash(body)) for body in BODIES)
        bundle = a.raw.export_slices(ids, T0)
        assert sum(1 for table, _, _ in bundle.records() if table == "claims") == len(BODIES)
        # For a receiver of wire 2 (0.3.0 refuses a table it does not know): the same slices, no books.
        bare = a.raw.export_slices(ids, T0, books=False)
        assert "claims" not in bare.tables and all(table != "claims" for table, _, _ in bare.records())
        store = MemoryPageStore()
        new = _claims("w0", b.db, store)
        b.frontier.adopt(bundle, T0)
        new.adopted(bundle.ids)
        await _copies(new, store)
        a.db.apply(a.raw.release_slices(ids))
        old.released(ids)
        assert list(a.db.items("claims")) == [] and len(old.book) == 0

    asyncio.run(go())
    a.db.close()
    b.db.close()


# --- a real crawl: a restart, then a resize that moves slices -----------------------------------------

def _crawl(web_seeds: list[str], dns: str, data: Path, workers: int, rate: float) -> list[str]:
    return [sys.executable, "-m", "polecat", "crawl", *web_seeds, "--data", str(data), "--rate", str(rate),
            "--scope", "host", "--dns-server", dns, "--allow-private", "--quiet", "--concurrency", "32",
            "--workers", str(workers)]


KEPT_WITHIN = 10 * COMMIT_MS / 1000 + 2
"""Seconds within which a page stored in full is in its owner's committed book: a store flush, the
durable report, the owner's frontier commit (commit windows of a loaded machine, generously). A page
stored in the last of them before a stop may miss its book (the report of the last flush races the
stop of its owner): a missed collapse, claims rule 8."""


@pytest.mark.parametrize(("stop", "near"),
                         [(signal.SIGTERM, 0.0), (signal.SIGKILL, 0.0), (signal.SIGTERM, 1.0)])
@pytest.mark.slow
def test_copies_fetched_after_the_owners_restart_and_a_resize_are_revisits(
        test_web: TestWebFactory, tmp_path: Path, stop: signal.Signals, near: float) -> None:
    """Two workers crawl the source hosts and are stopped (SIGTERM) or killed (SIGKILL, every process);
    the crawl resumes with three workers (slices, and their books, move: polecat/cluster/resize.py) and
    the mirror hosts' seeds. A mirror page whose source page was stored in full before the stop (by
    :data:`KEPT_WITHIN`) is stored as a revisit of it, whichever worker owns its hash or bands now: with
    ``near`` 1.0 every mirror page is a near copy (one token changed), found in the kept near books
    (claims rule 13) and stored as a revisit with its own body as a delta."""
    web = test_web(SiteSpec(hosts=8, pages_per_host=25, seed=11, mirror_hosts=4, mirror_near_ratio=near))
    sources, mirrors = web.seeds[:4], web.seeds[4:]
    data = tmp_path / "data"
    proc = start(_crawl(sources, web.dns_address, data, 2, 2.0), data)  # slow: a kill comes mid-crawl
    deadline = time.monotonic() + 120
    while len(set(page_requests(web))) < 75:  # three quarters of the sources' pages
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    stopped = time.time()
    if stop == signal.SIGKILL:
        for pid in [*worker_pids(proc.pid), proc.pid]:
            os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    else:
        proc.send_signal(signal.SIGTERM)
        code, output = finish(proc, timeout=120)
        assert code == 130, output  # stopped by a signal, cleanly (what Ctrl-C gives)
    # A page stored in full marked (no answer in time, claims rule 5) was never a book's "first".
    before = {r.url for r in stored_records(data)
              if r.kind != "revisit" and r.header(CLAIM_HEADER.lower()) is None
              and r.fetched_at < stopped - KEPT_WITHIN}
    assert len(before) >= 10
    code, output = finish(start(_crawl(sources + mirrors, web.dns_address, data, 3, 20.0), data), timeout=240)
    assert code == 0, output
    source_of = {m.split("/")[2]: s.split("/")[2] for s, m in zip(sources, mirrors, strict=True)}

    def source(url: str) -> str:
        host = url.split("/")[2]
        return url.replace(host, source_of.get(host, host), 1)

    copies = [r for r in stored_records(data) if r.url.split("/")[2] in source_of and source(r.url) in before]
    revisits = [r for r in copies if r.kind == "revisit"]
    assert len(revisits) >= len(before) // 2
    # A copy in full only when its claim had no answer in time (a loaded machine while the books move:
    # claims rule 5 never blocks the crawl), and then marked so.
    in_full = [r for r in copies if r.kind != "revisit"]
    assert [r.url for r in in_full if r.header(CLAIM_HEADER.lower()) != UNANSWERED] == []
    assert all(r.duplicate_of == source(r.url) for r in revisits)
    assert all((r.own_hash != r.content_hash) == (near > 0) for r in revisits)


def _web_n1_claims_in(test_web: TestWebFactory) -> TestWeb:
    """A web of 4 source hosts and their 4 mirrors where n1, once it joined n0, owns a source host (so
    records move to it) and fetches a mirror page whose content slice it owns (so its own book is asked).
    About one web in 16 gives n0 every mirror host (:func:`host_owners`), and then n1's book is never
    asked: claims are for pages a member's own store does not hold, and n0's holds every original."""
    ring = Ring(["n0", "n1"])
    for _ in range(20):
        web = test_web(SiteSpec(hosts=8, pages_per_host=10, seed=23, mirror_hosts=4))
        site, owners = web.site, host_owners(web, ["n0", "n1"])
        mirrors = {p for p, page in enumerate(site.pages) if page.kind == "mirror"}
        mirror_hosts = {site.pages[p].host for p in mirrors}
        sources_on_n1 = {h for h, owner in owners.items() if owner == "n1"} - mirror_hosts
        asked = [p for p in mirrors if owners[site.pages[p].host] == "n1"
                 and ring.owner(content_slice(content_hash(site.render(p, web.port)))) == "n1"]
        if sources_on_n1 and asked:
            return web
    raise AssertionError("no port in 20 split the web between n0 and n1")


async def test_a_node_that_joins_gets_the_books_of_its_slices_with_them(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """A cluster hand-over (polecat/processes/machine.py rule 11): n0 crawls the source hosts alone; n1
    joins and takes about half the slices, their books with them; then the mirror hosts are seeded. Every
    mirror page is stored as a revisit, and n1's book, which recorded no original itself, answered some
    of them as copies. Near claims are off ("full"): a near book is not kept or moved (claims rules 8,
    11), and with them on an exact mirror is found in n0's near book before its exact claim is asked."""
    web = _web_n1_claims_in(test_web)
    sources, mirrors = web.seeds[:4], web.seeds[4:]
    nodes = [await start_cluster_node(web, etcd_server, tmp_path, 0, 50.0, seeds=False,
                                      near_duplicates="full")]
    try:
        n0 = nodes[0][0]
        await seed_on(n0, sources)
        originals = ground_truth(web.site, web.port, "host", seeds=sources)
        await wait_for(lambda: set(page_requests(web)) >= originals, 60, "the sources fetched")
        book0 = n0.cluster.claims.book if n0.cluster is not None and n0.cluster.claims is not None else None
        assert book0 is not None
        # Only durable records are kept and handed over (claims rule 8): the last originals' claims and
        # their flushes' reports come after their requests, later still on a loaded machine.
        await wait_for(lambda: len(book0) >= len(originals) and book0.unflushed() == 0, 60,
                       "every original recorded durable in n0's book")
        await n0.crawler.commit()  # and their rows committed: a hand-over exports the last commit
        nodes.append(await start_cluster_node(web, etcd_server, tmp_path, 1, 50.0, seeds=False,
                                              near_duplicates="full"))
        n1 = nodes[1][0]
        assert n1.cluster is not None and n0.cluster is not None
        n0c, n1c = n0.cluster, n1.cluster

        def handed_over() -> bool:  # every slice with its wanted owner: the books moved with them
            s0, s1 = n0c.stats(), n1c.stats()
            return s1.slices_owned == s1.slices_wanted > 1000 and s0.slices_owned == s0.slices_wanted
        await wait_for(handed_over, 60, "the hand-over")
        await seed_on(n0, mirrors)
        copies = ground_truth(web.site, web.port, "host", seeds=mirrors)
        await wait_for(lambda: set(page_requests(web)) >= copies, 60, "the mirrors fetched")
        book = n1.cluster.claims.book if n1.cluster.claims is not None else None
        assert book is not None
        # the last mirror pages' claims are answered a tick after their fetch (seen 0 at once, loaded)
        await wait_for(lambda: book.copies > 0, 30, "n1's book answering copies")
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0
    mirror_hosts = {u.split("/")[2] for u in mirrors}
    stored = [r for k in range(2) for r in stored_records(tmp_path / f"n{k}")
              if r.url.split("/")[2] in mirror_hosts]
    assert len(stored) >= len(copies) - len(mirrors)  # robots.txt aside
    assert [r.url for r in stored if r.kind != "revisit"] == []
