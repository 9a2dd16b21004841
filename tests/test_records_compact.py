"""The compact rows of schema 4 (polecat/frontier/records.py): every queued URL and URL record reads back
as it was written, in fewer bytes than schema 3's, and schema 3's forms (which slice bundles carry) still
read. The queue keys of schema 7 (polecat/frontier/keys.py rule 1): the host's number and the seq as
order-preserving varints (polecat/frontier/ovarint.py), a 16-bit rank and 8-bit depth, read back, in the
queue's order, and converted to and from the wire's keys (schema 4's) in that order; a schema-6 row
rewritten for schema 7 reads back as it was."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from polecat.frontier import ovarint
from polecat.frontier.keys import (
    MAX_HOST_NUM,
    parse_wire_queue_key,
    queue_key,
    queue_key_at,
    queue_key_num,
    queue_key_priority,
    queue_prefix,
    wire_queue_key,
    wire_queue_prefix,
)
from polecat.frontier.politeness import HostState
from polecat.frontier.records import (
    MIN_IMPORTANCE,
    QueuedUrl,
    UrlRecord,
    decode_host,
    decode_host_v4,
    encode_host,
    encode_host_v4,
    full_rank,
    key_rank,
    rank,
    rank_importance,
)
from polecat.frontier.slices import PREFIX_LEN

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


NUM = st.integers(1, MAX_HOST_NUM)
SEQ = st.integers(0, 2**48 - 1)


@given(queued(), NUM, SEQ)
def test_a_queued_url_reads_back_from_its_row(case: tuple[str, QueuedUrl], num: int, seq: int) -> None:
    host, q = case
    key = queue_key(host, num, q.importance, q.depth, seq)
    value = q.encode(host)
    assert QueuedUrl.decode(value, key, host) == q
    if q.depth <= 0xFFFF:  # schema 3 kept no more
        assert QueuedUrl.decode_v3(q.encode_v3()) == q
        assert len(key) + len(value) < len(wire_queue_key(key, host, q.depth)) + len(q.encode_v3())


_V6_KEY = struct.Struct(">IIHHI")
_V6_U32 = struct.Struct(">I")


def schema_6_row(q: QueuedUrl, host: str, num: int, seq: int) -> tuple[bytes, bytes]:
    """The ``queue`` row of ``q`` as main at 64f1881 (schema 6) wrote it: the key's 32-bit rank and 16-bit
    depth, the value's importance unless that rank gives it, its depth (4 bytes) only past 65,535."""
    r = rank(q.importance)
    key = queue_prefix(host, num)[:PREFIX_LEN] + _V6_KEY.pack(num, r, min(q.depth, 0xFFFF), seq >> 32,
                                                             seq & 0xFFFFFFFF)
    flags = 1 if q.url.startswith(f"http://{host}/") else 0
    out = b""
    if q.attempts:
        flags, out = flags | 4, out + bytes((q.attempts,))
    if q.hops:
        flags, out = flags | 8, out + bytes((q.hops,))
    if rank_importance(r) != q.importance:
        flags, out = flags | 16, out + struct.pack(">d", q.importance)
    if q.depth > 0xFFFF:
        flags, out = flags | 32, out + _V6_U32.pack(q.depth)
    return key, bytes((flags,)) + out + (q.url[len(f"http://{host}"):] if flags & 1 else q.url).encode()


@given(queued(), NUM, SEQ)
def test_a_schema_6_row_rekeyed_for_schema_7_reads_back_as_it_was(case: tuple[str, QueuedUrl], num: int,
                                                                   seq: int) -> None:
    """migrate.py ``rekey_queue_v6``: the key's fields and the value's bytes of schema 6 give schema 7's
    row, which adds to the value the importance the coarser rank and the depth the one-byte depth lose."""
    host, q = case
    old_key, old_value = schema_6_row(q, host, num, seq)
    _, r, depth, hi, lo = _V6_KEY.unpack_from(old_key, PREFIX_LEN)
    key = queue_key_at(queue_prefix(host, num), r, depth, hi << 32 | lo)
    value = QueuedUrl.value_v7(old_value, r, depth)
    assert key == queue_key(host, num, q.importance, q.depth, seq)
    assert QueuedUrl.decode(value, key, host) == q
    assert len(key) < len(old_key)


@given(st.lists(st.integers(0, 2**64 - 1), min_size=2, max_size=30))
def test_varints_keep_the_numbers_order_and_read_back(numbers: list[int]) -> None:
    encoded = [ovarint.encode(n) for n in numbers]
    assert sorted(range(len(numbers)), key=lambda i: encoded[i]) == sorted(range(len(numbers)),
                                                                           key=lambda i: numbers[i])
    for n, e in zip(numbers, encoded, strict=True):
        assert ovarint.decode_at(b"x" + e + b"y", 1) == (n, len(e) + 1)
        assert len(e) == next(k for k in range(1, 10) if k == 9 or n < 1 << 7 * k)


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


@given(HOSTS, NUM, IMPORTANCE, st.integers(0, 70_000), SEQ)
def test_a_queue_key_reads_back_and_goes_to_the_wire_and_back(host: str, num: int, importance: float,
                                                              depth: int, seq: int) -> None:
    key = queue_key(host, num, importance, depth, seq)
    assert len(key) == PREFIX_LEN + len(ovarint.encode(num)) + 3 + len(ovarint.encode(seq))
    assert key.startswith(queue_prefix(host, num)) and queue_key_num(key) == num
    r = full_rank(key_rank(rank(importance)))  # the key's grid (keys.py rule 1)
    assert queue_key_priority(key) == (r, min(depth, 255), seq)
    wire = wire_queue_key(key, host, depth)
    assert wire.startswith(wire_queue_prefix(host))
    assert parse_wire_queue_key(wire) == (host, r, min(depth, 0xFFFF), seq)
    _, r, d, s = parse_wire_queue_key(wire)
    assert queue_key_at(queue_prefix(host, num), r, d, s) == key


@given(HOSTS, NUM, st.lists(st.tuples(IMPORTANCE, st.integers(0, 70_000), SEQ), min_size=2, max_size=20))
def test_a_hosts_queue_keys_keep_the_queues_order_here_and_on_the_wire(
        host: str, num: int, rows: list[tuple[float, int, int]]) -> None:
    """The order of rank (on the key's grid), depth (up to 255 in the key), seq; the wire's keeps the depth
    to 65,535."""
    keys = [queue_key(host, num, imp, depth, seq) for imp, depth, seq in rows]
    tails = [(key_rank(rank(imp)), min(depth, 255), seq) for imp, depth, seq in rows]
    wire_tails = [(key_rank(rank(imp)), min(depth, 0xFFFF), seq) for imp, depth, seq in rows]
    assert sorted(range(len(rows)), key=lambda i: keys[i]) == sorted(range(len(rows)), key=lambda i: tails[i])
    assert (sorted(range(len(rows)), key=lambda i: wire_queue_key(keys[i], host, rows[i][1]))
            == sorted(range(len(rows)), key=lambda i: wire_tails[i]))


@given(HOSTS, NUM, NUM)
def test_two_hosts_queues_never_interleave(host: str, a: int, b: int) -> None:
    first, last = queue_key(host, a, 1.0, 0, 0), queue_key(host, a, MIN_IMPORTANCE, 0xFFFF, 2**48 - 1)
    other = queue_key(host, b, 0.5, 3, 7)
    assert a == b or not first <= other <= last


@given(st.builds(HostState, next_allowed=st.floats(0, 2e9), failures=st.integers(0, 2**31),
                 queued=st.integers(0, 2**40), fetched=st.integers(0, 2**40),
                 ip=st.sampled_from(["", "10.0.0.1"]), num=NUM))
def test_a_host_record_reads_back_with_its_number_and_without_on_the_wire(s: HostState) -> None:
    assert decode_host(encode_host(s)) == s
    assert decode_host_v4(encode_host_v4(s)).num == 0
    assert decode_host(encode_host(decode_host_v4(encode_host_v4(s)))) == HostState(
        s.next_allowed, s.rate_factor, s.crawl_delay, s.failures, s.queued, s.fetched, ip=s.ip)
