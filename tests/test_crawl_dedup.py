"""Integration: a crawl of a web whose hosts serve exact and near-duplicate pages stores one body per
duplicate group, and the page list shows the duplicates as pointers (issue 5, "Tests").

The web is hand-made on four loopback hosts (TestWeb knobs). Groups of pages:

- exact: byte-identical bodies on several hosts (one stored body, the other fetches point at it);
- near: one ~2,000-word article, and copies with ~1 % of the words replaced, each framed by its own
  host's header (one stored body; the others are revisit records naming the stored page's URL);
- single: unrelated articles, and articles that share only a long site template (all stored).

Hosts are crawled concurrently, so which member of a group is fetched first (and stored) is not fixed.
The assertions are therefore order-free: exactly one member of a group has a body and every other member
points at it. That holds whatever the order only if every pair inside a near group is within the SimHash
distance and every pair across groups is far outside it; ``test_served_pages_are_the_claimed_duplicates``
checks this on the text the crawler fingerprints, so a failure there is a fixture (or SimHash) problem,
not a crawl one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import random
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from polecat import Crawler, Page
from polecat.config import Config, DedupConfig
from polecat.dedup.minhash import hamming, minhash
from polecat.node.stats import CrawlStats
from polecat.parse.charset import decode_html
from polecat.parse.html import parse_html
from polecat.store.base import FetchRecord, content_hash
from polecat.store.segstore import open_store
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config as _crawl_config
from tests.crawl_helpers import page_requests

HOSTS = ("alpha.test", "beta.test", "gamma.test", "delta.test")
LATE_HOST = "epsilon.test"
"""Joins in a second run over the same data dir (bodies and fingerprints must persist)."""
RATE = 20.0
NEAR = DedupConfig().minhash_distance
FAR = 8
"""Pages of different groups must be at least this far apart (unrelated pages sit near 18-25)."""

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zen", "dor", "pel", "sun", "gra", "fi", "bo", "xal",
              "tur", "esk", "wim")
_VOCAB_RNG = random.Random("polecat-dedup-e2e")
VOCAB = tuple(dict.fromkeys("".join(_VOCAB_RNG.choices(_SYLLABLES, k=_VOCAB_RNG.randint(1, 4)))
                            for _ in range(12_000)))
_ZIPF = tuple(itertools.accumulate(1 / rank for rank in range(1, len(VOCAB) + 1)))
"""Word frequencies fall off like English (a 2,000-word article has ~800 distinct words)."""

Role = Literal["exact", "near", "single"]

CRASH_AFTER_FLUSH = """
import asyncio, json, os, sys
from polecat.config import config_from_mapping
from polecat.frontier.frontier import Frontier
from polecat import Crawler

fetched = []
prepare = Frontier.prepare_commit

def crash_once_fetched(self):
    # The node flushes the store, then prepares and commits the frontier: dying here is a kill -9 in between.
    if fetched:
        os._exit(9)
    return prepare(self)

Frontier.prepare_commit = crash_once_fetched

async def main():
    async with Crawler(config_from_mapping(json.loads(sys.argv[1])), on_page=fetched.append) as crawler:
        await crawler.run()

asyncio.run(main())
"""

CRASH_AFTER_COMMIT = """
import asyncio, json, os, sys, time
from polecat.config import config_from_mapping
from polecat.store.segstore import SegmentStore
from polecat import Crawler

fetched = []
flush = SegmentStore.flush
armed = []

def slow_then_crash(self):
    # The first flush after the first page returns only once the second page was handled meanwhile: its
    # body waits for the next flush, its near-duplicate index entry goes with the frontier commit that
    # follows this flush. Dying as the next flush starts is a kill -9 between that commit and that flush.
    if armed and len(fetched) > armed[0]:
        os._exit(9)
    flush(self)
    if len(fetched) == 1 and not armed:
        armed.append(1)
        deadline = time.monotonic() + 20
        while len(fetched) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)

SegmentStore.flush = slow_then_crash

async def main():
    async with Crawler(config_from_mapping(json.loads(sys.argv[1])), on_page=fetched.append) as crawler:
        await crawler.run()

asyncio.run(main())
"""


@dataclass(frozen=True, slots=True)
class Served:
    """One URL of the test web and what it serves."""

    host: str
    path: str
    group: str
    """Pages of one group must end up as one stored body."""
    role: Role
    body: bytes
    noisy_links: int
    """Links whose canonical form differs from the WHATWG-resolved href (fragment, tracking parameter)."""
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"


def article(seed: str, words: int = 2000) -> list[str]:
    return random.Random(seed).choices(VOCAB, cum_weights=_ZIPF, k=words)


def edited(words: list[str], share: float, seed: str) -> list[str]:
    """``words`` with ``share`` of the positions replaced by random vocabulary words."""
    rng = random.Random(seed)
    out = list(words)
    for i in rng.sample(range(len(out)), round(share * len(out))):
        out[i] = rng.choice(VOCAB)
    return out


def _paragraphs(words: list[str]) -> str:
    return "".join(f"<p>{' '.join(words[i:i + 90])}.</p>\n" for i in range(0, len(words), 90))


def _links(port: int, targets: list[tuple[str, str]], salt: int) -> tuple[str, int]:
    """Absolute links (valid from any host) to ``targets``, in forms that cycle with ``salt``: the
    first three must be collapsed by canonicalization, the last two are already canonical once parsed."""
    forms = (
        ("{url}#comments", True),
        ("{url}?utm_source=feed&amp;utm_medium=rss", True),
        ("{url}?gclid=G{salt}", True),
        ("http://{upper}:{port}{path}", False),
        ("{url}", False),
    )
    items = []
    noisy = 0
    for k, (host, path) in enumerate(targets):
        form, is_noisy = forms[(salt + k) % len(forms)]
        href = form.format(url=f"http://{host}:{port}{path}", upper=host.upper(), port=port, path=path,
                           salt=salt)
        items.append(f'<li><a href="{href}">{" ".join(article(f"anchor/{salt}/{k}", 3))}</a></li>')
        noisy += is_noisy
    return "<ul>" + "".join(items) + "</ul>\n", noisy


def page_html(title: str, header: str, words: list[str], links: str,
              template: list[str] | None = None) -> bytes:
    top, bottom = (template[: len(template) // 2], template[len(template) // 2:]) if template else ([], [])
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n</head>\n<body>\n<header><p>{header}</p>{_paragraphs(top)}</header>\n"
        f"<main><article>\n<h1>{title}</h1>\n{_paragraphs(words)}</article></main>\n"
        f"<footer>{_paragraphs(bottom)}<nav>{links}</nav></footer>\n</body>\n</html>\n"
    ).encode()


def build_web(port: int) -> list[Served]:
    """The pages of the four hosts (see the module docstring)."""
    every: list[tuple[str, Role, list[tuple[str, str]]]] = [
        ("exact-long", "exact", [("alpha.test", "/story.html"), ("beta.test", "/mirror/story.html"),
                                 ("gamma.test", "/copy.html")]),
        ("exact-short", "exact", [("delta.test", "/notice.html"), ("alpha.test", "/notice.html")]),
        ("near-a", "near", [("alpha.test", "/article.html"), ("beta.test", "/article.html"),
                            ("gamma.test", "/syndicated/article.html"), ("delta.test", "/reprint.html")]),
        ("near-b", "near", [("beta.test", "/post.html"), ("delta.test", "/post-copy.html")]),
        ("unrelated-1", "single", [("alpha.test", "/about.html")]),
        ("unrelated-2", "single", [("delta.test", "/unrelated.html")]),
        ("template-1", "single", [("gamma.test", "/t/one.html")]),
        ("template-2", "single", [("gamma.test", "/t/two.html")]),
        ("template-3", "single", [("delta.test", "/t/three.html")]),
    ]
    targets = [member for _, _, members in every for member in members]
    template = article("shared-template", 500)
    served: list[Served] = []
    salt = 0

    def links() -> tuple[str, int]:
        nonlocal salt
        salt += 1
        picked = [targets[(salt * 7 + k * 5) % len(targets)] for k in range(3)]
        return _links(port, picked, salt)

    for group, role, members in every:
        if role == "exact":
            words = article(group, 2000 if group == "exact-long" else 60)
            html, noisy = links()
            body = page_html(f"Exact {group}", "Mirrored content", words, html)
            served += [Served(h, p, group, role, body, noisy, port) for h, p in members]
        elif role == "near":
            base = article(group)
            for k, (h, p) in enumerate(members):
                words = base if k == 0 else edited(base, 0.01, f"{group}/{k}")
                html, noisy = links()
                body = page_html(f"Near {group}", f"{h.split('.')[0]} daily", words, html)
                served.append(Served(h, p, group, role, body, noisy, port))
        else:
            ((h, p),) = members
            shared = template if group.startswith("template") else None
            html, noisy = links()
            body = page_html(f"Page {group}", "Site news", article(group, 1500), html, shared)
            served.append(Served(h, p, group, role, body, noisy, port))
    return served


def late_pages(port: int, first: list[Served]) -> list[Served]:
    """What the late host serves in the second run: a byte-identical copy of an exact group, a near
    copy of a near group, and one new page."""
    exact = next(s for s in first if s.group == "exact-long")
    near_base = article("near-a")
    html, noisy = _links(port, [(exact.host, exact.path)], 0)
    near = page_html("Near near-a", "epsilon daily", edited(near_base, 0.01, "near-a/late"), html)
    fresh = page_html("Page late", "Site news", article("late-new", 1500), html)
    return [
        Served(LATE_HOST, "/copied-story.html", exact.group, "exact", exact.body, exact.noisy_links, port),
        Served(LATE_HOST, "/late-article.html", "near-a", "near", near, noisy, port),
        Served(LATE_HOST, "/new.html", "late-new", "single", fresh, noisy, port),
    ]


def fingerprint(page: Served) -> int:
    """SimHash of the text the crawler extracts from the page (its dedup input)."""
    return minhash(parse_html(decode_html(page.body, "utf-8"), page.url).text)


def serve(web: TestWeb, pages: list[Served]) -> None:
    for host in dict.fromkeys(p.host for p in pages):
        web.add_host(host, web.addresses[(*HOSTS, LATE_HOST).index(host) % len(web.addresses)])
    for p in pages:
        web.respond(p.host, p.path, 200, headers={"Content-Type": "text/html; charset=utf-8"}, body=p.body)


async def crawl(cfg: Config) -> tuple[CrawlStats, list[Page]]:
    pages: list[Page] = []
    async with Crawler(cfg, on_page=pages.append) as crawler:
        stats = await crawler.run()
    return stats, pages


def stored_records(data: Path, cfg: Config, *, once: bool = True
                   ) -> tuple[dict[str, FetchRecord], int, dict[bytes, bytes]]:
    """The latest fetch record of each URL (``once``: its only one), the store's body count, and the
    bytes each fetch received by their hash (a near-duplicate's own page, stored as a delta, included)."""
    store = open_store(data / "store", cfg.store, read_only=True)
    try:
        records = list(store.records())
        by_url = {r.url: r for r in records}
        assert not once or len(by_url) == len(records), Counter(r.url for r in records).most_common(3)
        bodies = {r.own_hash: store.get(r.own_hash) for r in records if store.has(r.own_hash)}
        return by_url, store.stats().bodies, bodies
    finally:
        store.close()


def crawl_config(web: TestWeb, data: Path, **over: Any) -> Config:
    """The shared crawl config without robots.txt archiving: these tests count the page bodies stored."""
    store = {"archive_robots": False, **over.pop("store", {})}
    return _crawl_config(web, data, store=store, **over)


def pages_listing(data: Path) -> dict[str, list[str]]:
    """``polecat pages DIR`` as a user runs it: URL -> the other tab-separated fields of its line."""
    out = subprocess.run([sys.executable, "-m", "polecat", "pages", str(data)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    lines = [line.split("\t") for line in out.splitlines()[1:]]  # after the header
    # url, then status, time, hash, size, and the duplicated URL when there is one
    return {fields[0]: fields[1:5] + [f for f in fields[5:6] if f] for fields in lines}


def assert_one_body_per_group(served: list[Served], records: dict[str, FetchRecord],
                              bodies: dict[bytes, bytes]) -> dict[str, Served]:
    """Each group has exactly one response record (its body stored whole and intact); every other member
    is a revisit of it (an exact copy of a near-duplicate: of that near-duplicate, whose bytes it has),
    and every member's own bytes come back from the store. Returns the stored member of each group."""
    groups: dict[str, list[Served]] = defaultdict(list)
    for page in served:
        groups[page.group].append(page)
    originals: dict[str, Served] = {}
    for group, members in groups.items():
        stored = [m for m in members if records[m.url].kind == "response"]
        assert len(stored) == 1, (group, [(m.url, records[m.url].kind) for m in members])
        original = originals[group] = stored[0]
        rec = records[original.url]
        assert rec.content_hash == content_hash(original.body) and rec.duplicate_of is None
        assert bodies[rec.content_hash] == original.body
        for m in members:
            if m is original:
                continue
            dup = records[m.url]
            assert bodies[dup.own_hash] == m.body, m.url  # polecat/store/delta.py: its own page
            assert dup.kind == "revisit" and dup.status == 200 and dup.size == len(m.body), m.url
            if m.body == original.body:
                assert (dup.content_hash, dup.duplicate_of) == (rec.content_hash, original.url), m.url
            else:
                assert dup.duplicate_of in {x.url for x in members} and dup.duplicate_of != m.url, m.url
                assert dup.content_hash in {content_hash(x.body) for x in members}, m.url
    return originals


def test_served_pages_are_the_claimed_duplicates() -> None:
    """Precondition of the crawl tests: near groups are tight, everything else is far apart."""
    served = build_web(8080) + late_pages(8080, build_web(8080))
    prints = {p.url: fingerprint(p) for p in served}
    for a, b in itertools.combinations(served, 2):
        d = hamming(prints[a.url], prints[b.url])
        if a.group == b.group:
            assert d <= NEAR, (a.url, b.url, d)
            assert (a.body == b.body) == (a.role == "exact"), (a.url, b.url)
        else:
            assert d >= FAR, (a.url, b.url, d)


def test_crawl_stores_one_copy_per_duplicate_group(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=1))
    served = build_web(web.port)
    serve(web, served)
    data = tmp_path / "data"
    cfg = crawl_config(web, data, scope={"seeds": [p.url for p in served]}, politeness={"rate": RATE})
    stats, pages = asyncio.run(crawl(cfg))

    # Every URL fetched exactly once, nothing else (all links point at seeded URLs, noisy or not).
    assert Counter(page_requests(web)) == Counter(p.url for p in served)
    assert stats.politeness_violations == 0 and stats.queued == 0 and not stats.errors

    records, n_bodies, bodies = stored_records(data, cfg)
    assert set(records) == {p.url for p in served}
    originals = assert_one_body_per_group(served, records, bodies)
    groups = {p.group for p in served}
    assert sum(r.kind == "response" for r in records.values()) == len(groups)  # one whole body a group
    assert n_bodies == len(bodies) == len({p.body for p in served})  # and each page's own bytes, once

    near_members = [p for p in served if p.role == "near"]
    expected_near = len(near_members) - len({p.group for p in near_members})
    assert stats.near_duplicates == expected_near
    assert stats.pages_stored == len({p.body for p in served})
    assert stats.near_dup_collapse_ratio == expected_near / (len(groups) + expected_near)
    assert stats.canon_collapsed == sum(p.noisy_links for p in served)

    # The library API reports the near-duplicate pointer too (exact copies carry their shared hash).
    by_url = {p.url: p for p in pages}
    assert set(by_url) == {p.url for p in served}
    for p in served:
        original = originals[p.group]
        want = original.url if p.role == "near" and p is not original else None
        assert by_url[p.url].duplicate_of == want, p.url
        assert by_url[p.url].content_hash == content_hash(original.body)

    listing = pages_listing(data)
    assert set(listing) == {p.url for p in served}
    for p in served:
        status, _when, digest, size, *pointer = listing[p.url]
        original = originals[p.group]
        # each row shows the hash of the body it received, and the page it duplicates
        assert (status, digest, size) == ("200", content_hash(p.body).hex(), str(len(p.body))), p.url
        assert pointer == ([] if p is original else [original.url]), p.url

    # Every page's own bytes come back, a near-duplicate's too (polecat/store/delta.py): what `cat` prints,
    # and the title the JSON lines export parses from them.
    near = next(p for p in served if p.role == "near" and p is not originals[p.group])
    cat = subprocess.run([sys.executable, "-m", "polecat", "cat", str(data), near.url], capture_output=True,
                         timeout=60, check=True).stdout
    assert cat == near.body != originals[near.group].body
    feed = subprocess.run([sys.executable, "-m", "polecat", "export", str(data), "--jsonl", "-"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    rows = {row["url"]: row for row in map(json.loads, feed.splitlines())}
    assert rows[near.url]["title"] == parse_html(decode_html(near.body, "utf-8"), near.url).title
    assert rows[near.url]["text"] and rows[near.url]["duplicate_of"] == originals[near.group].url


def test_second_run_dedups_against_the_first(test_web: TestWebFactory, tmp_path: Path) -> None:
    """A restart over the same data dir keeps content hashes and fingerprints: a late host's copies
    are recorded as pointers to the first run's pages; URLs done in the first run are not fetched again."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=1))
    first = build_web(web.port)
    late = late_pages(web.port, first)
    serve(web, first)
    data = tmp_path / "data"
    cfg = crawl_config(web, data, scope={"seeds": [p.url for p in first]}, politeness={"rate": RATE})
    asyncio.run(crawl(cfg))
    _, bodies_before, _ = stored_records(data, cfg)

    serve(web, late)
    web.clear_log()
    cfg2 = crawl_config(web, data, scope={"seeds": [p.url for p in first + late]}, politeness={"rate": RATE})
    stats, _ = asyncio.run(crawl(cfg2))
    assert Counter(page_requests(web)) == Counter(p.url for p in late)

    records, n_bodies, bodies = stored_records(data, cfg2)
    assert set(records) == {p.url for p in first + late}
    assert n_bodies == bodies_before + 2  # the new page's body and the near copy's own bytes (a delta)
    originals = assert_one_body_per_group(first + late, records, bodies)
    assert originals["late-new"].url == f"http://{LATE_HOST}:{web.port}/new.html"
    assert stats.near_duplicates == 1


def test_generated_site_with_duplicates_within_hosts(test_web: TestWebFactory, tmp_path: Path) -> None:
    """The site generator's duplicates (exact copies and one-token near copies of another page of the
    same host, links included) at a larger scale: one body per group of pages sharing an original."""
    web = test_web(SiteSpec(hosts=3, pages_per_host=24, seed=11, dup_ratio=0.2, near_dup_ratio=0.2))
    site = web.site
    data = tmp_path / "data"
    cfg = crawl_config(web, data, politeness={"rate": RATE})
    stats, _ = asyncio.run(crawl(cfg))

    truth = web.ground_truth("host")
    pages = [Served(p.host, p.path, str(p.original), "exact" if p.kind == "dup" else
                    "near" if p.kind == "near_dup" else "single", site.render(g, web.port), 0, web.port)
             for g, p in enumerate(site.pages) if site.url(g, web.port) in truth]
    assert {p.role for p in pages} == {"exact", "near", "single"}
    prints = {p.url: fingerprint(p) for p in pages}
    for a, b in itertools.combinations(pages, 2):  # precondition, as in the hand-made web
        d = hamming(prints[a.url], prints[b.url])
        assert d <= NEAR if a.group == b.group else d > NEAR, (a.url, b.url, d)

    records, n_bodies, bodies = stored_records(data, cfg)
    assert set(records) == truth
    originals = assert_one_body_per_group(pages, records, bodies)
    assert sum(r.kind == "response" for r in records.values()) == len(originals)
    assert n_bodies == len({p.body for p in pages}) == stats.pages_stored
    # A fetch is a near-duplicate when its bytes differ from every stored body: exact copies of the stored
    # member, or of a near-duplicate whose own bytes were stored first, are caught by the content hash.
    assert stats.near_duplicates == len({p.body for p in pages if p.body != originals[p.group].body}) > 0


def test_pages_stored_without_body_are_not_duplicates(test_web: TestWebFactory, tmp_path: Path) -> None:
    """A noindex page and an image on other hosts are fetched but not stored; the page list must not
    call one a duplicate of the other (they share nothing but the empty placeholder body)."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=1))
    noindex = Served("alpha.test", "/private.html", "noindex", "single",
                     b'<html><head><meta name="robots" content="noindex"></head>'
                     b"<body>Members only</body></html>",
                     0, web.port)
    image = Served("beta.test", "/logo.png", "image", "single", b"\x89PNG\r\n\x1a\n" + bytes(range(64)),
                   0, web.port)
    serve(web, [noindex])
    web.add_host(image.host, web.addresses[1])
    web.respond(image.host, image.path, 200, headers={"Content-Type": "image/png"}, body=image.body)
    data = tmp_path / "data"
    cfg = crawl_config(web, data, scope={"seeds": [noindex.url, image.url]}, politeness={"rate": RATE})
    asyncio.run(crawl(cfg))
    assert Counter(page_requests(web)) == Counter([noindex.url, image.url])
    listing = pages_listing(data)
    assert set(listing) == {noindex.url, image.url}
    assert noindex.url not in listing[image.url] and image.url not in listing[noindex.url], listing


def _crash_after_storing(web: TestWeb, data: Path, copy_host: str) -> tuple[Served, Served, Config]:
    """Serve an original on beta.test and its near-copy on ``copy_host``; crawl the original in a child
    that dies between the store flush holding it and the frontier commit after it. Returns both pages
    and the config of that crawl."""
    base = article("crash")
    original, copy = (Served(host, path, "crash", "near", page_html("Crash", f"{host} daily", words, ""), 0,
                             web.port)
                      for host, path, words in (("beta.test", "/post.html", base),
                                                (copy_host, "/copy.html", edited(base, 0.01, "crash"))))
    assert hamming(fingerprint(original), fingerprint(copy)) <= NEAR
    serve(web, [original, copy])
    first = crawl_config(web, data, scope={"seeds": [original.url]}, politeness={"rate": RATE})
    mapping = json.dumps(dataclasses.asdict(first), default=str)
    proc = subprocess.run([sys.executable, "-c", CRASH_AFTER_FLUSH, mapping], capture_output=True,
                          timeout=60)
    assert proc.returncode == 9, proc.stderr.decode()
    return original, copy, first


def test_near_duplicate_found_after_crash_between_flush_and_commit(test_web: TestWebFactory,
                                                                    tmp_path: Path) -> None:
    # One host, so the replayed original is fetched before the copy (its seed comes first). The index
    # entry the crash lost comes back when the node opens (the next test has the copy find it without
    # the replay), and again with the replay.
    web = test_web(SiteSpec(hosts=1, pages_per_host=1))
    data = tmp_path / "data"
    original, copy, first = _crash_after_storing(web, data, "beta.test")
    records, n_bodies, _ = stored_records(data, first)
    assert records[original.url].kind == "response" and n_bodies == 1  # the flushed body survived

    cfg = crawl_config(web, data, scope={"seeds": [original.url, copy.url]}, politeness={"rate": RATE})
    asyncio.run(crawl(cfg))
    assert Counter(page_requests(web)) == Counter([original.url, original.url, copy.url])  # replayed
    records, n_bodies, bodies = stored_records(data, cfg, once=False)
    assert (records[copy.url].kind, records[copy.url].duplicate_of) == ("revisit", original.url)
    assert n_bodies == 2 and bodies[records[copy.url].own_hash] == copy.body  # the copy as its delta


def test_a_page_whose_body_a_crash_lost_is_stored_whole_when_replayed(test_web: TestWebFactory,
                                                                       tmp_path: Path) -> None:
    """A crash between a frontier commit and the store flush after it: the second page was handled while
    the flush before ran, so its near-duplicate index entry is committed and its body is not. Replayed,
    it must be stored whole, not as a revisit of its own lost body (pipeline.py, _near_duplicate)."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=1))
    first, second = (Served("beta.test", path, "crash", "near",
                            page_html(path, "beta daily", article(path), ""), 0, web.port)
                     for path in ("/first.html", "/post.html"))
    serve(web, [first, second])
    data = tmp_path / "data"
    # One host at 2 requests a second: the second page comes ~0.5 s after the first, after a checkpoint.
    cfg = crawl_config(web, data, scope={"seeds": [first.url, second.url]}, politeness={"rate": 2.0})
    mapping = json.dumps(dataclasses.asdict(cfg), default=str)
    proc = subprocess.run([sys.executable, "-c", CRASH_AFTER_COMMIT, mapping], capture_output=True,
                          timeout=60)
    assert proc.returncode == 9, proc.stderr.decode()
    records, _, _ = stored_records(data, cfg)
    assert second.url not in records  # its body and record were lost with the flush that never ran

    asyncio.run(crawl(cfg))
    assert Counter(page_requests(web))[second.url] == 2  # replayed
    records, n_bodies, bodies = stored_records(data, cfg, once=False)
    assert records[second.url].kind == "response" and records[second.url].duplicate_of is None
    assert bodies[records[second.url].content_hash] == second.body and n_bodies == 2


def test_a_page_stored_before_a_crash_is_found_by_a_near_copy_without_its_replay(
        test_web: TestWebFactory, tmp_path: Path) -> None:
    """A crash between a store flush and the frontier commit after it: the original's body is stored, its
    index entry lost. The node indexes it again when it opens (node.py, STORE_MARK), so a near-copy on
    another host finds it even though the original's replay finds nothing to index (it is gone now)."""
    web = test_web(SiteSpec(hosts=1, pages_per_host=1))
    data = tmp_path / "data"
    original, copy, _ = _crash_after_storing(web, data, "gamma.test")
    web.respond("beta.test", "/post.html", 404, body=b"gone")
    cfg = crawl_config(web, data, scope={"seeds": [original.url, copy.url]}, politeness={"rate": RATE})
    asyncio.run(crawl(cfg))
    records, n_bodies, bodies = stored_records(data, cfg, once=False)
    assert records[original.url].status == 404  # replayed, with nothing to index
    assert (records[copy.url].kind, records[copy.url].duplicate_of) == ("revisit", original.url)
    assert n_bodies == 3  # the original, the 404 page and the copy's own bytes as a delta of the original
    assert bodies[records[copy.url].own_hash] == copy.body
