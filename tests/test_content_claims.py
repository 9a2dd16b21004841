"""Content dedup across the members of a crawl (issue 35): claims of content hashes, answered by the
hash's owner (polecat/cluster/claims.py rules), carried as frames (polecat/cluster/claimwire.py) and run
by polecat/cluster/claimlink.py; a ``--workers`` crawl of a web with cross-host mirrors stores each body
once, as one process does."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import zstandard
from warcio.archiveiterator import ArchiveIterator

from polecat.cluster.batch import HandoffError, HandoffUrl, encode_batch, encode_urls
from polecat.cluster.claimlink import CLAIM_HEADER, ContentClaims, Receivers
from polecat.cluster.claims import (
    RETRY_AFTER,
    UNANSWERED,
    Answer,
    Claim,
    ClaimBook,
    ClaimQueue,
    Outcome,
    content_slice,
)
from polecat.cluster.claimwire import decode, encode_answers, encode_claims, is_claim_frame
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.ring import Ring
from polecat.config import StoreConfig
from polecat.store.base import FetchRecord, PageStore, content_hash
from polecat.store.export import Originals, WarcExport
from polecat.store.segstore import SegmentStore
from polecat.store.warc import warc_date
from polecat.testing.cluster import LoopbackTransport
from polecat.testing.etcd import EtcdServer
from polecat.testing.fakes import MemoryPageStore
from polecat.testing.sitegen import Site, SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import page_requests, stored_records
from tests.replay_helpers import replay
from tests.service_helpers import wait_for
from tests.test_cluster_nodes import _start as start_cluster_node
from tests.test_cluster_workers import worker_pids
from tests.test_crawl_restart import crawl_cmd, finish, start, wait_for_requests

T0 = 1_790_000_000.0


def digest(i: int) -> bytes:
    return content_hash(f"body {i}".encode())


# --- the policy (sans-IO) -----------------------------------------------------------------------------

def test_the_first_claim_wins_and_its_copies_are_answered_once_it_is_durable() -> None:
    book = ClaimBook(capacity=10, hold=0.5)
    first, copy, again = (Claim(1, digest(1), "http://a/x", T0), Claim(2, digest(1), "http://b/x", T0 + 1),
                          Claim(3, digest(1), "http://a/x", T0 + 2))
    assert book.decide("w0", [first, copy, again], T0) == [("w0", Answer(1, None)), ("w0", Answer(3, None))]
    assert book.waiting() == 1  # the copy waits: the first page is not in a flushed store yet
    assert book.durable("w9", [digest(1)]) == []  # only its claimer can say so
    assert book.durable("w0", [digest(1)]) == [("w0", Answer(2, ("http://a/x", T0)))]
    assert book.decide("w1", [Claim(4, digest(1), "http://c/x", T0)], T0) == \
        [("w1", Answer(4, ("http://a/x", T0)))]  # durable now: answered at once
    assert book.copies == 2


def test_a_copy_whose_original_never_becomes_durable_takes_the_record_over() -> None:
    book = ClaimBook(capacity=10, hold=0.5)
    book.decide("w0", [Claim(1, digest(1), "http://a/x", T0)], T0)  # w0 then dies before its flush
    assert book.decide("w1", [Claim(7, digest(1), "http://b/x", T0)], T0) == []
    assert book.expired(T0 + 0.4) == []
    assert book.expired(T0 + 0.5) == [("w1", Answer(7, None))]  # stored in full: both pages kept
    book.durable("w1", [digest(1)])
    assert book.decide("w2", [Claim(8, digest(1), "http://c/x", T0)], T0) == \
        [("w2", Answer(8, ("http://b/x", T0)))]


def test_a_full_book_forgets_its_oldest_hash() -> None:
    book = ClaimBook(capacity=2, hold=0.5)
    book.decide("w0", [Claim(i, digest(i), f"http://a/{i}", T0) for i in range(3)], T0)
    book.durable("w0", [digest(i) for i in range(3)])
    assert len(book) == 2
    # hash 0 was forgotten: its copy is stored in full again (a missed collapse, never a lost page)
    assert book.decide("w1", [Claim(9, digest(0), "http://b/0", T0)], T0) == [("w1", Answer(9, None))]
    assert book.decide("w1", [Claim(10, digest(2), "http://b/2", T0)], T0) == \
        [("w1", Answer(10, ("http://a/2", T0)))]


def _queue(self_id: str, members: tuple[str, ...], *, capacity: int = 100, wait: float = 1.0) -> ClaimQueue:
    ring = Ring(members)
    return ClaimQueue(self_id, ring.owner, ClaimBook(1000, wait / 2), capacity=capacity, wait=wait)


def _owned_by(owner: str, members: tuple[str, ...], n: int) -> list[bytes]:
    ring = Ring(members)
    return [d for d in (digest(i) for i in range(1000)) if ring.owner(content_slice(d)) == owner][:n]


def test_claims_this_member_owns_are_decided_at_once_and_others_batched_per_owner() -> None:
    members = ("w0", "w1", "w2")
    q = _queue("w0", members)
    mine = _owned_by("w0", members, 1)[0]
    seq, now = q.add(mine, "http://a/1", T0, T0)
    assert now == [Outcome(seq, None)] and q.pending() == 0
    for i, d in enumerate(_owned_by("w1", members, 3) + _owned_by("w2", members, 2)):
        q.add(d, f"http://a/{i}", T0, T0)
    batches = q.batches(T0)
    assert {k: len(v) for k, v in batches.items()} == {"w1": 3, "w2": 2}
    assert q.batches(T0) == {}  # sent once
    answers = [Answer(c.seq, ("http://x/", T0)) for c in batches["w1"]]
    assert [o.original for o in q.answered(answers)] == [("http://x/", T0)] * 3
    assert q.answered(answers) == [] and q.stray == 3  # a repeated answer names no waiting page
    assert q.pending() == 2


class Unread:
    """A held page's record that a tick's pass must not read (claims rule 5: sent pages are kept apart)."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a sent page's {name} was read")


def test_a_tick_s_batches_read_only_the_pages_not_sent_and_keep_the_order_they_came() -> None:
    """Claims rule 5: a tick's batches come from the held pages with a claim not sent (the pages sent
    wait for answers, not read again each tick); a claim not delivered goes again ahead of later ones."""
    members = ("w0", "w1")
    q = _queue("w0", members)
    first, second, third = _owned_by("w1", members, 3)
    q.add(first, "http://a/1", T0, T0)
    q.add(second, "http://a/2", T0, T0)
    sent = q.batches(T0)["w1"]
    q.undelivered("w1", sent[:1], T0)
    q.add(third, "http://a/3", T0, T0)
    q._waiting[sent[1].seq] = Unread()  # type: ignore[assignment]
    again = q.batches(T0 + RETRY_AFTER)["w1"]
    assert [c.url for c in again] == ["http://a/1", "http://a/3"]
    for c in again:
        q._waiting[c.seq] = Unread()  # type: ignore[assignment]
    assert q.batches(T0 + 2 * RETRY_AFTER) == {}


def test_an_undelivered_batch_goes_again_and_a_page_that_waits_too_long_is_stored_in_full_marked() -> None:
    members = ("w0", "w1")
    q = _queue("w0", members, wait=1.0)
    d = _owned_by("w1", members, 1)[0]
    seq, _ = q.add(d, "http://a/1", T0, T0)
    claims = q.batches(T0)["w1"]
    q.undelivered("w1", claims, T0)
    assert q.batches(T0 + RETRY_AFTER / 2) == {}  # not before the retry delay
    assert q.batches(T0 + RETRY_AFTER)["w1"] == claims
    assert q.expired(T0 + 0.5) == []
    assert q.expired(T0 + 1.0) == [Outcome(seq, None, marked=True)] and q.unanswered == 1


def test_a_refused_batch_and_an_overflow_store_pages_in_full_marked() -> None:
    members = ("w0", "w1")
    q = _queue("w0", members, capacity=2)
    ds = _owned_by("w1", members, 3)
    seqs = [q.add(d, f"http://a/{i}", T0, T0) for i, d in enumerate(ds)]
    assert seqs[2][1] == [Outcome(seqs[0][0], None, marked=True)]  # the oldest made room
    claims = q.batches(T0)["w1"]
    assert q.refused(claims) == [Outcome(s, None, marked=True) for s, _ in seqs[1:]]
    assert q.pending() == 0 and q.unanswered == 3


# --- the wire --------------------------------------------------------------------------------------

def test_frames_round_trip_and_anything_else_is_refused() -> None:
    claims = [Claim(1, digest(1), "http://a/é", T0), Claim(2, digest(2), "http://b/", T0 + 0.5)]
    frame = decode(encode_claims("w0", claims))
    assert frame.sender == "w0" and list(frame.claims) == claims and frame.answers == ()
    answers = [Answer(1, None), Answer(2, ("http://c/", T0))]
    assert list(decode(encode_answers("w1", answers)).answers) == answers
    good = encode_claims("w0", claims)
    assert is_claim_frame(good)
    flipped = good[:-1] + bytes([good[-1] ^ 1])
    for bad in (good[:10], b"PCHB" + good[4:], good[:4] + b"\x09" + good[5:], flipped, good + b"x"):
        with pytest.raises(HandoffError):
            decode(bad)
    signed = encode_claims("w0", claims, sign=lambda data: b"s" * 32)
    assert decode(signed, verify=lambda data, sig: sig == b"s" * 32).claims == tuple(claims)
    with pytest.raises(HandoffError):
        decode(signed, verify=lambda data, sig: False)


def test_one_socket_carries_hand_off_batches_and_claim_frames() -> None:
    async def go() -> None:
        got: list[HandoffUrl] = []

        async def sink(batch: object) -> None:
            got.extend(batch.urls)  # type: ignore[attr-defined]

        handoff = HandoffReceiver(sink)
        both = Receivers(handoff, _member("w0", LoopbackTransport(), MemoryPageStore()))
        urls = [HandoffUrl("http://a/", 1, 1.0)]
        assert (await both.receive(encode_batch("w1", 1, encode_urls(urls)))).status == "ok"
        assert got == urls
        claim = encode_claims("w1", [Claim(1, digest(1), "http://a/", T0)])
        assert (await both.receive(claim)).status == "ok"
        # A member without claims refuses a claim frame as a batch it cannot read: its sender stores in full.
        assert (await Receivers(handoff, None).receive(encode_claims("w1", []))).status == "bad"

    asyncio.run(go())


# --- the runner, two members in one process -----------------------------------------------------

MEMBERS = ("w0", "w1")


def _member(self_id: str, transport: LoopbackTransport, store: PageStore, *,
            wait: float = 2.0) -> ContentClaims:
    claims = ContentClaims(self_id, Ring(MEMBERS).owner, transport, {m: f"mem:{m}" for m in MEMBERS},
                           capacity=100, wait=wait, book_capacity=1000)
    claims.bind(store)
    transport.receivers[f"mem:{self_id}"] = claims
    return claims


def _record(url: str, body: bytes, t: float) -> FetchRecord:
    return FetchRecord.for_body(url, body, fetched_at=t, headers=(("Content-Type", "text/html"),))


async def _claim_copies(stores: tuple[PageStore, PageStore]) -> None:
    """Two members over ``stores`` each fetch the same 40 bodies (member k at ``T0 + k``) and claim
    them: one of each stored in full, the other a revisit."""
    transport = LoopbackTransport()
    members = [_member(m, transport, s) for m, s in zip(MEMBERS, stores, strict=True)]
    runs = [asyncio.create_task(m.run()) for m in members]
    bodies = [f"<p>page {i}</p>".encode() for i in range(40)]
    held = [members[k].claim(_record(f"http://h{k}.test/{i}", b, T0 + k), b)
            for i, b in enumerate(bodies) for k in (0, 1)]

    async def commits() -> None:  # each member's store flushes, as its node's commits make them
        while True:
            await asyncio.sleep(0.05)
            for m in members:
                m.after_flush(m.before_flush())

    committing = asyncio.create_task(commits())
    async with asyncio.timeout(10):
        await asyncio.gather(*held)
    committing.cancel()
    for run in runs:
        run.cancel()
    for m in members:
        await m.close()
    assert sum(m.stats().copies for m in members) == 40
    assert all(m.stats().unanswered == 0 for m in members)
    assert transport.posts < 20  # batches, not one message per page


def test_copies_fetched_by_two_members_are_stored_once_and_the_other_is_a_revisit() -> None:
    stores = MemoryPageStore(), MemoryPageStore()
    asyncio.run(_claim_copies(stores))
    full = Counter(d for s in stores for d in s.bodies)
    assert len(full) == 40 and set(full.values()) == {1}  # each body stored once, by one member
    revisits = [r for s in stores for r in s.log if r.kind == "revisit"]
    assert len(revisits) == 40
    for r in revisits:  # each points at the other member's copy
        assert r.duplicate_of is not None and r.duplicate_of != r.url and r.duplicate_of.split("/")[-1] == \
            r.url.split("/")[-1]


def test_a_revisit_whose_original_another_member_stored_carries_its_date(tmp_path: Path) -> None:
    """polecat/store/segstore.py rule 6: in real stores, each revisit of a copy another member stored in
    full names that page's URL, fetch time (``WARC-Refers-To-Date``, from the claim's answer) and payload
    digest (the original response's, as WARC 1.1 requires), each store's records pass ``warcio check``,
    and an export of the collection writes each revisit as stored (export.py rule 6 has nothing to add)."""
    stores = tuple(SegmentStore.open(tmp_path / m, StoreConfig()) for m in MEMBERS)
    asyncio.run(_claim_copies((stores[0], stores[1])))
    for s in stores:
        s.close()
    digests: dict[tuple[str, str], str] = {}  # (URL, date) -> payload digest, of each response
    stored_revisits: dict[str, bytes] = {}  # record id -> the revisit's WARC head, as stored
    for m in MEMBERS:
        warc_path = tmp_path / f"{m}.warc"
        with warc_path.open("wb") as out:
            for seg in sorted((tmp_path / m).rglob("*.warc.zst")):
                with seg.open("rb") as f:
                    out.write(zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read())
        check = subprocess.run([str(Path(sys.executable).parent / "warcio"), "check", str(warc_path)],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        with warc_path.open("rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type == "response":
                    digests[(rec.rec_headers.get_header("WARC-Target-URI"),
                             rec.rec_headers.get_header("WARC-Date"))] = \
                        rec.rec_headers.get_header("WARC-Payload-Digest")
                if rec.rec_type == "revisit":
                    stored_revisits[rec.rec_headers.get_header("WARC-Record-ID")] = rec.rec_headers.to_bytes()
                    original = rec.rec_headers.get_header("WARC-Refers-To-Target-URI")
                    host = original.split("/")[2]
                    k = int(host[1])  # http://h{k}.test/{i}: fetched at T0 + k
                    assert host != rec.rec_headers.get_header("WARC-Target-URI").split("/")[2]
                    assert rec.rec_headers.get_header("WARC-Refers-To-Date") == warc_date(T0 + k)
                    assert "x-polecat-refers-to-date" not in {n.lower() for n, _ in rec.http_headers.headers}
    assert len(stored_revisits) == 40
    readers = [SegmentStore.open(tmp_path / m, StoreConfig(), read_only=True) for m in MEMBERS]
    try:
        exported = tmp_path / "all.warc.gz"
        with exported.open("wb") as out:
            collection = WarcExport(out, exported.name, "gzip", originals=Originals(readers))
            for r in readers:
                collection.add(r)
    finally:
        for r in readers:
            r.close()
    with exported.open("rb") as f:
        revisits = {rec.rec_headers.get_header("WARC-Record-ID"): rec.rec_headers
                    for rec in ArchiveIterator(f) if rec.rec_type == "revisit"}
    assert {i: h.to_bytes() for i, h in revisits.items()} == stored_revisits  # the export adds nothing
    for h in revisits.values():
        original = (h.get_header("WARC-Refers-To-Target-URI"), h.get_header("WARC-Refers-To-Date"))
        assert h.get_header("WARC-Payload-Digest") == digests[original]


def test_an_unreachable_owner_never_blocks_the_page_it_is_stored_in_full_and_marked() -> None:
    async def go() -> MemoryPageStore:
        transport = LoopbackTransport()
        store = MemoryPageStore()
        member = _member("w0", transport, store, wait=0.3)
        transport.down.add("mem:w1")  # w1 is dead
        run = asyncio.create_task(member.run())
        ds = [(f"<p>{i}</p>".encode()) for i in range(200)]
        theirs = [b for b in ds if Ring(MEMBERS).owner(content_slice(content_hash(b))) == "w1"][:5]
        held = [member.claim(_record(f"http://a.test/{i}", b, T0), b) for i, b in enumerate(theirs)]
        async with asyncio.timeout(10):  # bounded: the claim wait, not the owner, decides
            await asyncio.gather(*held)
        run.cancel()
        await member.close()
        assert member.stats().unanswered == 5 and transport.posts >= 2  # retried before giving up
        return store

    store = asyncio.run(go())
    assert len(store.bodies) == 5
    assert all(r.header(CLAIM_HEADER.lower()) == UNANSWERED for r in store.log)


# --- a real crawl -------------------------------------------------------------------------------------

def test_two_workers_store_each_body_of_a_mirrored_web_once(test_web: TestWebFactory, tmp_path: Path) -> None:
    spec = SiteSpec(hosts=8, pages_per_host=30, seed=5, mirror_hosts=4, dup_ratio=0.1)
    web = test_web(spec)
    data = tmp_path / "data"
    run = subprocess.run(crawl_cmd(web, data, 100.0, "--workers", "2"), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    fetched = [r.url for r in web.log if r.status == 200 and not r.url.endswith("/robots.txt")]
    warc = tmp_path / "all.warc.gz"
    export = subprocess.run([sys.executable, "-m", "polecat", "store", "export", str(data), "--warc",
                             str(warc)], capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    pages = {u: b for u, b in replay(warc).items() if not u.endswith("/robots.txt")}
    assert set(pages) == set(fetched)  # every page once, replayed (revisits across workers resolved)
    full = subprocess.run([sys.executable, "-m", "polecat", "pages", str(data), "--format", "jsonl"],
                          capture_output=True, text=True, timeout=120, check=True)
    rows = [json.loads(line) for line in full.stdout.splitlines() if "/robots.txt" not in line]
    stored = Counter(r["hash"] for r in rows if r["outcome"] == "fetched")
    assert set(stored.values()) == {1}  # no body stored twice, whichever worker fetched its copies
    assert len(stored) == len(set(pages.values()))  # and every distinct body stored
    assert len(stored) < len(fetched) * 2 // 3  # the mirrors are revisits


def test_mirror_hosts_serve_their_sources_pages_byte_for_byte_or_one_token_apart() -> None:
    spec = SiteSpec(hosts=6, pages_per_host=20, seed=3, mirror_hosts=3, mirror_near_ratio=0.3)
    site = Site(spec)
    kinds = Counter(p.kind for p in site.pages[60:])
    assert set(kinds) == {"mirror", "near_mirror"} and kinds["near_mirror"] > 0
    for page in range(60, 120):
        info, source = site.pages[page], site.pages[page - 60]
        assert info.path == source.path and info.original == page - 60
        mine, theirs = site.render(page, 80), site.render(page - 60, 80)
        assert (mine == theirs) == (info.kind == "mirror")
        if info.kind == "near_mirror":
            assert len(set(mine.split()) ^ set(theirs.split())) == 2  # one footer token
    with pytest.raises(ValueError, match="mirror_hosts"):
        SiteSpec(hosts=4, mirror_hosts=3)


async def test_three_etcd_nodes_store_each_body_of_a_mirrored_web_once(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=9, pages_per_host=20, seed=8, mirror_hosts=4, dup_ratio=0.1))
    truth = web.ground_truth("any")
    nodes = [await start_cluster_node(web, etcd_server, tmp_path, k, 50.0) for k in range(3)]
    try:
        await wait_for(lambda: set(page_requests(web)) >= truth, 120, "every page fetched")
        sent = [svc.cluster.stats() for svc, _ in nodes if svc.cluster is not None]
        assert sum(s.claim_frames_streamed for s in sent) > 0  # on the peers' claims streams
    finally:
        for svc, _ in nodes:
            svc.stop()
        for _, task in nodes:
            assert await asyncio.wait_for(task, 60) == 0
    dirs = [str(tmp_path / f"n{k}") for k in range(3)]
    warc = tmp_path / "all.warc.gz"
    export = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "polecat", "store", "export",
                                                      *dirs, "--warc", str(warc)],
                                     capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    pages = {u: b for u, b in replay(warc).items() if not u.endswith("/robots.txt")}
    assert set(pages) >= truth
    listed = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "polecat", "pages", *dirs,
                                                      "--format", "jsonl"],
                                     capture_output=True, text=True, timeout=120, check=True)
    rows = [json.loads(line) for line in listed.stdout.splitlines() if "/robots.txt" not in line]
    stored = Counter(r["hash"] for r in rows if r["outcome"] == "fetched")
    assert len(stored) == len(set(pages.values()))  # every body stored in full somewhere
    # Each body in full once. A claim left unanswered past its wait (a loaded machine) is stored in full
    # all the same, marked (claims rule 5: never block the crawl): a body stored more than once has every
    # copy but one so marked.
    full: dict[bytes, list[FetchRecord]] = {}
    for d in dirs:
        for r in stored_records(Path(d)):
            if r.kind == "response":
                full.setdefault(r.content_hash, []).append(r)
    marked = 0
    for copies in full.values():
        unmarked = [r.url for r in copies if r.header(CLAIM_HEADER.lower()) != UNANSWERED]
        assert len(copies) == 1 or len(unmarked) <= 1, [r.url for r in copies]
        marked += len(copies) - len(unmarked)
    twice = sum(len(c) - 1 for c in full.values())
    print(f"\n{len(full)} bodies, {twice} stored again in full, {marked} copies marked unanswered")
    assert twice <= 0.1 * len(full)  # unanswered claims are the exception, not the rule
    assert sum(svc.cluster.claims.stats().copies for svc, _ in nodes
               if svc.cluster is not None and svc.cluster.claims is not None) > 0


def test_a_worker_killed_mid_crawl_costs_no_page_of_its_siblings(test_web: TestWebFactory,
                                                                  tmp_path: Path) -> None:
    """The owner of half the content slices dies (kill -9) and is restarted: its siblings' pages whose
    claims it never answered are stored in full (marked) or claimed again from its successor; none is
    lost, and the crawl ends."""
    web = test_web(SiteSpec(hosts=12, pages_per_host=40, seed=6, mirror_hosts=6, dup_ratio=0.1))
    data = tmp_path / "data"
    proc = start(crawl_cmd(web, data, 10.0, "--workers", "2"), data)
    wait_for_requests(web, 120, proc)
    victims = worker_pids(proc.pid)
    assert len(victims) == 2, victims
    os.kill(victims[0], signal.SIGKILL)
    code, output = finish(proc, timeout=240)
    assert code == 0, output
    # (a soft-404 probe, polecat/frontier/traps.py rule 3, is no page of the web)
    assert {u for u in page_requests(web) if "/polecat-probe-" not in u} == web.ground_truth("any")
    warc = tmp_path / "all.warc.gz"
    export = subprocess.run([sys.executable, "-m", "polecat", "store", "export", str(data), "--warc",
                             str(warc)], capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    pages = {u for u in replay(warc) if not u.endswith("/robots.txt") and "/polecat-probe-" not in u}
    assert pages == web.ground_truth("any")  # every page, each replayable
    verify = subprocess.run([sys.executable, "-m", "polecat", "store", "verify", str(data)],
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
