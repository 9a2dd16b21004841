"""The compact rows of schema 4 (polecat/frontier/records.py): every queued URL and URL record reads back
as it was written, in fewer bytes than schema 3's, and schema 3's forms (which slice bundles carry) still
read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from polecat.frontier.keys import queue_key
from polecat.frontier.records import MIN_IMPORTANCE, QueuedUrl, UrlRecord

HOSTS = st.sampled_from(["a.test", "b.example:8080", "[::1]:81", "xn--bcher-kva.test"])
IMPORTANCE = st.one_of(st.sampled_from([1.0, 0.5, 0.25, MIN_IMPORTANCE]),
                       st.floats(min_value=MIN_IMPORTANCE, max_value=1.0))
TEXT = st.text(max_size=40)
HEX = st.binary(max_size=24).map(bytes.hex)


@st.composite
def queued(draw: st.DrawFn) -> tuple[str, QueuedUrl]:
    host = draw(HOSTS)
    origin = draw(st.sampled_from([f"http://{host}", f"https://{host}", "http://user@" + host, "ftp://x"]))
    url = origin + "/" + draw(st.text(max_size=30))
    return host, QueuedUrl(url, draw(st.integers(0, 70_000)), draw(IMPORTANCE), draw(st.integers(0, 255)),
                           draw(st.integers(0, 255)))


@given(queued(), st.integers(0, 2**63))
def test_a_queued_url_reads_back_from_its_row(case: tuple[str, QueuedUrl], seq: int) -> None:
    host, q = case
    key = queue_key(host, q.importance, q.depth, seq)
    value = q.encode(host)
    assert QueuedUrl.decode(value, key, host) == q == QueuedUrl.from_row(key, value)
    if q.depth <= 0xFFFF:  # schema 3 kept no more
        assert QueuedUrl.decode_v3(q.encode_v3()) == q
        assert len(value) < len(q.encode_v3())


def test_a_usual_queued_url_keeps_only_its_path() -> None:
    q = QueuedUrl("http://h1.test/section/4/page-9.html", 3, 0.5)
    assert q.encode("h1.test") == b"\x01/section/4/page-9.html"


@given(st.builds(
    UrlRecord, url=TEXT, outcome=st.one_of(st.sampled_from(["fetched", "skipped", "redirect"]), TEXT),
    reason=TEXT, fetched_at=st.floats(0, 2e9), content_hash=st.one_of(HEX, TEXT),
    etag=st.one_of(st.none(), TEXT), last_modified=st.one_of(st.none(), TEXT),
    fetches=st.integers(0, 2**40), changes=st.integers(0, 2**20), depth=st.integers(0, 2**20),
    importance=IMPORTANCE, history=st.one_of(HEX, TEXT), due=st.one_of(st.none(), st.floats(0, 2e9))))
def test_a_url_record_reads_back_packed_and_from_json(rec: UrlRecord) -> None:
    assert UrlRecord.decode(rec.encode()) == rec == UrlRecord.decode(rec.encode_v3())
    assert len(rec.encode()) < len(rec.encode_v3())


def test_a_record_of_the_first_nine_fields_still_reads() -> None:
    old = b'["http://a.test/","fetched","200",5.0,"ab",null,null,1,0]'
    assert UrlRecord.decode(old) == UrlRecord("http://a.test/", "fetched", "200", 5.0, "ab", None, None, 1, 0)
