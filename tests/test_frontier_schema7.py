"""Frontier schema 7 (polecat/frontier/db.py rules 19 and 20): the ``queue`` key holds the host's number and
the FIFO seq as varints, a 16-bit rank and an 8-bit depth (polecat/frontier/keys.py rule 1), and ``hosts``
values are compact, read beside schema 6's. main's schema-6 data dir (tests/fixtures/frontier_v6.tar.zst,
its log holding a commit the LMDB lacks) is upgraded on open in one commit, every URL still queued and in
the same order, no record rewritten and no mark lost, a record written compact when it is next written; a
crash in it leaves schema 6 and its log."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.frontier.host_table import BANDS
from polecat.frontier.keys import MAX_HOST_NUM, SEED_HOST, op_key
from polecat.frontier.migrate import RekeyReport
from polecat.frontier.politeness import HostState
from polecat.frontier.records import HOST_TAG, SEED_BIT, Lease, decode_host, encode_host, encode_new_hosts
from tests.frontier_helpers import Rig, queued_urls_in
from tests.test_frontier_schema6 import (
    CFG,
    NOW,
    PARAMS,
    QUEUED,
    SEED_HOSTS,
    assert_seed_hosts_in_scope,
    crashed_in_upgrade_then_reopened,
    schema_of,
    unpack_v5,
)

V6 = "frontier_v6.tar.zst"
RECORDS = st.builds(
    HostState, next_allowed=st.one_of(st.just(0.0), st.floats(0, 2e9)),
    rate_factor=st.sampled_from([1.0, 0.25]), crawl_delay=st.one_of(st.just(0.0), st.floats(0, 600)),
    failures=st.integers(0, 2**31), queued=st.integers(0, 2**40), fetched=st.integers(0, 2**40),
    ip=st.sampled_from(["", "10.0.0.1", "::1"]), num=st.integers(1, MAX_HOST_NUM), seed=st.booleans())
BATCH = st.lists(st.tuples(st.integers(1, 300), st.integers(1, MAX_HOST_NUM)), max_size=5)
"""A seeds batch's new hosts: each one's queued count (past a one-byte varint too) and number."""


def version(rig: Rig) -> int:
    return int(json.loads(rig.db.get("meta", b"schema") or b"")["version"])


def encode_v6(s: HostState) -> bytes:
    """A ``hosts`` value as schema 6 wrote it (main at 64f1881)."""
    return struct.pack(">dddIQQI", s.next_allowed, s.rate_factor, s.crawl_delay, s.failures, s.queued,
                       s.fetched, s.num | SEED_BIT if s.seed else s.num) + s.ip.encode()


@given(RECORDS)
def test_a_record_reads_back_from_its_compact_value_and_from_schema_6_s(s: HostState) -> None:
    value = encode_host(s)
    assert value[0] & HOST_TAG and not encode_v6(s)[0] & HOST_TAG
    assert decode_host(value) == s == decode_host(encode_v6(s))
    assert len(value) <= len(encode_v6(s))


@given(st.floats(0, 2e9), BATCH)
def test_a_seeds_batch_writes_each_new_host_as_its_record_would(now: float,
                                                                rows: list[tuple[int, int]]) -> None:
    values = encode_new_hosts(now, [q for q, _ in rows], [n for _, n in rows])
    assert values == [encode_host(HostState(next_allowed=now, queued=q, num=n, seed=True)) for q, n in rows]


def test_a_seed_host_never_leased_is_14_bytes_where_schema_6_wrote_48() -> None:
    new = HostState(next_allowed=NOW, queued=1, num=10_000_000, seed=True)
    assert (len(encode_host(new)), len(encode_v6(new))) == (14, 48)


def test_a_schema_6_dir_made_by_main_is_upgraded_losing_no_mark_record_or_url(tmp_path: Path) -> None:
    """The open replays the fixture's log, then records schema 7 in one commit: no record rewritten (each
    value still schema 6's), every seed host marked (or keeping its row), every number and URL kept; a record
    written after it is compact and reads back."""
    unpack_v5(tmp_path, V6)
    assert schema_of(tmp_path) == 6
    rig = Rig(tmp_path, cfg=CFG, params=PARAMS, backend="lmdb", now=NOW)
    db = rig.db
    assert db.replayed == 1 and db.seeds_marked is None and version(rig) == 7
    assert sorted(bytes(k) for k, _ in db.items("ops")) == sorted([op_key(SEED_HOST, "r.test"),
                                                                   op_key(SEED_HOST, "o.test")])
    raw = {bytes(k)[2:].decode(): bytes(v) for k, v in db.items("hosts")}
    assert not any(v[0] & HOST_TAG for v in raw.values())  # rule 20: read as they are
    records = {host: decode_host(v) for host, v in raw.items()}
    assert {h for h, st in records.items() if st.seed} == SEED_HOSTS - {"r.test", "o.test"}
    assert sorted(st.num for st in records.values()) == list(range(1, 6))
    assert sorted(queued_urls_in(db.items("hosts"), db.items("queue"))) == QUEUED
    assert sum(st.queued for st in records.values()) == len(QUEUED)
    assert rig.frontier.queued == 7 and rig.raw._table.known_hosts == 5
    assert_seed_hosts_in_scope(rig)
    rig.frontier.commit()
    rig.crash()
    rig.reopen(NOW + 1)
    assert version(rig) == 7
    after = {bytes(k)[2:].decode(): bytes(v) for k, v in rig.db.items("hosts")}
    assert after["s1.test"][0] & HOST_TAG  # written since: compact
    assert decode_host(after["s1.test"]).queued == records["s1.test"].queued + 1
    assert decode_host(after["s1.test"]).seed and rig.frontier.queued == 13


IN_KEY_ORDER_V6 = ["http://s1.test/", "http://s1.test/a", "http://s3.test/", "http://s2.test/", "http://d.test/1",
                   "http://d.test/2", "http://s4.test/"]
"""The fixture's queue in key order, as main at 64f1881 reads it (``queued_urls_in`` of its open): slice,
host number, then each host's priority."""
REKEYED = RekeyReport(queued=7, key_bytes_before=7 * 18, key_bytes_after=7 * 7, values_grown=0)
"""Seven keys of 18 bytes, now of 7: slice 2, number 1, rank 2, depth 1, seq 1."""


def unpack_v6(path: Path) -> None:
    unpack_v5(path, "frontier_v6.tar.zst")
    assert schema_of(path) == 6


def test_a_schema_6_dir_made_by_main_is_upgraded_with_every_url_queued_in_the_same_order(
        tmp_path: Path) -> None:
    unpack_v6(tmp_path)
    rig = Rig(tmp_path, cfg=CFG, params=PARAMS, backend="lmdb", now=NOW)
    db = rig.db
    assert db.replayed == 1 and db.rekeyed == REKEYED  # the log's commit replayed first, then rekeyed
    assert queued_urls_in(db.items("hosts"), db.items("queue")) == IN_KEY_ORDER_V6
    assert db.get("meta", BANDS) is None  # counted again on the new rank's grid (host_table.py rule 24)
    assert rig.frontier.queued == 7
    rig.crash()
    assert schema_of(tmp_path) == 7
    rig.reopen(NOW + 1)
    assert rig.db.rekeyed is None and rig.frontier.queued == 7
    leased: list[str] = []
    now = NOW + 1
    while len(leased) < 7:
        lease = rig.frontier.lease(now)
        if not isinstance(lease, Lease):
            now += 1.0
            continue
        if lease.kind == "robots":
            rig.complete_robots(lease, now, status=404)
        else:
            leased.append(lease.url)
            rig.complete(lease, now)
    # Each host's URLs leased in its queue's order (s1.test's two seeds, d.test's two links, FIFO).
    for host in ("s1.test", "d.test"):
        assert [u for u in leased if f"//{host}/" in u] == [u for u in IN_KEY_ORDER_V6 if f"//{host}/" in u]
    assert sorted(leased) == sorted(IN_KEY_ORDER_V6)


def test_a_crash_while_rekeying_leaves_schema_6_and_its_log(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 19: the replay and the rekey are one commit; a crash in it leaves the schema-6 LMDB and its log as
    they were, and the next open upgrades them."""
    unpack_v6(tmp_path)
    rig = crashed_in_upgrade_then_reopened(tmp_path, monkeypatch, "polecat.frontier.db.rekey_queue_v6")
    assert rig.db.rekeyed == REKEYED and rig.frontier.queued == 7
    assert queued_urls_in(rig.db.items("hosts"), rig.db.items("queue")) == IN_KEY_ORDER_V6
