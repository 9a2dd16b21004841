"""Opening a data dir written before slice keys (frontier schema 1) upgrades it in place, losing nothing;
schema 3 to 4 packs the queue and URL rows in a commit of its own, and the last step, schema 4 to 5,
numbers the hosts and rekeys their queues in another."""

from __future__ import annotations

import json
import re
from pathlib import Path

import lmdb
import pytest
import zstandard

from polecat.errors import FrontierError
from polecat.frontier.db import SCHEMA_VERSION
from polecat.frontier.keys import queue_key_num, queue_prefix
from polecat.frontier.migrate import MigrationReport, RenumberReport
from polecat.frontier.records import Lease, QueuedUrl, UrlRecord, decode_host
from polecat.frontier.slices import PREFIX_LEN, prefix_slice, slice_of
from polecat.frontier.status import read_status
from polecat.version import __version__
from tests.frontier_helpers import Rig, queued_urls_in

FIXTURE = Path(__file__).parent / "fixtures" / "frontier_v1.mdb.zst"
NODE_PARAMS = {"url_fingerprint": "xxh3_128", "canon": 1, "near_index": 2}
LATER = 2e9
"""A wall-clock time after every next-allowed time in the fixture (written in 2026)."""
HOSTS = [f"h0{i}.test:35803" for i in range(1, 7)]


def unpack_v1(path: Path) -> None:
    (path / "frontier").mkdir(parents=True)
    (path / "frontier" / "data.mdb").write_bytes(
        zstandard.ZstdDecompressor().decompress(FIXTURE.read_bytes(), max_output_size=1 << 24))


def v1_contents(path: Path) -> tuple[list[str], list[str]]:
    """(queued URLs, recorded URLs) of the unpacked schema-1 fixture, read with the old layout."""
    env = lmdb.open(str(path / "frontier"), max_dbs=16, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            queued = [QueuedUrl.decode_v3(v).url for _, v in txn.cursor(db=env.open_db(b"queue", txn=txn))]
            done = [UrlRecord.decode(v).url for _, v in txn.cursor(db=env.open_db(b"urls", txn=txn))]
    finally:
        env.close()
    return queued, done


def test_schema_1_dir_is_upgraded_with_nothing_lost(tmp_path: Path) -> None:
    unpack_v1(tmp_path)
    queued, done = v1_contents(tmp_path)
    this = re.escape(__version__)
    with pytest.raises(FrontierError, match=r"written by polecat 0.1.0 or earlier with schema 1; this is "
                                            rf"polecat {this}, which reads schema 7; `polecat upgrade .*` "):
        read_status(tmp_path / "frontier")
    rig = Rig(tmp_path, params=NODE_PARAMS, now=LATER)
    assert rig.db.upgraded == MigrationReport(hosts=6, queued=91, urls=41, seen=132, ops=8, robots=5,
                                              unplaced_seen=0)
    f = rig.frontier
    assert f.queued == len(queued) == 91
    for url in done:
        rec = f.url_record(url)
        assert rec is not None and rec.outcome in ("fetched", "skipped")
    # The seen-set still knows every queued and finished URL: none is accepted again.
    assert all(f.add(u, 1, 1.0, LATER) != "accepted" for u in [*queued, *done])
    assert f.queued == 91
    assert f.add("http://h06.test:35803/new", 1, 1.0, LATER) == "blocked"
    assert f.add("http://h01.test:35803/brand-new", 1, 1.0, LATER) == "accepted"
    # Keys are slice-first in every per-host table.
    txn = rig.db.txn
    for db in (rig.db.queue, rig.db.hosts, rig.db.urls, rig.db.robots):
        for key in txn.cursor(db=db).iternext(values=False):
            assert prefix_slice(bytes(key)) < 4096
    # The seen table went on to schema 3: a run of the 132 keys (and the brand-new one), the LMDB table
    # emptied.
    assert [prefix_slice(key) < 4096 for key in rig.db.seen_keys()] == [True] * 133
    assert txn.stat(rig.db.old_seen)["entries"] == 0
    for key in txn.cursor(db=rig.db.hosts).iternext(values=False):
        assert prefix_slice(bytes(key)) == slice_of(bytes(key)[PREFIX_LEN:].decode())
    robots = {bytes(k)[PREFIX_LEN:].decode(): prefix_slice(bytes(k))
              for k in txn.cursor(db=rig.db.robots).iternext(values=False)}
    assert len(robots) == 5
    for origin, slice_id in robots.items():
        assert origin.removeprefix("http://") in HOSTS and slice_id == slice_of(origin.removeprefix("http://"))
    lease = f.lease(LATER + 60)
    assert isinstance(lease, Lease) and lease.host in HOSTS
    rig.frontier.commit()
    rig.crash()
    status = read_status(tmp_path / "frontier", busiest=True)
    assert (status.hosts, status.queued, status.blocked) == (6, 92, ("h06.test",))
    assert status.throttled == (("*.test", 40.0),)
    assert status.seen_urls == 133
    assert status.busiest and {h for h, _ in status.busiest} <= set(HOSTS)
    # Reopening does not upgrade twice.
    rig.reopen(LATER + 10)
    assert rig.db.upgraded is None and rig.frontier.queued == 92


def test_crash_during_upgrade_leaves_the_dir_as_it_was(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    unpack_v1(tmp_path)
    before = v1_contents(tmp_path)

    def broken(*args: object) -> MigrationReport:
        raise OSError("disk gone")

    monkeypatch.setattr("polecat.frontier.db.migrate_v1", broken)
    with pytest.raises(OSError):
        Rig(tmp_path, params=NODE_PARAMS)
    assert v1_contents(tmp_path) == before
    monkeypatch.undo()
    rig = Rig(tmp_path, params=NODE_PARAMS)
    assert rig.db.upgraded is not None and rig.frontier.queued == 91
    assert SCHEMA_VERSION == 7


def _schema_version(path: Path) -> int:
    env = lmdb.open(str(path / "frontier"), max_dbs=16, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return int(json.loads(bytes(txn.get(b"schema", db=env.open_db(b"meta", txn=txn))))["version"])
    finally:
        env.close()


def _crash_in(step: str, path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """Unpack the schema-1 fixture and open it with the upgrade ``step`` (a function db.py calls) failing,
    as a kill -9 in it would leave it; returns the fixture's (queued, recorded) URLs."""
    unpack_v1(path)
    contents = v1_contents(path)

    def broken(*args: object) -> object:
        raise OSError("disk gone")

    monkeypatch.setattr(f"polecat.frontier.db.{step}", broken)
    with pytest.raises(OSError):
        Rig(path, params=NODE_PARAMS)
    monkeypatch.undo()
    return contents


def test_a_crash_while_packing_rows_leaves_schema_3_and_the_next_open_packs_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema 3 to 4 (db.py rule 10) is one commit of its own: a crash in it leaves the schema-3 data dir
    the upgrades before it committed, whose rows the next open packs, losing nothing."""
    queued, done = _crash_in("compact_v3", tmp_path, monkeypatch)
    assert _schema_version(tmp_path) == 3
    rig = Rig(tmp_path, params=NODE_PARAMS, now=LATER)
    report = rig.db.compacted
    assert report is not None and (report.queued, report.urls) == (91, 41)
    assert report.bytes_after < report.bytes_before * 0.6
    txn = rig.db.txn
    assert sorted(queued_urls_in(txn.cursor(db=rig.db.hosts), txn.cursor(db=rig.db.queue))) == sorted(queued)
    assert sorted(UrlRecord.decode(v).url for _, v in txn.cursor(db=rig.db.urls)) == sorted(done)
    assert all(bytes(v)[0] == 1 for _, v in txn.cursor(db=rig.db.urls))  # packed, not JSON
    assert rig.frontier.queued == 91
    rig.crash()
    assert _schema_version(tmp_path) == 7
    rig.reopen(LATER + 10)
    assert rig.db.compacted is None and rig.frontier.queued == 91


def test_a_crash_while_numbering_hosts_leaves_schema_4_and_the_next_open_numbers_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema 4 to 5 (db.py rule 13) is one commit of its own: a crash in it leaves schema 4, which the
    next open numbers: every host a number of its own in key order, its queue rekeyed, nothing lost, and
    the hosts that come after take numbers past them (host_table.py rule 14)."""
    queued, _ = _crash_in("renumber_v4", tmp_path, monkeypatch)
    assert _schema_version(tmp_path) == 4
    rig = Rig(tmp_path, params=NODE_PARAMS, now=LATER)
    assert rig.db.renumbered == RenumberReport(hosts=6, queued=91, made=0)
    txn = rig.db.txn
    hosts = [(bytes(k), decode_host(v)) for k, v in txn.cursor(db=rig.db.hosts)]
    assert [st.num for _, st in hosts] == list(range(1, 7))
    keys = [bytes(k) for k, _ in txn.cursor(db=rig.db.queue)]
    assert all(len(k) == 18 for k in keys) and {queue_key_num(k) for k in keys} <= set(range(1, 7))
    assert sorted(queued_urls_in(txn.cursor(db=rig.db.hosts), txn.cursor(db=rig.db.queue))) == sorted(queued)
    assert rig.frontier.queued == 91
    rig.frontier.add_many(["http://new.test/a", "http://new.test/b"], 1, 0.5, LATER)
    new = rig.raw._table.peek("new.test")
    assert new is not None and new.num == 7
    rig.frontier.commit()
    rig.crash()
    assert _schema_version(tmp_path) == 7
    rig.reopen(LATER + 10)
    assert rig.db.renumbered is None and rig.frontier.queued == 93
    again = rig.raw._table.peek("new.test")
    assert again is not None and again.num == 7 and again.queued == 2
    assert len(list(rig.db.items("queue", queue_prefix("new.test", 7)))) == 2
