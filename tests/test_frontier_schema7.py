"""Frontier schema 7 (polecat/frontier/db.py rule 19): the ``queue`` key holds the host's number and the FIFO
seq as varints, a 16-bit rank and an 8-bit depth (polecat/frontier/keys.py rule 1). main's schema-6 data dir
(tests/fixtures/frontier_v6.tar.zst, its log holding a commit the LMDB lacks) is upgraded on open in one
commit, every URL still queued and in the same order; a crash in it leaves schema 6 and its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from polecat.frontier.host_table import BANDS
from polecat.frontier.migrate import RekeyReport
from polecat.frontier.records import Lease
from tests.frontier_helpers import Rig, queued_urls_in
from tests.test_frontier_schema6 import CFG, NOW, PARAMS, lmdb_rows, schema_of, unpack_v5

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
    log = (tmp_path / "frontier" / "wal.log").read_bytes()
    before = {name: lmdb_rows(tmp_path, name) for name in (b"hosts", b"queue", b"meta")}

    def broken(*args: object) -> object:
        raise OSError("disk gone")

    monkeypatch.setattr("polecat.frontier.db.rekey_queue_v6", broken)
    with pytest.raises(OSError):
        Rig(tmp_path, cfg=CFG, params=PARAMS, backend="lmdb", now=NOW)
    monkeypatch.undo()
    assert (tmp_path / "frontier" / "wal.log").read_bytes() == log
    assert {name: lmdb_rows(tmp_path, name) for name in before} == before
    rig = Rig(tmp_path, cfg=CFG, params=PARAMS, backend="lmdb", now=NOW)
    assert rig.db.rekeyed == REKEYED and rig.frontier.queued == 7
    assert queued_urls_in(rig.db.items("hosts"), rig.db.items("queue")) == IN_KEY_ORDER_V6
