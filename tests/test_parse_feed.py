"""Feed parsing (polecat/parse/feed.py): RSS 2.0 and Atom fields, dates, and the sitemap guards."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.parse.feed import FeedResult, parse_feed
from polecat.parse.sitemap import parse_lastmod


def rss(*items: str) -> bytes:
    return (f'<?xml version="1.0"?><rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel>'
            f'<title>t</title><link>http://a.test/</link><atom:link href="http://a.test/feed" rel="self"/>'
            f'{"".join(items)}</channel></rss>').encode()


def item(link: str, date: str = "") -> str:
    return f"<item><title>x</title><link>{link}</link>{f'<pubDate>{date}</pubDate>' if date else ''}</item>"


def atom(*entries: str) -> bytes:
    return f'<feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>{"".join(entries)}</feed>'.encode()


def test_rss_items_links_and_dates() -> None:
    r = parse_feed(rss(item("http://a.test/1", "Sun, 06 Nov 1994 08:49:37 GMT"),
                       item("http://a.test/2", "not a date"), item("/relative"), item("ftp://a.test/x"),
                       "<item><title>no link</title></item>"))
    assert (r.kind, r.error) == ("rss", None)
    assert [(i.link, i.published) for i in r.items] == [
        ("http://a.test/1", 784111777.0), ("http://a.test/2", None), ("/relative", None)]
    assert r.skipped == 2


def test_atom_takes_the_alternate_link_and_updated_then_published() -> None:
    r = parse_feed(atom(
        '<entry><link rel="self" href="http://a.test/self"/><link href="http://a.test/e1"/>'
        "<published>2024-01-01T00:00:00Z</published><updated>2024-01-02T00:00:00Z</updated></entry>",
        '<entry><link rel="alternate" href="http://a.test/e2"/><published>2024-01-03T00:00:00Z</published>'
        "</entry>",
        '<entry><link rel="enclosure" href="http://a.test/e3.mp3"/></entry>'))
    assert r.kind == "atom"
    assert [(i.link, i.published) for i in r.items] == [
        ("http://a.test/e1", parse_lastmod("2024-01-02")), ("http://a.test/e2", parse_lastmod("2024-01-03"))]
    assert r.skipped == 1


def test_item_gap_from_the_dates() -> None:
    dates = [f"Mon, 01 Jan 2024 00:{m}:00 GMT" for m in ("00", "10", "30")]
    assert parse_feed(rss(*(item(f"http://a.test/{i}", d) for i, d in enumerate(dates)))).item_gap() == 900.0
    assert parse_feed(rss(item("http://a.test/1", dates[0]))).item_gap() is None
    assert FeedResult().item_gap() is None


def test_gzip_feed_in_small_chunks_and_bombs_stop_at_the_cap() -> None:
    body = rss(*(item(f"http://a.test/{i}") for i in range(500)))
    r = parse_feed(gzip.compress(body), chunk=5)
    assert r.error is None and len(r.items) == 500
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = comp.compress(b"<rss><channel>") + b"".join(comp.compress(b" " * (1 << 20)) for _ in range(256))
    bomb += comp.flush()
    assert parse_feed(bomb, max_bytes=1 << 20).error == "too_large"


@pytest.mark.parametrize(("body", "reason"), [
    (b'<!DOCTYPE r [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><rss><channel>'
     b"<item><link>http://a.test/&b;</link></item></channel></rss>", "entities"),
    (b'<!DOCTYPE rss SYSTEM "http://a.test/evil.dtd"><rss/>', "entities"),
    (b"<html><body>no</body></html>", "not_a_feed"),
    (b"<urlset><url><loc>http://a.test/</loc></url></urlset>", "not_a_feed"),
    (b"<rss><channel><item>", "malformed"),
    (b"\x1f\x8bgarbage", "bad_gzip"),
])
def test_hostile_and_wrong_documents_named(body: bytes, reason: str) -> None:
    r = parse_feed(body)
    assert r.error == reason and r.items == []


def test_too_many_items_keeps_those_read() -> None:
    r = parse_feed(rss(*(item(f"http://a.test/{i}") for i in range(11))), max_items=10)
    assert r.error == "too_many_items" and len(r.items) == 10


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=30), st.integers(1, 97))
def test_property_rss_items_round_trip_in_any_chunking(ids: list[int], chunk: int) -> None:
    r = parse_feed(rss(*(item(f"http://a.test/{i}") for i in ids)), chunk=chunk)
    assert r.error is None and [i.link for i in r.items] == [f"http://a.test/{i}" for i in ids]
