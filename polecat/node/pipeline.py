"""What happens to one page response after the wire: the per-page pipeline of the node.

In order: retryable statuses go back to the frontier; redirects are queued like discovered URLs (hop count
carried); a 304 records a revisit; a body is parsed (links, text, meta robots), its outlinks
canonicalized and added to the frontier, checked for exact duplicates (content hash) and then for near
duplicates (fingerprint index, verified), and stored (or recorded as a revisit). The result is the
:class:`Completion` the node hands back to the frontier. Everything here runs on the event-loop thread
between awaits, inside the frontier's open write transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from polecat.clock import SYSTEM_CLOCK, Clock, wall_offset
from polecat.config import Config
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.minhash import Fingerprint, fingerprint
from polecat.dedup.nearindex import MAX_PAYLOAD, NearDupIndex, NearStats
from polecat.errors import CorruptRecord, NotFound
from polecat.fetch.http import Response, media_type
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import SEED_IMPORTANCE, Completion, Lease, child_importance
from polecat.frontier.refresh import Prior
from polecat.frontier.requisites import CSS_TYPE, stored_type
from polecat.frontier.routing import Admission
from polecat.frontier.traps import Soft404
from polecat.node.xmlbody import XmlBody
from polecat.parse.charset import decode_html, utf8_body
from polecat.parse.css import stylesheet_links
from polecat.parse.feed import FEED_TYPES, FeedParser, FeedResult, linked_feeds
from polecat.parse.guard import MAX_TEXT_CHARS, bound_body, bound_html, bound_links, whole_utf8
from polecat.parse.html import ParsedPage, parse_html
from polecat.parse.requisites import page_requisites
from polecat.parse.sitemap import SitemapParser, SitemapResult, SitemapWalk
from polecat.store.base import OWN_HASH_HEADER, SKIPPED_HEADER, FetchRecord, PageStore, hasher

log = logging.getLogger("polecat")

Stager = Callable[[Admission, int, float, int], None]
"""``(admission, depth, importance, hops)``: stages an admission's URLs for other owners (the cluster
link's :meth:`~polecat.cluster.link.ClusterLink.stage`)."""
Claimer = Callable[[FetchRecord, bytes, Fingerprint | None], "asyncio.Future[None]"]
"""Takes a page this store does not hold, to store it once its content claims are answered: in full, or
as a revisit of the copy another member stored first (polecat/cluster/claimlink.py); with a fingerprint
(a page with text whose near-duplicates are not kept in full), of a near copy too. The future is done
once it is stored."""

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
SITEMAP_TYPES = frozenset({"application/xml", "text/xml", "application/gzip", "application/x-gzip"})
"""Content types of a response that may be a sitemap nobody named (e.g. a sitemap URL due for refresh
after a restart); a named sitemap is read whatever its type."""
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
SITEMAP_IMPORTANCE = SEED_IMPORTANCE / 2
"""A root sitemap's importance: below the seeds, above what a page passes on to its links."""
PROBE_IMPORTANCE = 1e6
"""A soft-404 probe is its host's next request: before the pages it would judge."""


@dataclass(frozen=True, slots=True)
class Page:
    """A fetched page as the library API hands it to callbacks."""

    url: str
    status: int
    fetched_at: float
    content_type: str
    content_hash: bytes
    body: bytes
    text: str
    """Visible text of the parsed part of the page (``fetch.max_parse_bytes``), at most
    ``parse.guard.MAX_TEXT_CHARS`` characters: the near-duplicate fingerprint's input."""
    links: tuple[str, ...]
    """Canonical outlinks (before scope and seen filtering)."""
    depth: int
    truncated: bool
    duplicate_of: str | None
    """URL of the page this one near-duplicates (or of its own previous fetch when unchanged)."""
    title: str
    """The first ``<title>`` of an HTML page, whitespace stripped ("" when it has none, or is not HTML)."""


class PagePipeline:
    """Turns a page lease's response into stored records, queued outlinks and a :class:`Completion`."""

    def __init__(self, cfg: Config, *, frontier: Frontier, db: FrontierDB, store: PageStore,
                 canon: Canonicalizer, agent_token: str, errors: Counter[str],
                 emit: Callable[[Page], None], wake: Callable[[], None], stage: Stager | None = None,
                 claim: Claimer | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = cfg
        self._clock = clock
        self._frontier = frontier
        self._db = db
        self._store = store
        self._hash = hasher(store.hash_name)
        self._canon = canon
        self._near = NearDupIndex(db.near)
        self._agent_token = agent_token
        self._errors = errors
        self._emit = emit
        self._wake = wake
        self._stage = stage
        self._claim = claim
        self._held: dict[str, asyncio.Future[None]] = {}
        """Pages handed to ``claim``, by URL, until their lease waits for them (:meth:`stored`)."""
        self.near_dups = 0
        """Pages recorded as near-duplicates of another stored page in this run."""
        self.near_deltas = 0
        """Of them, those whose own bytes were stored as a delta (polecat/store/delta.py) in this run."""
        self.pages_cut = 0
        """HTML pages parsed only up to the parse budget in this run (polecat/parse/guard.py)."""
        self.requisites_queued = 0
        """Page requisites queued in this run (polecat/frontier/requisites.py)."""
        self._sitemaps: dict[str, SitemapWalk] = {}
        """Sitemap URLs of this run, each with the walk of its root (nesting and file limits)."""
        self._soft404 = Soft404()

    def near_stats(self) -> NearStats:
        """The near-duplicate index's counters in this run."""
        return self._near.stats()

    def stream_for(self, lease: Lease) -> BodyChooser:
        """The fetcher's ``stream`` for ``lease``: a sitemap or feed is read as it arrives."""
        return BodyChooser(self, lease.url)

    def xml_body(self, url: str, content_type: str) -> XmlBody | None:
        """A sink for a 2xx body that may be a sitemap (one named, or of an XML type) or a feed
        (polecat/node/xmlbody.py); None for any other body."""
        if url in self._sitemaps:
            readers: tuple[SitemapParser | FeedParser, ...] = (SitemapParser(),)
        elif content_type in FEED_TYPES:
            readers = (FeedParser(),)
        elif content_type in SITEMAP_TYPES:
            readers = (SitemapParser(), FeedParser())
        else:
            return None
        return XmlBody(readers, self._store.hash_name, self.config.fetch.max_body_bytes)

    def handle(self, lease: Lease, resp: Response, started: float,
               streamed: XmlBody | None = None) -> Completion:
        """Process the response to ``lease`` (a request started at wall time ``started``); ``streamed``:
        the sink its body went to, if it was streamed (:meth:`stream_for`)."""
        attempt = attempt_of(resp, self._clock)
        status = resp.status
        if lease.url in self._soft404.issued:
            return self._probe_answered(lease, resp, attempt)
        if status in RETRY_STATUSES:
            self._errors[f"http_{status}"] += 1
            return Completion(attempt, "retry", str(status), ip=resp.remote_ip)
        if 300 <= status < 400 and status != 304:
            if resp.location:
                self._follow_redirect(lease, resp.location, started)
            self._store_record(lease.url, resp, started, resp.body)
            return Completion(attempt, "redirect", str(status), ip=resp.remote_ip)
        if status == 304:
            prev = self._store.history(lease.url)
            if prev:
                self._store.put(FetchRecord(lease.url, started, 304, resp.headers, prev[-1].content_hash, 0,
                                            duplicate_of=lease.url, kind="revisit"), None)
            return Completion(attempt, "not_modified", "304", prev[-1].content_hash if prev else None,
                              ip=resp.remote_ip, changed=False)
        digest, duplicate_of = self._process_body(lease, resp, started, streamed)
        return Completion(attempt, "fetched", str(status), digest, etag=resp.header("etag"),
                          last_modified=resp.header("last-modified"), ip=resp.remote_ip,
                          changed=duplicate_of != lease.url)

    def _process_body(self, lease: Lease, resp: Response, started: float,
                      streamed: XmlBody | None) -> tuple[bytes, str | None]:
        """Parse, queue outlinks, dedup and store a 2xx/4xx body; returns its hash and what it duplicates."""
        sink = streamed if resp.streamed else None
        if sink is None and 200 <= resp.status < 300:
            sink = self.xml_body(lease.url, resp.content_type)
            if sink is not None:
                sink.feed(resp.body)
        if sink is not None:
            result, accepted = sink.close()
            if accepted or lease.url in self._sitemaps:
                if isinstance(result, FeedResult):
                    self._read_feed(lease, resp, result, started)
                else:
                    self._read_sitemap(lease, resp, result, started)
                return sink.digest(), None
            if resp.streamed:  # XML, but neither a sitemap nor a feed: a page after all
                resp = replace(resp, body=bytes(sink.head or b""), truncated=resp.truncated or sink.cut)
        body = resp.body
        digest = self._hash(body)
        ok = 200 <= resp.status < 300
        requisites = self.config.scope.requisites
        # requisites.py rule 6: a requisite is stored, never parsed for links (a stylesheet for its own)
        requisite = requisites and self._frontier.is_requisite(lease.url)
        is_html = resp.content_type in HTML_TYPES and not requisite
        text = title = ""
        links: tuple[str, ...] = ()
        if requisites and ok and resp.content_type == CSS_TYPE:
            self._css_requisites(lease, resp, started)
        if is_html and ok:
            parsed, text, raw, doc = self._parse(lease.url, body, resp.charset)
            title = parsed.title
            soft = self._soft_404(lease, text)
            if soft:
                self._store_record(lease.url, resp, started, None, skipped=soft)
                return digest, None
            links = self._add_links(raw, parsed.base, lease, started)
            if not parsed.nofollow:
                self._add_feeds(body, lease, started)
            if parsed.noindex:
                self._store_record(lease.url, resp, started, None, skipped="noindex")
                return digest, None
            if requisites:
                self._page_requisites(doc, parsed.base, lease, started)
        if (ok and not requisite and resp.content_type not in self.config.fetch.store_types
                and not stored_type(self.config.scope, resp.content_type)):
            self._store_record(lease.url, resp, started, None, skipped="type")
            return digest, None
        duplicate_of = None
        fp: Fingerprint | None = None
        if text and not self._store.has(digest):
            duplicate_of, fp = self._near_duplicate(lease.url, digest, text)
        elif text:
            # The body may have outlived its fingerprint (a crash after the store flush, before the
            # frontier commit that holds the index): keep every stored page findable.
            match = self._index_stored(lease.url, digest, text)
            if match is not None and match[32:].decode() != lease.url:
                self._duplicate_seen(lease, started)
        if duplicate_of is not None and duplicate_of[1] != lease.url:
            self._duplicate_seen(lease, started)
        keep = self.config.dedup.near_duplicates
        if duplicate_of is not None and keep != "full":
            orig_hash, orig_url = duplicate_of
            headers = (*resp.headers, (OWN_HASH_HEADER, digest.hex()))  # listings show both hashes
            # "delta": the store keeps this page's own bytes against the original's (store/delta.py).
            self.near_deltas += self._store.put(
                FetchRecord(lease.url, started, resp.status, headers, orig_hash, len(body), resp.truncated,
                            duplicate_of=orig_url, kind="revisit"),
                body if keep == "delta" else None)
            self._emit_page(lease, resp, started, orig_hash, body, (text, title), links, orig_url)
            return orig_hash, orig_url
        if self._claim is not None and not self._store.has(digest):
            self._held[lease.url] = self._claim(FetchRecord(
                lease.url, started, resp.status, resp.headers, digest, len(body), resp.truncated), body,
                fp if keep != "full" else None)
        else:
            self._store_record(lease.url, resp, started, body, digest=digest)
        if 200 <= resp.status < 300:
            self._emit_page(lease, resp, started, digest, body, (text, title), links, None)
        return digest, None

    def holds(self, url: str) -> bool:
        """Whether :meth:`handle` handed the page of ``url`` to the content claims and it waits there."""
        held = self._held.get(url)
        return held is not None and not held.done()

    async def stored(self, url: str) -> None:
        """Return once the page of ``url`` that :meth:`handle` handed to the content claims is stored (at
        once for any other page): its lease is completed only then, so a commit never records as done a
        page whose store record is not written."""
        held = self._held.pop(url, None)
        if held is not None:
            await held

    def add_sitemaps(self, origin: str, named: tuple[str, ...], now: float) -> None:
        """Queue the sitemaps the robots.txt of ``origin`` names (``refresh.sitemaps``), and
        ``/sitemap.xml`` with ``refresh.guess_sitemap``: fetched like pages of their host, politely."""
        rc = self.config.refresh
        roots = [*(named if rc.sitemaps else ()), *((origin + "/sitemap.xml",) if rc.guess_sitemap else ())]
        for raw in roots:
            url = self._canon.canonicalize(raw, origin + "/")
            if url is None or url in self._sitemaps:
                continue
            self._sitemaps[url] = self._walk(url)
            self._db.applied(self._frontier.add(url, 0, SITEMAP_IMPORTANCE, now))
            self._wake()

    def _walk(self, root: str) -> SitemapWalk:
        rc = self.config.refresh
        walk = SitemapWalk(rc.sitemap_depth, rc.sitemap_files, errors=self._errors, prefix="sitemap:")
        walk.add_root(root)
        return walk

    def _read_sitemap(self, lease: Lease, resp: Response, result: SitemapResult, now: float) -> None:
        """A sitemap read (one named by robots.txt or an index, or an XML body that is one): queue its URLs
        and its child sitemaps."""
        walk = self._sitemaps.get(lease.url)
        if walk is None:
            walk = self._sitemaps[lease.url] = self._walk(lease.url)
        result.sitemaps = self._canon.canonicalize_links(result.sitemaps, lease.url)
        for child in walk.children(lease.url, result):
            self._sitemaps[child] = walk
            self._db.applied(self._frontier.add(child, lease.depth, lease.importance, now))
        urls = self._sitemap_urls(result, lease, now)
        self._wake()
        if result.error is not None:
            log.warning("sitemap %s refused: %s (%d URLs kept)", lease.url, result.error, len(urls))
        self._store_record(lease.url, resp, now, None, skipped="sitemap")

    def _read_feed(self, lease: Lease, resp: Response, result: FeedResult, now: float) -> None:
        """A feed read (polecat/parse/feed.py): its item links are queued at once with the feed's own
        importance, each item's date kept as its refresh prior, and the gap between the items' dates (else
        the newest date) as the feed's (refresh rule 4); the feed is refreshed on the schedule its history
        learns."""
        urls: dict[str, None] = {}
        for entry in result.items:
            url = self._canon.canonicalize(entry.link, lease.url)
            if url is None:
                continue
            urls[url] = None
            if entry.published is not None:
                self._db.apply(self._frontier.set_prior(url, Prior(lastmod=entry.published)))
        newest = max((e.published for e in result.items if e.published is not None), default=None)
        if newest is not None:  # the feed changed when its newest item came: its Last-Modified
            prior = Prior(lastmod=newest, every=result.item_gap())
            self._db.apply(self._frontier.set_prior(lease.url, prior))
        if urls:
            self._admit(tuple(urls), lease.depth + 1, lease.importance, now, 0)
        if result.error is not None:
            self._errors[f"feed:{result.error}"] += 1
            log.warning("feed %s refused: %s (%d items kept)", lease.url, result.error, len(urls))
        self._store_record(lease.url, resp, now, None, skipped="feed")

    def _add_feeds(self, body: bytes, lease: Lease, now: float) -> None:
        """Queue the feeds a page links (polecat/parse/feed.py rule 5) with the page's importance."""
        hrefs = linked_feeds(body)
        if hrefs:
            feeds = tuple(dict.fromkeys(self._canon.canonicalize_links(hrefs, lease.url)))
            self._admit(feeds, lease.depth + 1, lease.importance, now, 0)

    def _sitemap_urls(self, result: SitemapResult, lease: Lease, now: float) -> list[str]:
        """Queue a urlset's URLs (importance scaled by their ``priority``, 0.5 being the protocol's
        default) and keep their ``lastmod``/``changefreq`` as refresh priors. Returns the URLs."""
        share = child_importance(lease.importance, max(1, len(result.urls)))
        by_priority: dict[float, list[str]] = {}
        for entry in result.urls:
            url = self._canon.canonicalize(entry.loc, lease.url)
            if url is None:
                continue
            weight = 0.5 if entry.priority is None else entry.priority
            by_priority.setdefault(weight, []).append(url)
            if entry.lastmod is not None or entry.changefreq is not None:
                prior = Prior(entry.lastmod, entry.changefreq, entry.priority)
                self._db.apply(self._frontier.set_prior(url, prior))
        for weight, urls in by_priority.items():
            importance = share * max(weight, 0.01) / 0.5
            self._db.applied(self._frontier.add_many(urls, lease.depth + 1, importance, now))
        return [u for urls in by_priority.values() for u in urls]

    def _parse(self, url: str, body: bytes,
               charset: str | None) -> tuple[ParsedPage, str, list[str], str | bytes]:
        """Parse a page within the bounds of :mod:`polecat.parse.guard`: returns the parse, the text to
        fingerprint, the hrefs to queue (outlinks, then the canonical link) and the document parsed (its
        well-formed UTF-8 bytes or its bounded text). A cut page is counted and logged at info
        (``pages_cut``; not an error: the page was fetched and stored whole, and what was read before the
        cut is kept)."""
        head, size_cut = bound_body(body, self.config.fetch.max_parse_bytes)
        utf8 = utf8_body(head, charset)
        doc: str | bytes
        if utf8 is not None and whole_utf8(utf8):  # most pages: parsed from their bytes, never decoded
            doc = utf8
            parsed = parse_html(utf8, url, agent_token=self._agent_token)
            bound_cut = "size" if size_cut else None
        else:
            bounded = bound_html(decode_html(head, charset), cut=size_cut)
            doc = bounded.html
            parsed = parse_html(bounded.html, url, agent_token=self._agent_token)
            bound_cut = bounded.cut
        raw, dropped = bound_links((*parsed.links, parsed.canonical) if parsed.canonical else parsed.links)
        cut = bound_cut or ("links" if dropped else None)
        if cut is not None:
            self.pages_cut += 1
            log.info("parse budget (%s) cut %s: %d links kept, %d dropped", cut, url, len(raw), dropped)
        return parsed, parsed.text[:MAX_TEXT_CHARS], raw, doc

    def _page_requisites(self, doc: str | bytes, base: str, lease: Lease, now: float) -> None:
        """Queue the requisites of an HTML page (polecat/parse/requisites.py; frontier/requisites.py)."""
        found = page_requisites(doc if isinstance(doc, str) else doc.decode())
        if found.cut:
            log.info("requisite bounds cut %s: %d kept", lease.url, len(found.urls))
        self._admit_requisites(found.urls, base, lease, now)

    def _css_requisites(self, lease: Lease, resp: Response, now: float) -> None:
        """Queue what a stylesheet loads (its ``url()`` and ``@import``; polecat/parse/css.py)."""
        found = stylesheet_links(resp.body, resp.charset)
        if found.cut:
            log.info("CSS bounds cut %s: %d references kept", lease.url, len(found.urls))
        self._admit_requisites(found.urls, lease.url, lease, now)

    def _admit_requisites(self, refs: tuple[str, ...], base: str, lease: Lease, now: float) -> None:
        """Requisites at their page's depth + 1 and importance (requisites.py rule 5)."""
        urls = list(dict.fromkeys(self._canon.canonicalize_links(list(refs), base)))
        if urls:
            self._admit(urls, lease.depth + 1, lease.importance, now, 0, requisites=True)

    def _probe_answered(self, lease: Lease, resp: Response, attempt: Attempt) -> Completion:
        """A soft-404 probe's answer (frontier/traps.py rule 3): a 2xx page becomes the host's "not found"
        signature. Nothing is stored and no link followed: the URL is not the site's."""
        signature = None
        if 200 <= resp.status < 300 and resp.content_type in HTML_TYPES:
            _, text, _, _ = self._parse(lease.url, resp.body, resp.charset)
            signature = fingerprint(text)
            self._frontier.count_trap(lease.host, "soft_404_probe")
        self._soft404.answered(lease.url, lease.host, signature)
        return Completion(attempt, "skipped", f"soft_404_probe:{resp.status}", ip=resp.remote_ip)

    def _soft_404(self, lease: Lease, text: str) -> str:
        """``"soft_404"`` for a page like its host's probe answer (frontier/traps.py rule 3), else ``""``."""
        if lease.host in self._soft404.signatures and self._soft404.matches(
                lease.host, fingerprint(text), self.config.dedup.minhash_distance):
            self._frontier.count_trap(lease.host, "trap:soft_404")
            self._errors["soft_404"] += 1
            return "soft_404"
        return ""

    def _duplicate_seen(self, lease: Lease, now: float) -> None:
        """A page duplicated another URL's: after a few on one host, probe it for a soft-404 page."""
        if not self.config.scope.soft_404_probe:
            return
        probe = self._soft404.duplicate_seen(lease.host, lease.url)
        if probe is not None:
            self._db.applied(self._frontier.add(probe, 0, PROBE_IMPORTANCE, now))
            self._wake()

    def _near_duplicate(self, url: str, digest: bytes,
                        text: str) -> tuple[tuple[bytes, str] | None, Fingerprint]:
        """(hash, URL) of a stored page within the fingerprint distance, or None after indexing this one;
        and the page's fingerprint (for its near claim, polecat/cluster/claims.py rule 9).

        A match whose body the store does not hold is no match. The index entries of the pages handled
        while a store flush runs are committed with the frontier right after it, but their bodies wait
        for the next flush: a crash in between keeps the entries without the bodies. Taken for a match,
        such an entry would make the replayed page a revisit of its own lost body, and any near-copy a
        revisit of nothing."""
        fp = fingerprint(text)
        txn = self._db.txn
        match = self._near.find(txn, fp, self.config.dedup.minhash_distance)
        if match is not None:
            if self._store.has(match[:32]):
                self.near_dups += 1
                return (match[:32], match[32:].decode()), fp
            if self._claim is None:  # with claims, the match may be a copy another member stored
                self._errors["near_dup_unstored"] += 1
        self._index(url, digest, fp)
        return None, fp

    def reindex(self, records: Iterable[FetchRecord]) -> int:
        """Index again the stored pages among ``records`` whose near-duplicate index entries a crash lost
        (the node passes the store records past the frontier's last commit), as a replayed page indexes
        itself; returns how many were missing. A body that cannot be read back is logged and skipped."""
        added = 0
        for rec in records:
            if rec.kind != "response" or not 200 <= rec.status < 300 or rec.size == 0:
                continue
            if any(name == SKIPPED_HEADER for name, _ in rec.headers):
                continue
            mime, charset = media_type(rec.header("content-type"))
            if mime not in HTML_TYPES:
                continue
            try:
                body = self._store.get(rec.content_hash)
            except (NotFound, CorruptRecord) as exc:
                log.warning("near-duplicate index: %s not re-indexed: %s", rec.url, exc)
                continue
            _, text, _, _ = self._parse(rec.url, body, charset)
            if text and self._index_stored(rec.url, rec.content_hash, text) is None:
                added += 1
        return added

    def _index_stored(self, url: str, digest: bytes, text: str) -> bytes | None:
        """Index a page whose body the store holds, unless a page of the same fingerprint is indexed:
        that entry's payload, or None when this one was added."""
        fp = fingerprint(text)
        match = self._near.find(self._db.txn, fp, 0)
        if match is None:
            self._index(url, digest, fp)
        return match

    def _index(self, url: str, digest: bytes, fp: Fingerprint) -> None:
        payload = digest + url.encode()
        if len(payload) <= MAX_PAYLOAD:  # an LMDB dupsort value limit; such long URLs are rare
            self._db.apply(self._near.add(fp, payload))

    def _store_record(self, url: str, resp: Response, started: float, body: bytes | None, *,
                      digest: bytes | None = None, skipped: str = "") -> None:
        if body is None:
            # Fetched but not stored (type, noindex): the history still records the fetch.
            headers = (*resp.headers, (SKIPPED_HEADER, skipped))
            self._store.put(FetchRecord(url, started, resp.status, headers, self._hash(b""), 0,
                                        resp.truncated), b"")
            return
        self._store.put(FetchRecord(url, started, resp.status, resp.headers,
                                    digest or self._hash(body), len(body), resp.truncated), body)

    def _follow_redirect(self, lease: Lease, location: str, now: float) -> None:
        """Queue a redirect target like a discovered URL, politely, with the hop count carried."""
        if lease.hops >= self.config.fetch.max_redirects:
            self._errors["too_many_redirects"] += 1
            return
        target = self._canon.canonicalize(location, lease.url)
        if target is not None:
            # where a requisite moved is a requisite too (frontier/requisites.py rule 3)
            moved = self.config.scope.requisites and self._frontier.is_requisite(lease.url)
            self._admit([target], lease.depth, lease.importance, now, lease.hops + 1, requisites=moved)

    def _add_links(self, raw: list[str], base: str, lease: Lease, now: float) -> tuple[str, ...]:
        urls = tuple(dict.fromkeys(self._canon.canonicalize_links(raw, base)))
        if urls:
            importance = child_importance(lease.importance, len(urls))
            self._admit(urls, lease.depth + 1, importance, now, 0)
        return urls

    def _admit(self, urls: tuple[str, ...] | list[str], depth: int, importance: float, now: float,
               hops: int, *, requisites: bool = False) -> None:
        """Routing before dedup (polecat/frontier/routing.py): the frontier decides, the link stages.
        ``requisites``: a page's requisites (polecat/frontier/requisites.py)."""
        if requisites:
            decided = self._frontier.admit_requisites(list(urls), depth, importance, now, hops=hops)
        else:
            decided = self._frontier.admit(urls, depth, importance, now, hops=hops)
        admission = self._db.applied(decided)
        if requisites:
            self.requisites_queued += admission.accepted
        if admission.outbox and self._stage is not None:
            self._stage(admission, depth, importance, hops)
        if admission.accepted:
            self._wake()

    def _emit_page(self, lease: Lease, resp: Response, started: float, digest: bytes, body: bytes,
                   words: tuple[str, str], links: tuple[str, ...], duplicate_of: str | None) -> None:
        """``words``: the page's text and title."""
        text, title = words
        self._emit(Page(lease.url, resp.status, started, resp.content_type, digest, body, text, links,
                        lease.depth, resp.truncated, duplicate_of, title))


class BodyChooser:
    """The fetcher's ``stream`` for one lease (:class:`polecat.fetch.http.StreamChoice`): asked at the
    response head, it gives a sitemap or feed body its sink and keeps it for :meth:`PagePipeline.handle`."""

    __slots__ = ("_pipeline", "_url", "sink")

    def __init__(self, pipeline: PagePipeline, url: str) -> None:
        self._pipeline = pipeline
        self._url = url
        self.sink: XmlBody | None = None

    def __call__(self, status: int, content_type: str) -> XmlBody | None:
        if not 200 <= status < 300:
            return None
        self.sink = self._pipeline.xml_body(self._url, content_type)
        return self.sink


def attempt_of(resp: Response, clock: Clock) -> Attempt:
    """The response's monotonic timings (the fetcher's clock) as wall-clock seconds, converted with an
    offset read now: the fetcher may have started its clock after the node's own start sample (a
    connection-pool wait), and an anchor computed from that sample would come out early. The offset
    errs late, never early (polecat/clock.py's rule)."""
    offset = wall_offset(clock)
    return Attempt(resp.started + offset, resp.ended + offset, resp.first_byte + offset, resp.status,
                   resp.retry_after)
