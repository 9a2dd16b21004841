"""The frontier's write-ahead log (polecat/frontier/wal.py, polecat/frontier/db.py rules 6-9)."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import get_args
from unittest import mock

import lmdb
import msgpack
import pytest
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st

from polecat.config import Config, FrontierConfig, validate
from polecat.errors import ConfigError, FrontierError, StorageFault
from polecat.frontier import db as frontier_db
from polecat.frontier import status, wal
from polecat.frontier.db import CommittedTables, FrontierDB
from polecat.frontier.migrate import RekeyReport
from polecat.frontier.slices import slice_prefix
from polecat.frontier.wal import LOG_NAME, Batch, Entry, LogOverlay, Replay, decode, encode
from polecat.writes import Delete, DeleteSlices, Put, PutRows, Table, Write, expand, put_bytes

KEYS = st.binary(min_size=1, max_size=40)
WRITES = st.lists(st.one_of(
    st.builds(Put, st.sampled_from(["queue", "hosts", "meta", "urls"]), KEYS, st.binary(max_size=60)),
    st.builds(Delete, st.sampled_from(["queue", "ops", "claims"]), KEYS),
    st.builds(DeleteSlices, st.frozensets(st.integers(0, 4095), max_size=3)),
), max_size=20)


@given(WRITES)
def test_an_entry_decodes_to_the_writes_it_encodes(writes: list[Write]) -> None:
    assert decode(encode(writes)) == writes


@given(WRITES, WRITES)
def test_an_entry_encoded_as_its_writes_are_applied_decodes_to_all_of_them(first: list[Write],
                                                                             then: list[Write]) -> None:
    """wal.py rule 7: the commit's writes are added batch by batch as they are applied."""
    entry = Entry()
    entry.add(first)
    entry.add(then)
    with entry.body() as body:
        assert decode(entry.head() + body) == first + then


TABLES: tuple[Table, ...] = get_args(Table)
"""The tables in the order the log numbers them (wal.py rule 1)."""
ROWS = st.builds(lambda table, rows: PutRows(table, [k for k, _ in rows], [v for _, v in rows]),
                 st.sampled_from(["seen", "ops", "ready", "queue", "hosts"]),
                 st.lists(st.tuples(st.binary(min_size=1, max_size=300), st.binary(max_size=300)),
                          max_size=40))


@given(st.lists(st.one_of(WRITES, st.lists(ROWS, min_size=1, max_size=3)), max_size=5))
def test_put_rows_are_logged_as_the_bytes_of_their_rows_as_puts(batches: list[list[Write]]) -> None:
    """wal.py rule 7: an entry of ``PutRows`` (packed by a ``map`` over their rows), added batch by batch
    among other writes, is byte for byte the entry of its rows as ``Put`` s, one a call."""
    entry, puts = Entry(), msgpack.Packer(use_bin_type=True, autoreset=False)
    for writes in batches:
        entry.add(writes)
        for w in expand(writes):
            if isinstance(w, Put):
                puts.pack((0, TABLES.index(w.table), w.key, w.value))
            elif isinstance(w, Delete):
                puts.pack((1, TABLES.index(w.table), w.key))
            else:
                puts.pack((2, sorted(w.slices)))
    rows = sum(len(list(expand(writes))) for writes in batches)
    logged = msgpack.Packer().pack_array_header(rows) + puts.bytes()
    with entry.body() as body:
        assert entry.head() + body == logged
    assert encode([w for writes in batches for w in writes]) == logged


def test_put_rows_of_unequal_keys_and_values_are_refused() -> None:
    with pytest.raises(ValueError, match="2 keys, 1 values"):
        Entry().add([PutRows("seen", [b"a", b"b"], [b""])])


@pytest.mark.parametrize("rows", [0, 15, 16, 65_535, 65_536, 2**32 - 1])
def test_an_entry_heads_its_rows_as_msgpack_heads_an_array_of_them(rows: int) -> None:
    entry = Entry()
    entry.rows = rows
    assert entry.head() == msgpack.Packer().pack_array_header(rows)


def opened(path: Path, log_bytes: int = 1 << 30, *, writemap: bool = False, log_share: float = 0.0,
           log_max_bytes: int = 0) -> FrontierDB:
    """``log_share`` 0: the LMDB commit at ``log_bytes`` of log, whatever the LMDB's size (db.py rule 14)."""
    return FrontierDB(path, map_size=1 << 26, params={}, log_bytes=log_bytes, log_share=log_share,
                      log_max_bytes=log_max_bytes, writemap=writemap)


def lmdb_meta(db: FrontierDB | Path, key: bytes) -> bytes | None:
    """``key`` of ``meta`` as the LMDB holds it (its last LMDB commit), in a read transaction."""
    env = db.env if isinstance(db, FrontierDB) else lmdb.open(str(db), max_dbs=20, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            value = txn.get(key, db=env.open_db(b"meta", txn=txn, create=False))
            return None if value is None else bytes(value)
    finally:
        if not isinstance(db, FrontierDB):
            env.close()


def seen_key(i: int) -> bytes:
    return slice_prefix(i % 7) + i.to_bytes(16, "big")


def crash(db: FrontierDB) -> None:
    """What kill -9 leaves: the files as they are, no LMDB commit at close."""
    db._entry.add([Put("meta", b"uncommitted", b"1")])  # close commits the LMDB only with nothing pending
    db.close()


@pytest.mark.parametrize("writemap", [False, True])
def test_commits_go_to_the_log_and_a_crash_replays_them(tmp_path: Path, writemap: bool) -> None:
    db = opened(tmp_path, writemap=writemap)
    base = db.seq
    for i in range(5):
        db.apply([Put("meta", b"k%d" % i, b"v"), Put("seen", seen_key(i), b"")])
        db.commit()
    assert db.wal.size > 0 and lmdb_meta(db, b"k0") is None  # the LMDB was not committed
    db.apply([Put("meta", b"lost", b"1")])
    crash(db)
    again = opened(tmp_path, writemap=writemap)
    assert again.replayed == 5 and again.seq == base + 5
    assert all(again.get("meta", b"k%d" % i) == b"v" for i in range(5))
    assert again.get("meta", b"lost") is None and again.count("seen") == 5
    again.close()  # nothing pending: an LMDB commit, the log emptied
    assert lmdb_meta(tmp_path, b"k4") == b"v" and (tmp_path / LOG_NAME).stat().st_size == 0
    third = opened(tmp_path)
    assert third.replayed == 0 and third.seq == base + 5 and third.count("seen") == 5
    third.close()


@pytest.mark.parametrize("writemap", [False, True])
def test_put_rows_are_applied_and_logged_as_their_puts(tmp_path: Path, writemap: bool) -> None:
    """polecat/writes.py rule 5: a ``PutRows`` (a seeds batch's rows of one table, here past
    ``ROOM_CHECK_WRITES``: db.py rule 11 reserves for its rows) reads back at once, and its log entry is
    its rows' ``Put`` s (wal.py rule 7), which the replay after a crash applies."""
    queue = PutRows("queue", [b"q%04d" % i for i in range(1500)], [b"v%d" % i for i in range(1500)])
    writes: list[Write] = [Put("meta", b"k", b"v"), queue, PutRows("seen", [seen_key(i) for i in range(3)],
                                                                   [b""] * 3)]
    entry = Entry()
    entry.add(writes)
    with entry.body() as body:
        assert decode(entry.head() + body) == list(expand(writes))
    db = opened(tmp_path, writemap=writemap)
    db.apply(writes)
    assert db.get("queue", b"q0001") == b"v1" and db.count("seen") == 3
    db.commit()
    crash(db)
    again = opened(tmp_path, writemap=writemap)
    assert again.replayed == 1 and again.get("meta", b"k") == b"v" and again.count("seen") == 3
    assert list(again.items("queue")) == list(zip(queue.keys, queue.values, strict=True))
    again.close()


def three_commits_crashed(path: Path) -> Path:
    """A frontier in ``path`` with three commits in its log, left as kill -9 leaves it; the log's path."""
    db = opened(path)
    for i in range(3):
        db.apply([Put("meta", b"k%d" % i, b"v" * 100)])
        db.commit()
    crash(db)
    return path / LOG_NAME


def test_a_torn_tail_is_dropped_counted_and_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = three_commits_crashed(tmp_path)
    whole = log.stat().st_size
    with open(log, "r+b") as fh:
        fh.truncate(whole - 20)  # the last append cut short
    with caplog.at_level(logging.WARNING, logger="polecat"):
        again = opened(tmp_path)
    assert again.replayed == 2 and again.log_dropped > 0 and "dropped" in caplog.text
    assert again.get("meta", b"k1") is not None and again.get("meta", b"k2") is None
    assert log.stat().st_size < whole - 20  # cut back to the last whole entry: appends follow it
    again.apply([Put("meta", b"k2", b"again")])
    again.commit()
    crash(again)
    third = opened(tmp_path)
    assert third.replayed == 3 and third.log_dropped == 0 and third.get("meta", b"k2") == b"again"
    third.close()


def test_a_wrong_checksum_ends_the_log_there(tmp_path: Path) -> None:
    log = three_commits_crashed(tmp_path)
    raw = bytearray(log.read_bytes())
    raw[-5] ^= 0xFF  # a byte of the last entry's payload
    log.write_bytes(bytes(raw))
    again = opened(tmp_path)
    assert again.replayed == 2 and again.log_dropped > 0 and again.get("meta", b"k2") is None
    again.close()


def noise(i: int) -> bytes:
    """40 bytes that do not compress (wal.py rule 12), the same for the same ``i``."""
    return hashlib.blake2b(i.to_bytes(4, "big"), digest_size=40).digest()


def big_commit_then_small_crashed(path: Path) -> tuple[Path, int]:
    """A frontier whose log holds one entry of 30,000 writes, bigger than a reader's chunk (wal.py rule
    8) compressed, then a small one, left as kill -9 leaves it; the log's path and the big entry's end."""
    db = opened(path, log_bytes=1 << 26)
    db.apply([Put("queue", slice_prefix(i % 7) + b"%08d" % i, noise(i)) for i in range(30_000)])
    db.commit()
    big_end = db.wal.size
    assert big_end > 1 << 20
    db.apply([Put("meta", b"after", b"1")])
    db.commit()
    crash(db)
    return path / LOG_NAME, big_end


def test_a_big_entry_replays_and_a_torn_one_after_it_is_dropped(tmp_path: Path) -> None:
    log, big_end = big_commit_then_small_crashed(tmp_path)
    with open(log, "r+b") as fh:
        fh.truncate(log.stat().st_size - 3)
    again = opened(tmp_path)
    assert again.replayed == 1 and again.log_dropped > 0 and again.wal.size == big_end
    assert again.count("queue") == 30_000 and again.get("meta", b"after") is None
    assert again.get("queue", slice_prefix(29_999 % 7) + b"%08d" % 29_999) == noise(29_999)
    again.close()


def test_a_big_entry_torn_in_its_middle_applies_none_of_its_writes(tmp_path: Path) -> None:
    """wal.py rule 8: the checksum over the whole entry first, then its writes."""
    log, big_end = big_commit_then_small_crashed(tmp_path)
    with open(log, "r+b") as fh:
        fh.truncate(big_end - (1 << 19))
    again = opened(tmp_path)
    assert again.replayed == 0 and again.count("queue") == 0 and again.wal.size == 0
    again.close()


def test_a_whole_entry_that_does_not_decode_refuses_the_open(tmp_path: Path) -> None:
    """wal.py rule 8: its checksum holds, so it is no crash's tail: no silent cut, and nothing applied."""
    log = three_commits_crashed(tmp_path)
    db = opened(tmp_path)
    seq = db.seq
    crash(db)
    payload = b"\x92" + msgpack.packb((0, 2, b"k", b"v")) + msgpack.packb(7)  # a row that is no write
    crc = zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq + 1)))
    with open(log, "ab") as fh:
        fh.write(struct.pack("<IQI", len(payload), seq + 1, crc) + payload)
    with pytest.raises(FrontierError, match="do not decode"):
        opened(tmp_path)
    assert log.stat().st_size > 0 and lmdb_meta(tmp_path, b"k0") is None


def test_entries_an_lmdb_commit_holds_are_never_replayed_again(tmp_path: Path) -> None:
    """A crash between the LMDB commit and the log's reset leaves old entries: skipped by sequence."""
    db = opened(tmp_path)
    db.apply([Put("meta", b"k", b"old")])
    db.commit()
    shutil.copy(tmp_path / LOG_NAME, tmp_path / "old.log")
    db.apply([Put("meta", b"k", b"new")])
    db.commit(to_lmdb=True)
    db.close()
    shutil.copy(tmp_path / "old.log", tmp_path / LOG_NAME)  # as if the reset had not happened
    again = opened(tmp_path)
    assert again.replayed == 0 and again.get("meta", b"k") == b"new"
    again.close()


def test_a_big_log_makes_the_next_commit_an_lmdb_commit(tmp_path: Path) -> None:
    db = opened(tmp_path, log_bytes=2_000)
    for i in range(40):
        db.apply([Put("meta", b"k%d" % i, b"v" * 100), Put("seen", seen_key(i), b"")])
        db.commit()
        assert db.wal.size < 2_000 + 400
    assert lmdb_meta(db, b"k20") == b"v" * 100  # LMDB commits were made along the way
    assert int(lmdb_meta(db, b"seq") or 0) <= db.seq
    crash(db)
    again = opened(tmp_path)
    assert again.count("seen") == 40 and all(again.get("meta", b"k%d" % i) for i in range(40))
    again.close()


ROW = 1_000
"""Bytes of a value the trigger tests put, so that the LMDB's size is known from below."""


def load(db: FrontierDB, rows: int) -> None:
    """``rows`` queue rows of :data:`ROW` bytes each, in one LMDB commit."""
    db.apply([Put("queue", slice_prefix(i % 7) + b"load%08d" % i, b"x" * ROW) for i in range(rows)])
    db.commit(to_lmdb=True)


def logs_at_lmdb_commits(db: FrontierDB, commits: int) -> tuple[list[int], int]:
    """``commits`` small commits of new queue rows; the log's msgpack bytes (db.py rule 14, wal.py rule
    12) at each that was an LMDB commit (the log emptied by it), and the largest entry."""
    at, entry = [], 0
    for c in range(commits):
        db.apply([Put("queue", slice_prefix(i % 7) + b"c%06d-%02d" % (c, i), b"y" * 100) for i in range(20)])
        before = db.wal.held
        db.commit()
        if db.wal.held:
            entry = max(entry, db.wal.held - before)
        else:
            at.append(before)
    return at, entry


@pytest.mark.parametrize("reopen", [False, True])
def test_the_log_reaches_a_share_of_the_lmdb_before_an_lmdb_commit(tmp_path: Path, reopen: bool) -> None:
    """db.py rule 14, with the LMDB's size taken after an LMDB commit or at the open: 2,000 rows of 1,000
    bytes make an LMDB of more than 2 MB and at most its file's pages, and half of it is the log's."""
    db = opened(tmp_path, log_bytes=16 << 10, log_share=0.5, log_max_bytes=64 << 20)
    load(db, 2_000)
    if reopen:
        db.close()
        db = opened(tmp_path, log_bytes=16 << 10, log_share=0.5, log_max_bytes=64 << 20)
    pages = db.env.info()["last_pgno"] + 1
    at, entry = logs_at_lmdb_commits(db, 1_000)
    assert at, "no LMDB commit"
    assert 0.5 * 2_000 * ROW <= at[0] < 0.5 * pages * db.env.stat()["psize"] + entry
    db.close()


@pytest.mark.parametrize(("share", "cap", "floor"), [(0.5, 256 << 10, 256 << 10), (0.0, 64 << 20, 64 << 10),
                                                     (0.5, 32 << 10, 64 << 10)])
def test_the_log_is_kept_between_log_bytes_and_its_cap(tmp_path: Path, share: float, cap: int,
                                                       floor: int) -> None:
    """db.py rule 14: an LMDB of 2 MB and more; a cap under half of it (256 KiB) holds the log to the cap,
    share 0 keeps ``log_bytes`` (64 KiB), and a cap under ``log_bytes`` gives way to it."""
    db = opened(tmp_path, log_bytes=64 << 10, log_share=share, log_max_bytes=cap)
    load(db, 2_000)
    at, entry = logs_at_lmdb_commits(db, 600)
    assert len(at) >= 3 and all(floor <= size < floor + entry for size in at)
    db.close()


@pytest.mark.parametrize(("setting", "value"),
                         [("log_share", -0.1), ("log_share", 17.0), ("log_max_mb", -1.0)])
def test_a_log_size_out_of_range_is_refused_by_name(setting: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"frontier\.{setting}: must be in"):
        validate(Config(frontier=FrontierConfig(**{setting: value})))


def test_a_snapshot_is_the_last_commit_whatever_is_applied_after_it(tmp_path: Path) -> None:
    db = opened(tmp_path)
    db.apply([Put("queue", slice_prefix(1) + b"a", b"1"), Put("queue", slice_prefix(2) + b"b", b"2")])
    db.commit(to_lmdb=True)
    db.apply([DeleteSlices(frozenset({1})), Put("queue", slice_prefix(1) + b"c", b"3"),
              Put("seen", seen_key(8), b""), Delete("queue", slice_prefix(2) + b"b")])
    db.commit()  # in the log only
    db.apply([Put("queue", slice_prefix(1) + b"pending", b"4")])  # applied, not committed
    snap = db.snapshot()  # the log read on top of the LMDB commit: an LMDB commit now would hold "pending"
    assert list(snap.items("queue")) == [(slice_prefix(1) + b"c", b"3")]
    assert snap.get("queue", slice_prefix(1) + b"a") is None and snap.get("seen", seen_key(8)) == b""
    snap.close()
    db.commit()
    snap = db.snapshot()  # nothing pending: an LMDB commit, then the LMDB alone
    assert db.wal.size == 0
    assert [k for k, _ in snap.items("queue")] == [slice_prefix(1) + b"c", slice_prefix(1) + b"pending"]
    assert snap.get("seen", seen_key(8)) == b""
    snap.close()
    db.close()


def streamed(path: Path, commits: int | None = None) -> tuple[int, LogOverlay | None]:
    """polecat status's read of the log a chunk at a time (wal.py rule 9) over a read transaction begun
    now, past ``commits`` (the transaction's when None); and that transaction's sequence."""
    with status._read_txn(path, ()) as (env, txn, dbs):
        seq = int(txn.get(b"seq", b"0", db=dbs["meta"]))
        committed = CommittedTables(txn, dbs, status._NO_SEEN)
        return seq, status._streamed(path / LOG_NAME, committed, seq if commits is None else commits, env,
                                     dbs["meta"])


def test_status_reads_the_log_as_it_is_past_its_read_transaction(tmp_path: Path) -> None:
    log, _ = big_commit_then_small_crashed(tmp_path)
    seq, overlay = streamed(tmp_path)
    assert overlay is not None and overlay.seq == seq + 2 and overlay.added("queue") == 30_000
    with open(log, "r+b") as fh:
        fh.truncate(log.stat().st_size - 3)  # an append under way
    assert streamed(tmp_path)[1].seq == seq + 1  # type: ignore[union-attr]


def test_status_reads_the_log_again_whole_when_its_read_may_have_missed_a_reset(tmp_path: Path) -> None:
    """wal.py rule 9: entries that do not follow the read transaction's sequence, or an LMDB commit since
    it began, tell nothing; rule 6's read (the file before the transaction) answers."""
    three_commits_crashed(tmp_path)
    seq, _ = streamed(tmp_path)
    assert streamed(tmp_path, seq - 1)[1] is None  # the first entry past it is not its next: a gap
    with status._read_txn(tmp_path, ()) as (env, txn, dbs):
        committed = CommittedTables(txn, dbs, status._NO_SEEN)
        # The replay, an LMDB commit, the log emptied, under the reader (by another process: LMDB opens
        # an environment once a process).
        writer = ("import sys, pathlib; from polecat.frontier.db import FrontierDB; "
                  "FrontierDB(pathlib.Path(sys.argv[1]), map_size=1 << 24, params={}).close()")
        subprocess.run([sys.executable, "-c", writer, str(tmp_path)], check=True)
        assert (tmp_path / LOG_NAME).stat().st_size == 0
        assert status._streamed(tmp_path / LOG_NAME, committed, seq, env, dbs["meta"]) is None
    with status._snapshot(tmp_path, ()) as (_, tables, (commits, _)):
        assert commits == seq + 3 and tables.get("meta", b"k2") == b"v" * 100


def _short_writev(monkeypatch: pytest.MonkeyPatch, took: int) -> None:
    """``os.writev`` as a disk that fills mid-entry leaves it: the first ``took`` bytes written, no more."""
    real_write = os.write

    def writev(fd: int, parts: list[bytes]) -> int:
        return real_write(fd, b"".join(parts)[:took])

    monkeypatch.setattr(os, "writev", writev)


def test_an_append_the_kernel_took_part_of_is_written_on(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    db = opened(tmp_path)
    db.apply([Put("meta", b"k0", b"v")])
    db.commit()
    _short_writev(monkeypatch, 7)  # wal rule 10: the rest follows, the entry is whole
    db.apply([Put("meta", b"k1", b"v" * 5000)])
    db.commit()
    monkeypatch.undo()
    crash(db)
    again = opened(tmp_path)
    assert again.replayed == 2 and again.log_dropped == 0 and again.get("meta", b"k1") == b"v" * 5000
    again.close()


def test_a_full_disk_mid_append_fails_it_as_enospc_and_leaves_no_torn_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = opened(tmp_path)
    db.apply([Put("meta", b"k0", b"v")])
    db.commit()
    whole = db.wal.size
    _short_writev(monkeypatch, 7)

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    db.apply([Put("meta", b"k1", b"v")])
    with pytest.raises(StorageFault, match="disk full"):  # not "short write" (wal rule 10)
        db.commit()
    monkeypatch.undo()
    assert (tmp_path / LOG_NAME).stat().st_size == whole  # cut back to its last whole entry


def test_the_bytes_a_batch_puts_are_its_rows_bytes_without_expanding_them() -> None:
    writes: list[Write] = [Put("meta", b"k", b"vv"), PutRows("queue", [b"a", b"bcd"], [b"1234", b""]),
                           Delete("queue", b"gone"), DeleteSlices(frozenset({1}))]
    assert put_bytes(writes) == sum(len(w.key) + len(w.value) for w in expand(writes) if isinstance(w, Put))
    assert put_bytes(writes) == 3 + 1 + 3 + 4


SLICE_KEYS = st.builds(lambda s, k: slice_prefix(s) + k, st.integers(0, 1), st.sampled_from([b"a", b"b"]))
SEEN_KEYS = st.builds(lambda s, k: slice_prefix(s) + k * 16, st.integers(0, 2), st.sampled_from([b"x", b"y"]))
VALUES = st.binary(min_size=1, max_size=6)  # LMDB keeps no empty value under a dupsort key (near)
REPLAYED_WRITES = st.lists(st.one_of(
    st.builds(Put, st.sampled_from(["queue", "hosts", "meta", "near"]), SLICE_KEYS, VALUES),
    st.builds(Put, st.just("seen"), SEEN_KEYS, st.just(b"")),
    st.builds(Delete, st.sampled_from(["queue", "hosts", "meta", "near"]), SLICE_KEYS),
    st.builds(Delete, st.just("seen"), SEEN_KEYS),
    st.lists(st.tuples(SLICE_KEYS, VALUES), max_size=4).map(
        lambda rows: PutRows("queue", [k for k, _ in rows], [v for _, v in rows])),
    st.builds(DeleteSlices, st.frozensets(st.integers(0, 2), max_size=2)),
), max_size=12)


def state(db: FrontierDB) -> dict[str, object]:
    """Every table's rows (``near``'s every value; ``meta`` but the commit counter), the seen keys and the
    slice marks of ``db``'s open transaction."""
    tables: dict[str, object] = {name: [(k, v) for k, v in db.items(name) if k != b"seq"]  # type: ignore[arg-type]
                                 for name in db.tables}
    return {**tables, "marks": set(db.written.marks)}


@settings(max_examples=80, deadline=None)
@given(st.lists(REPLAYED_WRITES, min_size=1, max_size=5), st.integers(1, 5), st.booleans(), st.booleans())
@example([[Put("near", b"\0\0a", b"1"), Put("near", b"\0\0a", b"2")], [Delete("near", b"\0\0b")]], 5, False,
         False)
@example([[Put("seen", seen_key(0), b""), Delete("seen", seen_key(0)), Put("seen", seen_key(1), b"")]], 5,
         False, False)
@example([[Delete("queue", b"\0\0a"), Put("queue", b"\0\0a", b"1"), Delete("queue", b"\0\0a")]], 2, True,
         False)
@example([[Put("queue", b"\0\1b", b"1"), Put("queue", b"\0\0b", b"2"), Delete("queue", b"\0\0a"),
           Put("hosts", b"\0\1a", b"3"), Put("hosts", b"\0\0a", b"4")]], 5, False, True)
def test_the_replay_ends_where_applying_each_write_in_order_ends(commits: list[list[Write]], rows: int,
                                                                 torn: bool, ordered: bool) -> None:
    """wal.py rule 11: the replay in batches (of ``rows`` rows here, so that they end anywhere), each
    key's last write, ends with the tables, seen keys and slice marks that applying the logged writes one
    at a time in order (the replay before it) gives; a torn last entry is left out whole. So it does with
    a batch's rows put in key order (db.py rule 17, ``ordered``: from 1 row of a table on)."""
    with tempfile.TemporaryDirectory() as tmp:
        crashed, direct = opened(Path(tmp) / "crashed"), opened(Path(tmp) / "direct")
        for writes in commits:
            crashed.apply(writes)
            crashed.commit()
        crash(crashed)
        log = Path(tmp) / "crashed" / LOG_NAME
        if torn:
            with open(log, "r+b") as fh:
                fh.truncate(log.stat().st_size - 1)
        kept = commits[:-1] if torn else commits
        for writes in kept:
            direct._apply(direct.txn, writes)
        with mock.patch.object(wal, "REPLAY_ROWS", rows), \
                mock.patch.object(frontier_db, "ORDER_ROWS", 1 if ordered else 1 << 30):
            again = opened(Path(tmp) / "crashed")
        try:
            assert again.replayed == len(kept) and again.seq == direct.seq + len(kept)
            assert state(again) == state(direct)
        finally:
            again.close()
            direct.close()


def test_a_batch_holds_at_most_its_rows_and_each_keys_last_write() -> None:
    """wal.py rule 11: ``Replay`` gathers at most its rows before it hands a batch over; a
    ``DeleteSlices`` and a seen key's delete go alone, between the rows before and after them."""
    seen = seen_key(1)
    writes: list[Write] = [Put("queue", b"q1", b"1"), Put("queue", b"q1", b"2"), Delete("hosts", b"h"),
                           Put("near", b"n", b"1"), Put("near", b"n", b"2"), Put("seen", seen, b""),
                           Delete("seen", seen), DeleteSlices(frozenset({3})), Put("meta", b"m", b"v")]
    entries = [(7, iter(msgpack.unpackb(encode(writes), use_list=False)))]
    steps = list(Replay(entries, after=6, rows=4))
    batches = [step for step in steps if isinstance(step, Batch)]
    assert [step for step in steps if not isinstance(step, Batch)] == [Delete("seen", seen),
                                                                       DeleteSlices(frozenset({3}))]
    assert batches[0].last["queue"] == {b"q1": b"2"} and batches[0].last["hosts"] == {b"h": None}
    assert batches[1].in_order == [(b"n", b"2")] and batches[1].last["seen"] == {seen: b""}
    assert batches[2].last["meta"] == {b"m": b"v"}
    assert batches[0].in_order == [(b"n", b"1")]


@given(st.dictionaries(st.binary(max_size=12), st.one_of(st.none(), st.binary(max_size=4)), max_size=40))
@example({b"\xff": b"1", b"\x80\0": None, b"a": b"2", b"": b"3", b"abcdefgh0": b"4", b"abcdefgh": b"5"})
def test_a_batch_of_a_table_is_put_in_the_order_of_its_keys_first_bytes(
        rows: dict[bytes, bytes | None]) -> None:
    """db.py rule 17: the replay puts (and deletes) a table's rows of a batch by their keys' first
    ``ORDER_BYTES`` bytes, unsigned (short keys as if padded with zero bytes), each key with its value."""
    with mock.patch.object(frontier_db, "ORDER_ROWS", 0):
        keys, values = frontier_db._in_key_order(rows)
    assert sorted(zip(keys, values, strict=True)) == sorted(rows.items())
    heads = [key[:frontier_db.ORDER_BYTES].ljust(frontier_db.ORDER_BYTES, b"\0") for key in keys]
    assert heads == sorted(heads)


def test_a_put_of_no_value_refuses_the_open(tmp_path: Path) -> None:
    """wal.py rule 11: a nil value would read as a delete in a batch: no write, so no log entry."""
    db = opened(tmp_path)
    seq = db.seq
    crash(db)
    payload = b"\x91" + msgpack.packb((0, 2, b"k", None))
    crc = zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq + 1)))
    with open(tmp_path / LOG_NAME, "ab") as fh:
        fh.write(struct.pack("<IQI", len(payload), seq + 1, crc) + payload)
    with pytest.raises(FrontierError, match="a put of no value"):
        opened(tmp_path)


def test_a_commit_bigger_than_the_log_is_an_lmdb_commit_not_an_append(tmp_path: Path) -> None:
    """db.py rule 16: an entry that would reach the log's size alone (an open's index build at 50M URLs
    made one past the 32-bit length of an entry) goes into the LMDB commit, not the log."""
    db = opened(tmp_path, log_bytes=2_000)
    db.apply([Put("meta", b"small", b"v")])
    db.commit()
    assert db.wal.size > 0  # a small commit is an append
    logged = db.wal.size
    db.apply([Put("meta", b"big%d" % i, b"v" * 100) for i in range(40)])  # ~4 KB: past the log's 2,000 B
    db.commit()
    assert db.wal.size == 0 < logged  # an LMDB commit, the log emptied; not a 4 KB entry appended
    assert lmdb_meta(db, b"big39") == b"v" * 100 and lmdb_meta(db, b"small") == b"v"
    db.close()


MAIN_LOG = Path(__file__).parent / "fixtures" / "wal_bee565a" / "frontier"
"""A frontier whose log main wrote before wal.py rule 12 (tests/fixtures/wal_bee565a/make_fixture.py)."""


def main_log_crashed(path: Path) -> None:
    """The fixture's frontier, as a kill -9 left it, copied into ``path``."""
    shutil.copytree(MAIN_LOG / "seen", path / "seen")
    shutil.copy(MAIN_LOG / LOG_NAME, path / LOG_NAME)
    data = zstandard.ZstdDecompressor().decompress((MAIN_LOG / "data.mdb.zst").read_bytes())
    (path / "data.mdb").write_bytes(data)


def payloads(log: Path) -> list[bytes]:
    """The payload of each entry of the log file ``log`` (wal.py rule 1)."""
    data, out = log.read_bytes(), []
    while data:
        length = struct.unpack_from("<I", data)[0]
        out.append(data[16: 16 + length])
        data = data[16 + length:]
    return out


def test_a_log_main_wrote_uncompressed_replays_and_compressed_entries_follow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """wal.py rule 12's migration: a log of msgpack payloads (main's, before the rule) replays as it is.
    Main's data dir is schema 5, so the open replays it into the schema-6 upgrade's own commit (db.py rule
    18), which empties the log; this release's compressed entries follow, and replay after a crash. Its
    ``queue`` rows are the log's test rows, not queue keys, so schema 7's rekey (db.py rule 19, tested in
    tests/test_frontier_schema7.py) leaves them as they are here."""
    monkeypatch.setattr("polecat.frontier.db.rekey_queue_v6", lambda *args: RekeyReport(0, 0, 0, 0))
    main_log_crashed(tmp_path)
    assert not any(p.startswith(zstandard.FRAME_HEADER) for p in payloads(tmp_path / LOG_NAME))
    db = opened(tmp_path)
    assert db.replayed == 5 and db.get("meta", b"uncommitted") is None
    assert db.get("queue", b"".join((slice_prefix(0), b"queue%06d" % 0))) is None  # deleted by commit 1
    assert db.get("queue", slice_prefix(4) + b"queue%06d" % 151) == b"http://h151.test/page"
    assert db.get("queue", slice_prefix(3) + b"queue%06d" % 150) is None  # its slice released after it
    assert db.get("queue", slice_prefix(3) + b"queue%06d" % 304) == b"http://h304.test/page"
    assert [db.get("hosts", b"host%d" % c) for c in range(5)] == [b"record %d" % c for c in range(5)]
    assert db.get("seen", seen_key(151)) is not None and db.get("seen", seen_key(150)) is None
    queued = db.count("queue")
    assert db.seeds_marked is not None and db.wal.size == db.wal.held == 0  # the upgrade's commit holds it
    db.apply([Put("meta", b"after", b"1")])
    db.commit()
    crash(db)
    forms = [p.startswith(zstandard.FRAME_HEADER) for p in payloads(tmp_path / LOG_NAME)]
    assert forms == [True]
    again = opened(tmp_path)
    assert again.replayed == 1 and again.get("meta", b"after") == b"1" and again.count("queue") == queued
    again.close()


def test_entries_are_stored_compressed_and_the_log_counts_their_msgpack(tmp_path: Path) -> None:
    """wal.py rule 12: seed-like rows (a host each) stored at under a third of their msgpack; db.py rule
    14's threshold counts the msgpack (:attr:`WriteLog.held`), after a reopen too."""
    db = opened(tmp_path, log_bytes=1 << 30)
    for c in range(4):
        db.apply([Put("queue", slice_prefix(i % 4096) + b"%08d" % i, b"\x01http://seed-%d.example/" % i)
                  for i in range(2_000 * c, 2_000 * (c + 1))])
        db.commit()
    size, held = db.wal.size, db.wal.held
    assert 3 * size < held
    assert all(p.startswith(zstandard.FRAME_HEADER) for p in payloads(tmp_path / LOG_NAME))
    assert db.wal.bound() == held
    crash(db)
    again = opened(tmp_path, log_bytes=1 << 30)
    assert again.replayed == 4 and again.count("queue") == 8_000
    assert (again.wal.size, again.wal.held) == (size, held)
    again.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(WRITES, min_size=1, max_size=5))
def test_entries_appended_compressed_read_back_as_written(commits: list[list[Write]]) -> None:
    """wal.py rules 8 and 12: every entry reads back as the writes it was appended with, decompressed a
    chunk at a time, and :attr:`WriteLog.held` is their msgpack's bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        log = wal.WriteLog(Path(tmp) / LOG_NAME)
        for seq, writes in enumerate(commits, 1):
            entry = Entry()
            entry.add(writes)
            log.append(seq, entry)
        with open(log.path, "rb") as fh:
            read = [(seq, list(writes)) for seq, writes in wal.entries_in(fh, log.size, 0)]
        assert read == [(seq, list(expand(writes))) for seq, writes in enumerate(commits, 1)]
        assert log.held == sum(len(encode(writes)) for writes in commits) == log.bound()
        log.close()


def test_a_compressed_entry_whose_frame_does_not_decode_refuses_the_open(tmp_path: Path) -> None:
    """wal.py rules 8 and 12: its checksum holds, so it is no tail; a frame cut short inside is no entry."""
    db = opened(tmp_path)
    seq = db.seq
    crash(db)
    frame = zstandard.ZstdCompressor().compress(encode([Put("meta", b"k", b"v" * 100)]))
    payload = frame[:-4]  # the frame's last block cut: its checksum is the entry's, whole
    crc = zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq + 1)))
    with open(tmp_path / LOG_NAME, "ab") as fh:
        fh.write(struct.pack("<IQI", len(payload), seq + 1, crc) + payload)
    with pytest.raises(FrontierError, match="do not decode"):
        opened(tmp_path)
