"""Frontier schema 6 (polecat/frontier/db.py rule 18): a seed's host is marked in its record, not by a
``seedhost`` row of ``ops`` (but a seed host with no record here, which keeps its row: host_table.py rule
26). A schema-5 data dir made by main (tests/fixtures/frontier_v5.tar.zst, its
log holding commits the LMDB lacks) is upgraded on open in one commit, losing no mark and no URL; slice
bundles carry the mark as 0.3.0's row both ways (handover.py rule 11)."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import lmdb
import pytest
import zstandard

from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.frontier.bundle import BundleWriter, SliceBundle
from polecat.frontier.host_table import HOST_SEQ
from polecat.frontier.keys import SEED_HOST, host_row, op_key
from polecat.frontier.migrate import SeedMarkReport
from polecat.frontier.records import decode_host, decode_host_v4
from polecat.frontier.slices import slice_of
from tests.frontier_helpers import Rig, canon, queued_urls_in

FIXTURES = Path(__file__).parent / "fixtures"
PARAMS = {"url_fingerprint": "xxh3_128", "canon": 1, "near_index": 2}
CFG = Config(scope=ScopeConfig(mode="host", max_url_length=60), frontier=FrontierConfig(working_hosts=100))
SEED_HOSTS = {"s1.test", "s2.test", "s3.test", "s4.test", "r.test", "o.test"}
"""The fixture's seed hosts (tests/fixtures/make_frontier_fixture.py): r.test's seed was refused and o.test's
queued by another member, so neither has a record there."""
QUEUED = sorted(canon(u) for u in ("http://s1.test/", "http://s1.test/a", "http://s2.test/", "http://s3.test/",
                                   "http://s4.test/", "http://d.test/1", "http://d.test/2"))
NOW = 2_000.0


def unpack_v5(path: Path, name: str = "frontier_v5.tar.zst") -> None:
    packed = zstandard.ZstdDecompressor().decompress((FIXTURES / name).read_bytes(),
                                                     max_output_size=1 << 24)
    path.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        tar.extractall(path, filter="data")


def lmdb_rows(path: Path, table: bytes) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(path / "frontier"), max_dbs=32, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=env.open_db(table, txn=txn))]
    finally:
        env.close()


def schema_of(path: Path) -> int:
    return int(json.loads(dict(lmdb_rows(path, b"meta"))[b"schema"])["version"])


def assert_seed_hosts_in_scope(rig: Rig) -> None:
    """The scope (host mode) reads the marks: every seed host's links are in it (each queued, one more URL),
    the discovered host's not."""
    for host in sorted(SEED_HOSTS):
        assert rig.frontier.add(canon(f"http://{host}/new"), 1, 0.5, NOW) == "accepted", host
    assert rig.frontier.add(canon("http://d.test/3"), 1, 0.5, NOW) == "out_of_scope"


def test_a_schema_5_dir_is_upgraded_with_every_seed_host_marked_and_every_url_queued(tmp_path: Path) -> None:
    unpack_v5(tmp_path)
    assert schema_of(tmp_path) == 5
    rig = Rig(tmp_path, cfg=CFG, params=PARAMS, backend="lmdb", now=NOW)
    # The log's commit replayed first (its seed-host rows with it), then moved: r.test and o.test have no
    # record, so they keep their rows (no record made: it would count as a host this frontier knows).
    assert rig.db.replayed == 1
    assert rig.db.seeds_marked == SeedMarkReport(marked=4, kept=2)
    db = rig.db
    assert json.loads(db.get("meta", b"schema") or b"")["version"] == 7  # then 7 (db.py rules 19-20)
    assert sorted(bytes(k) for k, _ in db.items("ops")) == sorted([op_key(SEED_HOST, "r.test"),
                                                                   op_key(SEED_HOST, "o.test")])
    records = {bytes(k)[2:].decode(): decode_host(v) for k, v in db.items("hosts")}
    assert {h for h, st in records.items() if st.seed} == SEED_HOSTS - {"r.test", "o.test"}
    assert "d.test" in records and "r.test" not in records and "o.test" not in records
    nums = sorted(st.num for st in records.values())
    assert nums == list(range(1, 6))
    assert int(db.get("meta", HOST_SEQ) or b"0") == 5
    assert sorted(queued_urls_in(db.items("hosts"), db.items("queue"))) == QUEUED
    assert rig.frontier.queued == 7 and rig.raw._table.known_hosts == 5
    assert_seed_hosts_in_scope(rig)
    rig.frontier.commit()
    rig.crash()
    assert schema_of(tmp_path) == 7 and len(lmdb_rows(tmp_path, b"ops")) == 2
    rig.reopen(NOW + 1)
    assert rig.db.seeds_marked is None and rig.frontier.queued == 13
    rig.frontier.add_many([canon("http://s9.test/")], 1, 0.5, NOW)  # not a seed host: out of scope
    assert rig.frontier.queued == 13


def crashed_in_upgrade_then_reopened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> Rig:
    """Open the unpacked fixture in ``tmp_path`` with the upgrade's ``step`` (a dotted name) failing, as a
    crash in its commit would, check that the LMDB and the log are as they were, then open it again."""
    log = (tmp_path / "frontier" / "wal.log").read_bytes()
    before = {name: lmdb_rows(tmp_path, name) for name in (b"ops", b"hosts", b"queue", b"meta")}

    def broken(*args: object) -> object:
        raise OSError("disk gone")

    monkeypatch.setattr(step, broken)
    with pytest.raises(OSError):
        Rig(tmp_path, cfg=CFG, params=PARAMS, backend="lmdb", now=NOW)
    monkeypatch.undo()
    assert (tmp_path / "frontier" / "wal.log").read_bytes() == log
    assert {name: lmdb_rows(tmp_path, name) for name in before} == before
    return Rig(tmp_path, cfg=CFG, params=PARAMS, backend="lmdb", now=NOW)


def test_a_crash_while_marking_leaves_schema_5_and_its_log(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 18: the replay and the marks are one commit; a crash in it leaves the schema-5 LMDB and its
    log as they were, and the next open upgrades them."""
    unpack_v5(tmp_path)
    rig = crashed_in_upgrade_then_reopened(tmp_path, monkeypatch, "polecat.frontier.db.mark_seeds_v5")
    assert rig.db.seeds_marked == SeedMarkReport(marked=4, kept=2) and rig.frontier.queued == 7


def test_a_bundle_carries_the_seed_mark_as_0_3_0_s_row_and_an_adoption_marks_the_record(
        tmp_path: Path) -> None:
    """handover.py rule 11: the export writes the mark as a ``seedhost`` row (what 0.3.0 reads), and an
    adoption turns it into the record's mark, writing no ``ops`` row, whichever comes first in the bundle;
    the row of a seed host with no record (a refused seed: host_table.py rule 26) goes and comes as it is."""
    a = Rig(tmp_path / "a", cfg=CFG, backend="lmdb")
    b = Rig(tmp_path / "b", cfg=CFG, backend="lmdb")
    a.frontier.add_seeds([canon("http://x.test/"), canon("http://y.test/" + "y" * 60)], 1.0)  # y refused
    a.frontier.commit()
    moving = {slice_of("x.test"), slice_of("y.test")}
    bundle = SliceBundle.read(io.BytesIO(a.frontier.export_slices(moving, 2.0).to_bytes()))
    records = list(bundle.records())
    ops = [key for name, key, _ in records if name == "ops"]
    assert sorted(ops) == sorted([op_key(SEED_HOST, "x.test"), op_key(SEED_HOST, "y.test")])
    hosts = {key: decode_host_v4(value) for name, key, value in records if name == "hosts"}
    assert set(hosts) == {host_row("x.test")}  # 0.3.0's records: no number, no mark
    assert not any(st.seed or st.num for st in hosts.values())
    b.frontier.adopt(bundle, 3.0)
    b.frontier.commit()
    st = b.raw._table.peek("x.test")
    assert st is not None and st.seed
    assert b.raw._table.peek("y.test") is None
    assert [bytes(k) for k, _ in b.db.items("ops")] == [op_key(SEED_HOST, "y.test")]
    assert b.frontier.add(canon("http://y.test/b"), 1, 0.5, 4.0) == "accepted"


def test_a_0_3_0_bundle_s_seed_host_rows_mark_the_adopted_records(tmp_path: Path) -> None:
    """handover.py rule 11 with 0.3.0's order (``ops`` first, tests/fixtures/bundle_unfenced.pcsb, seeds
    ``a.test`` and ``b.test``) and a row whose host has no record in the bundle (``z.test``: kept a row,
    host_table.py rule 26)."""
    old = SliceBundle.read(io.BytesIO((FIXTURES / "bundle_unfenced.pcsb").read_bytes()))
    names = ("ops", "robots", "hosts", "urls", "queue", "seen", "priors")
    out = BundleWriter(frozenset({slice_of("z.test")}), names, created=1.8e9)
    out.add("ops", op_key(SEED_HOST, "z.test"), b"")
    rig = Rig(tmp_path, cfg=CFG, backend="lmdb")
    assert rig.frontier.adopt(old, 1.8e9).queued == 8
    rig.frontier.adopt(out.finish(), 1.8e9)
    rig.frontier.commit()
    for host in ("a.test", "b.test"):
        st = rig.raw._table.peek(host)
        assert st is not None and st.seed, host
    assert rig.raw._table.peek("z.test") is None
    assert [bytes(k) for k, _ in rig.db.items("ops")] == [op_key(SEED_HOST, "z.test")]
    rig.crash()
    rig.reopen(1.8e9 + 1)
    assert rig.frontier.add(canon("http://z.test/a"), 1, 0.5, 1.8e9 + 1) == "accepted"


def test_domain_mode_reopens_with_the_domains_of_marked_records_and_of_kept_rows(tmp_path: Path) -> None:
    """Rule 18 in ``domain`` mode: the open reads the seed hosts' domains from the records that mark them
    and from the ``seedhost`` rows of those with no record (a seed refused, another member's: host_table.py
    rule 26), once each."""
    cfg = replace(CFG, scope=replace(CFG.scope, mode="domain"))
    rig = Rig(tmp_path, cfg=cfg, backend="lmdb", now=NOW)
    too_long = canon("http://www.refused.test/" + "x" * 60)
    rig.frontier.add_seeds([canon("http://www.queued.test/"), too_long], NOW)
    rig.db.apply(rig.raw.add_scope_host("www.other.test"))
    rig.frontier.commit()
    assert [bytes(k) for k, _ in rig.db.items("ops")] == sorted([op_key(SEED_HOST, "www.refused.test"),
                                                                  op_key(SEED_HOST, "www.other.test")])
    rig.crash()
    rig.reopen(NOW + 1)
    for host in ("a.queued.test", "b.refused.test", "c.other.test"):
        assert rig.frontier.add(canon(f"http://{host}/p"), 1, 0.5, NOW + 1) == "accepted", host
    assert rig.frontier.add(canon("http://elsewhere.test/p"), 1, 0.5, NOW + 1) == "out_of_scope"
