"""What the periodic jobs and operator changes read, at one frontier size and at ten times it (issue 39):
a hand-over reads the key ranges of its slices only, an operator control reads no table, a refresh scan
reads the head of its time-keyed indexes and the refresh rows of the hosts with a URL due. Operations are
counted (rows read, and where), never timed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from polecat.frontier import status
from polecat.frontier.keys import GLOBAL, priority_band, queue_prefix
from polecat.frontier.slices import SLICES, slice_of, slice_prefix
from polecat.writes import Table
from tests.frontier_helpers import Rig, canon
from tests.test_frontier_handover import CFG, crawl_some, serve


@dataclass
class Reads:
    """The ranges a frontier read through ``items`` (table, prefix) and the rows they gave."""

    ranges: list[tuple[Table, bytes]] = field(default_factory=list)
    rows: int = 0

    def wrap(self, items: Callable[..., Iterator[tuple[bytes, bytes]]]) -> Callable[..., Any]:
        def counted(table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
            self.ranges.append((table, prefix))
            for row in items(table, prefix):
                self.rows += 1
                yield row
        return counted

    def clear(self) -> None:
        self.ranges.clear()
        self.rows = 0


def frontier_of(path: Path, extra_hosts: int, backend: str = "memory") -> tuple[Rig, Reads, float]:
    """A frontier that crawled a little, with ``extra_hosts`` more hosts queued."""
    rig = Rig(path, cfg=CFG, backend=backend)
    now = crawl_some(rig, 1_000.0, 30)
    for i in range(extra_hosts):
        rig.frontier.add_many([canon(f"http://x{i}.test/p{k}") for k in range(3)], 1, 0.5, now)
    now = serve(rig, now, 30)
    rig.frontier.commit()
    reads = Reads()
    rig.db.items = reads.wrap(rig.db.items)  # type: ignore[method-assign]
    return rig, reads, now


def in_slices(prefix: bytes, slices: frozenset[int]) -> bool:
    return prefix == GLOBAL or any(prefix.startswith(slice_prefix(s)) for s in slices)


def check_a_size(path: Path, extra_hosts: int) -> int:
    rig, reads, now = frontier_of(path, extra_hosts)
    moving = frozenset(range(0, SLICES, 64))
    rig.frontier.block("x1.test")
    rig.frontier.throttle_now("x2.test", 0.5, now)
    # Operator controls: the queue of the blocked host, and no other read (the hosts in memory are
    # walked, host_table rule 6; those out of memory apply them when read back).
    x1 = rig.raw._table.peek("x1.test")
    assert x1 is not None
    assert all(p == queue_prefix("x1.test", x1.num) for _, p in reads.ranges)
    reads.clear()
    rig.frontier.set_owned(frozenset(range(SLICES)) - moving, now)
    assert all(in_slices(p, moving) for _, p in reads.ranges)
    reads.clear()
    rig.frontier.export_slices(moving, now)
    assert reads.ranges and all(in_slices(p, moving) for _, p in reads.ranges)
    exported = reads.rows
    reads.clear()
    rig.frontier.release_slices(moving)
    assert all(in_slices(p, moving) for _, p in reads.ranges)
    assert reads.rows <= exported  # its slices' records, never the rest of the frontier
    reads.clear()
    rig.frontier.requeue_due(now + 10.0 * 86_400.0)
    for table, prefix in reads.ranges:
        assert (table in ("due", "fresh") and prefix == b"") or (table == "refresh" and prefix)
    hosts_due = {p for t, p in reads.ranges if t == "refresh"}
    assert 0 < len(hosts_due) <= 60  # hosts with a URL due: some of those of the 60 pages fetched
    return len([h for h in range(extra_hosts) if slice_of(f"x{h}.test") in moving])


def test_hand_over_and_controls_read_what_they_change_at_1x_and_10x(tmp_path: Path) -> None:
    check_a_size(tmp_path / "a", 300)
    assert check_a_size(tmp_path / "b", 3_000) > 0  # some of the extra hosts moved


def test_queue_bands_are_counted_once_per_data_dir_and_kept_through_a_release(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=CFG)
    now = crawl_some(rig, 1_000.0, 10)
    first = rig.frontier.queue_bands()
    rig.frontier.commit()
    rig.crash()
    rig.reopen(now)
    reads = Reads()
    rig.db.items = reads.wrap(rig.db.items)  # type: ignore[method-assign]
    assert rig.frontier.queue_bands() == first and reads.ranges == []  # /metrics counts nothing
    rig.frontier.release_slices(frozenset(range(0, SLICES, 2)))
    left = Counter(priority_band(key) for key, _ in rig.db.items("queue"))
    assert rig.frontier.queue_bands() == {name: left[name] for name in first} != first


def bands_in(rig: Rig) -> dict[str, int]:
    """The queue bands by a pass over the queue table (what the count must equal), those not empty."""
    return dict(Counter(priority_band(key) for key, _ in rig.db.items("queue")))


def test_a_new_data_dir_keeps_its_queue_bands_from_nothing(tmp_path: Path) -> None:
    """host_table.py rule 24: a crawl's first scrape reads no queue row, whatever the queue holds."""
    rig = Rig(tmp_path, cfg=CFG)
    crawl_some(rig, 1_000.0, 10)
    reads = Reads()
    rig.db.items = reads.wrap(rig.db.items)  # type: ignore[method-assign]
    bands = rig.frontier.queue_bands()
    assert reads.ranges == [] and bands is not None
    assert {k: v for k, v in bands.items() if v} == bands_in(rig)
    assert sum(bands.values()) == rig.frontier.stats(1_000.0).queued > 0


def test_a_data_dir_without_a_count_is_counted_in_steps_through_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir whose queue has no count (as 0.3.0 left it) is counted a few keys a call, while URLs
    are queued, leased and finished between the calls; the count then equals a pass over the queue, is
    kept in ``meta`` only once whole, and the next open reads it."""
    from polecat.frontier import host_table
    from polecat.frontier.host_table import BANDS
    from polecat.writes import Delete

    rig = Rig(tmp_path, cfg=CFG)
    now = crawl_some(rig, 1_000.0, 10)
    for i in range(40):
        rig.frontier.add_many([canon(f"http://x{i}.test/p{k}") for k in range(3)], 1, 0.5, now)
    rig.frontier.commit()
    rig.db.apply([Delete("meta", BANDS)])
    rig.db.commit()
    rig.crash()
    rig.reopen(now)
    monkeypatch.setattr(host_table, "BAND_STEP", 7)
    queued = rig.frontier.stats(now).queued
    calls, extra = 0, 0
    while (bands := rig.frontier.queue_bands()) is None:
        calls += 1
        rig.frontier.add_many([canon(f"http://y{extra}.test/p{k}") for k in range(2)], 1, 0.5, now)
        extra += 1
        now = serve(rig, now, 1)
        rig.frontier.commit()
        assert rig.db.get("meta", BANDS) is None  # rule 24: no part count written
    assert calls >= queued // 7 and extra > 0
    assert {k: v for k, v in bands.items() if v} == bands_in(rig)
    rig.frontier.commit()
    rig.crash()
    rig.reopen(now)
    reads = Reads()
    rig.db.items = reads.wrap(rig.db.items)  # type: ignore[method-assign]
    assert rig.frontier.queue_bands() == bands and reads.ranges == []


class CountingCursor:
    """A cursor of a :class:`CountingTxn`: the rows it gives count for its table."""

    def __init__(self, cursor: Any, rows: Counter[str], name: str) -> None:
        self._cursor = cursor
        self._rows = rows
        self._name = name

    def __enter__(self) -> CountingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        for row in self._cursor:
            self._rows[self._name] += 1
            yield row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class CountingTxn:
    """A read transaction that counts the rows its cursors give and its gets, by table handle."""

    def __init__(self, txn: Any, names: dict[Any, str]) -> None:
        self._txn = txn
        self._names = names
        self.rows: Counter[str] = Counter()

    def cursor(self, db: Any) -> CountingCursor:
        return CountingCursor(self._txn.cursor(db=db), self.rows, self._names[db])

    def get(self, key: bytes, default: Any = None, db: Any = None) -> Any:
        self.rows[self._names[db]] += 1
        return self._txn.get(key, default, db=db)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


class CountingEnv:
    """The environment of a :class:`CountingTxn`: the tables opened in it are named in its counts."""

    def __init__(self, env: Any, txn: CountingTxn) -> None:
        self._env = env
        self._txn = txn

    def open_db(self, name: bytes, txn: CountingTxn, create: bool) -> Any:
        handle = self._env.open_db(name, txn=txn._txn, create=create)
        txn._names[handle] = name.decode()
        return handle

    def __getattr__(self, name: str) -> Any:  # begin: the check after the log's read (wal.py rule 9)
        return getattr(self._env, name)


def status_reads(path: Path, extra_hosts: int, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The rows ``polecat status DIR`` reads, by table, of a frontier with ``extra_hosts`` more hosts."""
    rig, _, _ = frontier_of(path, extra_hosts, "lmdb")
    rig.crash()
    opened = status._read_txn
    seen: list[CountingTxn] = []

    @contextmanager
    def counted(frontier_dir: Path, tables: tuple[str, ...]) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        with opened(frontier_dir, tables) as (env, txn, dbs):
            seen.append(CountingTxn(txn, {handle: name for name, handle in dbs.items()}))
            yield CountingEnv(env, seen[-1]), seen[-1], dbs

    monkeypatch.setattr(status, "_read_txn", counted)
    got = status.read_status(path / "frontier")
    assert got.hosts > extra_hosts
    return seen[0].rows


def test_status_reads_the_same_rows_at_1x_and_10x(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = status_reads(tmp_path / "a", 300, monkeypatch)
    assert small == status_reads(tmp_path / "b", 3_000, monkeypatch), small
    assert "hosts" not in small and "urls" not in small  # counters (host_table rule 12, refresh_index rule 3)


def open_reads(path: Path, seeds: int) -> int:
    """The ``ops`` rows an open of a frontier of ``seeds`` seed hosts (marked in their records since schema
    6: intake.py rule 9, no ``ops`` row) reads."""
    rig = Rig(path, cfg=CFG, backend="memory")
    now = 1_000.0
    rig.frontier.add_seeds([canon(f"http://s{i}.test/") for i in range(seeds)], now)
    rig.frontier.block("blocked.test")
    rig.frontier.commit()
    rig.crash()
    reads = Reads()
    items = rig.memory.items
    rig.memory.items = lambda table, prefix=b"": reads.wrap(items)(table, prefix) if table == "ops" \
        else items(table, prefix)  # type: ignore[method-assign]
    rig.reopen(now)  # the memory backend's database is the one opened again
    assert rig.frontier.is_blocked("blocked.test") and rig.db.count("ops") == 1
    return reads.rows


def test_an_open_reads_no_seed_host_row_at_1x_and_10x(tmp_path: Path) -> None:
    assert open_reads(tmp_path / "a", 30) == open_reads(tmp_path / "b", 300) == 1  # the block


def test_domain_mode_still_reads_its_seed_hosts_at_an_open(tmp_path: Path) -> None:
    cfg = replace(CFG, scope=replace(CFG.scope, mode="domain"))
    rig = Rig(tmp_path, cfg=cfg, backend="memory")
    rig.frontier.add_seed(canon("http://www.example.test/"), 1_000.0)
    rig.frontier.commit()
    rig.crash()
    rig.reopen(1_000.0)  # the seeds' domains are in scope from the marked host records (intake.py rule 9)
    assert rig.frontier.add(canon("http://docs.example.test/a"), 1, 0.5, 1_000.0) == "accepted"
    assert rig.frontier.add(canon("http://other.test/a"), 1, 0.5, 1_000.0) == "out_of_scope"


def test_a_control_naming_a_host_finds_its_keys_with_a_port_by_name(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=CFG, backend="memory")
    now = 1_000.0
    for i in range(20):
        rig.frontier.add_many([canon(f"http://p{i}.test:8080/a"), canon(f"http://p{i}.test/a")], 1, 0.5, now)
    table = rig.raw._table
    before = {h: st.next_allowed for h, st in table.hosts.items()}
    assert table.named("p3.test") == ["p3.test", "p3.test:8080"]
    assert rig.frontier.block("p3.test") == 2  # both of its keys, no other
    assert {h for h, st in table.hosts.items() if st.queued == 0} == {"p3.test", "p3.test:8080"}
    rig.frontier.throttle_now("p4.test", 0.1, now)
    changed = {h for h, st in table.hosts.items() if st.next_allowed != before[h]}
    assert changed == {"p4.test", "p4.test:8080"}
    assert rig.frontier.block("*.test") == 38  # a wildcard: every other host in memory
