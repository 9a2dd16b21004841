"""PagePipeline unit tests: a fake clock, an in-memory store, canned responses; no sockets."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from polecat.dedup.canon import Canonicalizer
from polecat.frontier.records import Completion, Lease
from polecat.node.pipeline import Page, PagePipeline
from polecat.store.base import content_hash
from polecat.testing.fakes import Canned, FakeClock, FakeFetcher, MemoryPageStore
from tests.frontier_helpers import Rig, canon

WORDS = " ".join(f"word{i} lorem ipsum dolor sit amet" for i in range(80))


def html(title: str, links: list[str], text: str = WORDS) -> bytes:
    anchors = "".join(f'<a href="{u}">x</a>' for u in links)
    return f"<html><head><title>{title}</title></head><body><p>{text}</p>{anchors}</body></html>".encode()


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        self.rig = Rig(tmp_path)
        self.clock = FakeClock(wall=5_000.0, monotonic=10.0)
        self.store = MemoryPageStore()
        self.pages: list[Page] = []
        self.errors: Counter[str] = Counter()
        self.fetcher = FakeFetcher(self.clock)
        self.pipeline = PagePipeline(
            self.rig.cfg, frontier=self.rig.raw, db=self.rig.db, store=self.store, canon=Canonicalizer(),
            agent_token="polecat", errors=self.errors, emit=self.pages.append, wake=lambda: None,
            clock=self.clock)

    def lease(self, url: str, *, hops: int = 0) -> Lease:
        return Lease("a.test", canon(url), "page", depth=1, importance=0.5, hops=hops)

    def handle(self, url: str, canned: Canned, *, hops: int = 0) -> Completion:
        self.fetcher.pages[canon(url)] = canned
        lease = self.lease(url, hops=hops)
        started = self.clock.wall()
        return self.pipeline.handle(lease, self.fetcher.respond(lease.url), started)


def test_html_page_is_stored_its_links_queued_and_timed_by_the_clock(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    body = html("one", ["/a", "/b", "http://b.test/c", "/a"])
    done = h.handle("http://a.test/", Canned(200, body, duration=0.2))
    assert done.outcome == "fetched" and done.content_hash == content_hash(body)
    # Monotonic response times become wall times through the injected clock.
    assert done.attempt.started == 5_000.0 and abs(done.attempt.ended - 5_000.2) < 1e-9
    assert done.attempt.headers_at is not None and abs(done.attempt.headers_at - 5_000.1) < 1e-9
    assert h.store.get(content_hash(body)) == body and h.store.history(canon("http://a.test/"))
    assert h.rig.frontier.queued == 3
    assert [p.url for p in h.pages] == [canon("http://a.test/")]
    assert set(h.pages[0].links) == {canon("http://a.test/a"), canon("http://a.test/b"), canon("http://b.test/c")}


def test_retry_status_stores_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    done = h.handle("http://a.test/", Canned(503, b"busy"))
    assert done.outcome == "retry" and h.store.log == [] and h.errors["http_503"] == 1


def test_redirect_queues_its_target_with_the_hop_counted(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    headers = (("Location", "/moved"), ("Content-Type", "text/html"))
    done = h.handle("http://a.test/old", Canned(301, b"", headers), hops=2)
    assert done.outcome == "redirect"
    assert h.rig.frontier.queued == 1
    got = h.rig.frontier.lease(1e9)
    assert isinstance(got, Lease) and got.kind == "robots"
    h.rig.complete_robots(got, 1e9)
    page = h.rig.frontier.lease(1e9 + 10)
    assert isinstance(page, Lease) and page.url == canon("http://a.test/moved") and page.hops == 3


def test_near_duplicate_is_a_revisit_of_the_first(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    first = html("one", [])
    h.handle("http://a.test/1", Canned(200, first))
    done = h.handle("http://a.test/2", Canned(200, html("two", [], WORDS + " extra")))
    assert done.content_hash == content_hash(first)
    revisit = h.store.history(canon("http://a.test/2"))[-1]
    assert revisit.kind == "revisit" and revisit.duplicate_of == canon("http://a.test/1")
    assert h.pipeline.near_dups == 1 and len(h.store.bodies) == 1


def test_not_modified_points_at_the_previous_copy(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    body = html("one", [])
    h.handle("http://a.test/", Canned(200, body))
    done = h.handle("http://a.test/", Canned(304, b""))
    assert (done.outcome, done.changed, done.content_hash) == ("not_modified", False, content_hash(body))
    assert h.store.history(canon("http://a.test/"))[-1].kind == "revisit"


def test_a_near_duplicate_index_entry_whose_body_was_lost_is_not_a_match(tmp_path: Path) -> None:
    """A crash after a frontier commit and before the store flush that would have held the bodies it
    indexed (pages handled while the previous flush ran) leaves index entries for bodies the store never
    kept. The replayed page must not be a revisit of its own lost body, nor a near-copy of it a revisit
    of nothing: both are stored whole, and the skip is counted."""
    h = Harness(tmp_path)
    first = html("one", [])
    h.handle("http://a.test/1", Canned(200, first))
    h.store.bodies.clear()  # the flush that held it never happened; its index entry did survive
    h.store.log.clear()
    again = h.handle("http://a.test/1", Canned(200, first))  # the replay
    assert again.content_hash == content_hash(first) and h.store.get(content_hash(first)) == first
    assert h.store.history(canon("http://a.test/1"))[-1].kind == "response"
    h.store.bodies.clear()
    copy = html("two", [], WORDS + " extra")
    done = h.handle("http://a.test/2", Canned(200, copy))
    assert done.content_hash == content_hash(copy) and h.store.get(content_hash(copy)) == copy
    assert h.store.history(canon("http://a.test/2"))[-1].kind == "response"
    assert h.pipeline.near_dups == 0 and h.errors["near_dup_unstored"] == 2
