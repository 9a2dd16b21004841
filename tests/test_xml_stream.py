"""Sitemaps and feeds read as they arrive (polecat/node/xmlbody.py, the fetcher's ``stream``): past
``fetch.max_body_bytes``, in bounded memory, and an XML body that is neither still handled as a page."""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.config import DnsConfig, FetchConfig
from polecat.fetch.http import Fetcher
from polecat.node.xmlbody import STREAM_MAX_BYTES, XmlBody
from polecat.parse.feed import FeedParser, FeedResult, linked_feeds
from polecat.parse.sitemap import SitemapParser, SitemapResult
from polecat.store.base import SHA256
from polecat.testing.fakes import Canned
from polecat.testing.hostile import HostileServer, respond
from polecat.testing.newsweb import big_sitemap
from tests.frontier_helpers import canon

CAP = 256 * 1024
URLS = 5_000  # about 4.5 MB of XML: 17x the page cap
SITEMAP = big_sitemap("http://a.test", URLS)
XML = [("Content-Type", "application/xml")]


def both() -> XmlBody:
    return XmlBody((SitemapParser(), FeedParser()), SHA256, CAP)


def feed_all(sink: XmlBody, body: bytes, step: int = 65536) -> None:
    for i in range(0, len(body), step):
        sink.feed(body[i : i + step])


def test_an_accepted_sitemap_keeps_nothing_and_hashes_the_whole_body() -> None:
    sink = both()
    feed_all(sink, SITEMAP)
    assert sink.head is None and not sink.done
    result, accepted = sink.close()
    assert accepted and isinstance(result, SitemapResult) and len(result.urls) == URLS
    assert sink.digest() == hashlib.sha256(SITEMAP).digest()


def test_xml_that_is_neither_is_kept_up_to_the_page_cap_then_done() -> None:
    sink = both()
    body = b"<svg>" + b"<g/>" * CAP + b"</svg>"
    feed_all(sink, body)
    assert sink.done and sink.cut and sink.head == body[:CAP]
    result, accepted = sink.close()
    assert not accepted and isinstance(result, SitemapResult) and result.error == "not_a_sitemap"


def test_a_hostile_document_stops_the_read() -> None:
    # An accepted sitemap over its entry cap: the reader stops, nothing is kept, the read ends.
    sink = XmlBody((SitemapParser(max_entries=10),), SHA256, CAP)
    feed_all(sink, SITEMAP, 4096)
    assert sink.done
    assert sink.close()[0].error == "too_many_entries"
    # A gzip bomb stops at the reader's cap after one step over it, long before the 10 GiB.
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join([comp.compress(b"<urlset>"), *(comp.compress(b" " * (1 << 20)) for _ in range(80)),
                     comp.flush()])
    sink = XmlBody((SitemapParser(max_bytes=8 << 20),), SHA256, CAP)
    feed_all(sink, bomb)
    assert sink.done and sink.close()[0].error == "too_large"


@given(st.binary(max_size=2000), st.integers(1, 64))
def test_property_arbitrary_bytes_never_raise_and_stay_within_the_caps(body: bytes, chunk: int) -> None:
    sitemap = SitemapParser(max_entries=50, max_bytes=10_000)
    feed = FeedParser(max_items=50, max_bytes=10_000)
    sink = XmlBody((sitemap, feed), SHA256, 1000)
    for i in range(0, len(body), chunk):
        sink.feed(body[i : i + chunk])
    assert sink.head is None or len(sink.head) <= 1000
    result, accepted = sink.close()
    assert accepted == (sitemap.root is not None or feed.root is not None)
    assert accepted or result.error is not None
    found = sitemap.close()
    assert len(found.urls) + len(found.sitemaps) <= 50 and len(feed.close().items) <= 50


def test_a_feed_served_as_xml_is_read_as_one() -> None:
    sink = both()
    feed_all(sink, b'<rss version="2.0"><channel><item><link>http://a.test/1</link></item></channel></rss>')
    result, accepted = sink.close()
    assert accepted and isinstance(result, FeedResult) and [i.link for i in result.items] == ["http://a.test/1"]


def test_linked_feeds_from_the_head() -> None:
    page = (b"<html><head><link rel='stylesheet' href='/s.css'><link rel=alternate hreflang=fr href=/fr>"
            b'<LINK REL="Alternate" TYPE="application/RSS+xml" HREF="/feed?a=1&amp;b=2">'
            b'<link type="application/atom+xml" rel="alternate home" href="http://a.test/atom">'
            b'<link rel="alternate" type="application/atom+xml" href="">'
            b"</head><body>" + b"<p>x</p>" * 20_000
            + b'<link rel="alternate" type="application/rss+xml" href="/late"></body></html>')
    assert linked_feeds(page) == ["/feed?a=1&b=2", "http://a.test/atom"]
    assert linked_feeds(b"<html><head><link rel=alternate href=/fr></head></html>") == []
    many = b"".join(b'<link rel="alternate" type="application/rss+xml" href="/f%d">' % i for i in range(50))
    assert len(linked_feeds(many)) == 8


@pytest.mark.timeout(60)
@pytest.mark.asyncio
async def test_the_fetcher_streams_a_sitemap_past_the_page_cap_plain_and_gzip() -> None:
    routes = {"/s.xml": respond(200, SITEMAP, XML),
              "/s.xml.gz": respond(200, gzip.compress(SITEMAP), [("Content-Type", "application/gzip")]),
              "/s-encoded.xml": respond(200, gzip.compress(SITEMAP), [*XML, ("Content-Encoding", "gzip")]),
              "/big.xml": respond(200, b"<x>" + b" " * (STREAM_MAX_BYTES + 10) + b"</x>", XML),
              "/missing": respond(404, SITEMAP, XML)}
    cfg = FetchConfig(max_body_bytes=CAP, total_timeout=30.0)
    async with HostileServer(routes) as srv, Fetcher(cfg, DnsConfig(allow_private=True)) as fetcher:
        for path in ("/s.xml", "/s.xml.gz", "/s-encoded.xml"):
            sinks: list[XmlBody] = []

            def choose(status: int, ctype: str, sinks: list[XmlBody] = sinks) -> XmlBody | None:
                sinks.append(both())
                return sinks[-1]

            resp = await fetcher.fetch(srv.url(path), stream=choose)
            assert resp.streamed and resp.body == b"" and not resp.truncated
            result, accepted = sinks[0].close()
            assert accepted and result.error is None and isinstance(result, SitemapResult)
            assert len(result.urls) == URLS, path
        # XML past the stream's cap: kept to the page cap, the read cut there; a 404 streams nothing.
        big: list[XmlBody] = []
        resp = await fetcher.fetch(srv.url("/big.xml"), stream=lambda s, t: big.append(both()) or big[-1])
        assert resp.streamed and resp.truncated and big[0].head is not None and len(big[0].head) == CAP
        resp = await fetcher.fetch(srv.url("/missing"), stream=lambda s, t: both() if s == 200 else None)
        assert not resp.streamed and resp.status == 404 and len(resp.body) == CAP and resp.truncated


def test_the_pipeline_reads_a_streamed_feed_and_a_streamed_page_that_was_no_feed(tmp_path: Path) -> None:
    # Through the fake fetcher's stream, as the lease runner calls it: a feed's items are queued with the
    # feed's importance and its date kept as a prior; XML that is neither goes on as a page.
    import asyncio

    from tests.test_pipeline import Harness

    h = Harness(tmp_path)
    feed = (b'<rss version="2.0"><channel><item><link>http://a.test/story</link>'
            b"<pubDate>Mon, 01 Jan 2024 00:00:00 GMT</pubDate></item></channel></rss>")
    rss_type = (("Content-Type", "application/rss+xml"),)
    h.fetcher.pages[canon("http://a.test/feed")] = Canned(200, feed, rss_type)
    h.fetcher.pages[canon("http://a.test/pic.svg")] = Canned(200, b"<svg><g/></svg>", tuple(XML))
    for url in ("http://a.test/feed", "http://a.test/pic.svg"):
        lease = h.lease(url)
        stream = h.pipeline.stream_for(lease)
        resp = asyncio.run(h.fetcher.fetch(lease.url, stream=stream))
        assert resp.streamed and stream.sink is not None
        done = h.pipeline.handle(lease, resp, h.clock.wall(), stream.sink)
        assert done.outcome == "fetched"
    assert h.rig.frontier.queued == 1  # the story; the svg page links nothing
    got = h.store.history(canon("http://a.test/pic.svg"))
    assert got and got[-1].size == 0  # not a stored type, but handled as a page (recorded, type skip)
    assert h.errors == Counter()
