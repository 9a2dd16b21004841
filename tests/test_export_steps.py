"""A chunk's export in steps from a committed snapshot (polecat/frontier/handover.py rule 8): each step
reads at most its budget of rows, the bundle is the one-call export's byte for byte, and URLs queued in
the slices meanwhile are caught by rule 5 and sent again. Its adoption in steps (rule 9): each step takes
in at most its budget of records, and the steps, committed between two and cut anywhere, end as the
one-call adoption does (a node's steps: tests/test_release_steps.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polecat.errors import FrontierError
from polecat.frontier.bundle import Fence, SliceBundle
from polecat.frontier.handover_ranges import CommittedSnapshot, _overlaid
from polecat.frontier.keys import SEED_HOST, parse_op_key, url_key
from polecat.frontier.records import UrlRecord
from polecat.frontier.tables import Snapshot
from polecat.writes import Table
from tests.frontier_helpers import Rig, canon
from tests.test_frontier_handover import CFG, fill_slice, hosts_in, queued_urls, queued_urls_of

pytestmark = pytest.mark.usefixtures("frontier_backend")


class CountedSnapshot:
    """A snapshot that counts the rows read from it."""

    def __init__(self, tables: Snapshot) -> None:
        self._tables = tables
        self.rows = 0

    def get(self, table: Table, key: bytes) -> bytes | None:
        return self._tables.get(table, key)

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        for row in self._tables.items(table, prefix):
            self.rows += 1
            yield row

    def close(self) -> None:
        self._tables.close()


def steps_of(rig: Rig, s: int, now: float, budget: int) -> tuple[list[int], SliceBundle]:
    """The export of slice ``s`` from a snapshot of the last commit, step by step: the rows each step
    read, and the bundle."""
    counted = CountedSnapshot(rig.db.snapshot())
    snapshot = CommittedSnapshot(counted)
    export = rig.raw.begin_export(snapshot, [s], now, budget=budget)
    rows: list[int] = []
    while True:
        before = counted.rows
        bundle = export.step()
        rows.append(counted.rows - before)
        if bundle is not None:
            snapshot.close()
            return rows, bundle
        assert len(rows) < 100_000  # each step goes on: never stuck


@pytest.mark.parametrize("scale", [1, 10])
def test_an_export_step_reads_at_most_its_budget_of_rows(tmp_path: Path, scale: int) -> None:
    """Rule 8: whether the slice holds about one step's rows or ten, each step reads at most its budget
    of the snapshot's rows, and together they read each row of the slice once."""
    budget = 40
    a = Rig(tmp_path, cfg=CFG)
    s = 7
    now = fill_slice(a, s, 2 * scale, fill_slice(a, 8, 2, 1000.0))
    rows, bundle = steps_of(a, s, now, budget)
    assert max(rows) <= budget
    assert sum(rows) >= budget * scale // 2 and len(rows) >= sum(rows) // budget  # ~scale steps' worth
    # Each seed host's mark goes as a row of its own, made of its record's (handover.py rule 11).
    marks = sum(1 for name, key, _ in bundle.records() if name == "ops" and parse_op_key(key)[0] == SEED_HOST)
    assert marks > 0 and bundle.records_count - marks <= sum(rows) and bundle.ids == {s}


_ROWS = st.dictionaries(st.binary(max_size=3), st.binary(max_size=2), max_size=12)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_ROWS, newer=_ROWS)
def test_host_records_in_memory_are_read_in_key_order_in_place_of_the_tables(
        rows: dict[bytes, bytes], newer: dict[bytes, bytes]) -> None:
    """The export of the open transaction reads a slice's host rows one by one with the records changed
    in memory since the commit in their place (a step never reads the slice's host rows all at once)."""
    assert list(_overlaid(iter(sorted(rows.items())), newer)) == sorted({**rows, **newer}.items())


@pytest.mark.parametrize("budget", [1, 7, 1 << 40])
def test_a_stepwise_export_is_the_one_call_export_of_the_same_snapshot(tmp_path: Path, budget: int) -> None:
    """Rule 8: no wire change: the same bytes as the one-call export of the snapshot, and as the export of
    the open transaction right after the commit the snapshot is of (its host records all written)."""
    a = Rig(tmp_path, cfg=CFG)
    s = 7
    now = fill_slice(a, s, 3, 1000.0)
    fence = Fence("a", 5, 9)
    one_call = a.raw.export_slices([s], now, fence).to_bytes()
    snapshot = a.raw.snapshot()
    export = a.raw.begin_export(snapshot, [s], now, fence, budget=budget)
    while (stepped := export.step()) is None:
        pass
    assert stepped.to_bytes() == one_call
    for books in (True, False):
        export = a.raw.begin_export(snapshot, [s], now, books=books, budget=budget)
        while (stepped := export.step()) is None:
            pass
        assert stepped.to_bytes() == snapshot.export(frozenset([s]), now, books=books).to_bytes()
    snapshot.close()


def test_urls_queued_in_an_exporting_slice_between_steps_are_sent_again(tmp_path: Path) -> None:
    """Rule 8 with rule 5: the mark is the queue sequence of the snapshot's commit, so URLs queued in the
    slice after that commit (before the snapshot is read, and between two steps) are in no bundle sent,
    are counted, hold the release back and go in the next export; nothing is lost, nothing doubled."""
    a, b = Rig(tmp_path / "a", cfg=CFG), Rig(tmp_path / "b", cfg=CFG)
    s = 7
    now = fill_slice(a, s, 3, 1000.0)
    late = [canon(f"http://{host}/late{i}") for i, host in enumerate(hosts_in(s, 5))]
    a.frontier.add(late[0], 1, 0.5, now)  # after the commit the snapshot is of
    snapshot = a.raw.snapshot()
    export = a.raw.begin_export(snapshot, [s], now, budget=5)
    assert export.step() is None
    a.frontier.add(late[1], 1, 0.5, now)  # between two steps
    a.frontier.add(late[4], 1, 0.5, now)  # a host of the slice that the snapshot does not hold
    while (bundle := export.step()) is None:
        a.frontier.add(late[2], 1, 0.5, now)  # a duplicate after the first: queued once
    snapshot.close()
    a.raw.commit()
    assert a.frontier.queued_since_export([s]) == 4
    with pytest.raises(FrontierError, match="4 URLs queued since their export"):
        a.frontier.release_slices([s])
    b.frontier.adopt(bundle, now)
    assert not set(late) & queued_urls(b)
    a.raw.commit()
    snapshot = a.raw.snapshot()
    export = a.raw.begin_export(snapshot, [s], now, budget=5)
    while (again := export.step()) is None:
        pass
    snapshot.close()
    assert a.frontier.queued_since_export([s]) == 0
    report = b.frontier.adopt(again, now)  # merged: the first bundle's URLs are not queued twice
    assert report.queued == 4 and report.duplicates > 0
    moved = queued_urls_of(a, s)
    a.frontier.release_slices([s])
    assert set(late) - {late[3]} <= moved == queued_urls(b)
    assert queued_urls_of(a, s) == set()



class CountedBundle:
    """A bundle that counts the records read from it."""

    def __init__(self, bundle: SliceBundle) -> None:
        self.ids = bundle.ids
        self._bundle = bundle
        self.read = 0

    def records(self) -> Iterator[tuple[str, bytes, bytes]]:
        for record in self._bundle.records():
            self.read += 1
            yield record


def adopt_in_steps(rig: Rig, bundle: SliceBundle | CountedBundle, now: float, budget: int, *,
                   cut: int | None = None) -> list[int]:
    """``bundle`` adopted by ``rig`` in steps of ``budget``, each step's writes applied and committed
    (a node commits between any two); a crash after ``cut`` steps. The records each step read."""
    adoption = rig.raw.begin_adopt(bundle, now)
    counted = bundle if isinstance(bundle, CountedBundle) else CountedBundle(bundle)
    reads: list[int] = []
    while cut is None or len(reads) < cut:
        before = counted.read
        step = adoption.step(budget)
        reads.append(counted.read - before)
        rig.db.apply(step.writes)
        rig.raw.commit()
        if step.value is not None:
            break
        assert len(reads) < 100_000  # each step goes on: never stuck
    else:
        rig.crash()
        rig.reopen(now)
    adoption.close()
    return reads


def moved_state(rig: Rig, *, fetched: bool = True) -> tuple[object, ...]:
    """What an adoption leaves: the queued URLs, the host counters, the URL records, the seen keys.
    ``fetched`` False: without the hosts' pages fetched, which every adoption of a host adds (host_table
    rule 12), so a chunk sent again counts them again, in steps or not."""
    return (queued_urls(rig), rig.raw.queued, rig.raw._table.known_hosts,
            rig.raw._table.fetched if fetched else None, sorted(rig.db.items("urls")),
            sum(1 for _ in rig.db.items("seen")))


@pytest.mark.parametrize("scale", [1, 10])
def test_an_adoption_step_takes_in_at_most_its_budget_of_records(tmp_path: Path, scale: int) -> None:
    """Rule 9: whether the bundle holds about one step's records or ten, each step reads at most its
    budget of them, and the steps end as the one-call adoption of the same bundle does."""
    budget = 40
    a = Rig(tmp_path / "a", cfg=CFG)
    s = 7
    now = fill_slice(a, s, 2 * scale, 1000.0)
    bundle = a.raw.export_slices([s], now)
    one, stepped = Rig(tmp_path / "one", cfg=CFG), Rig(tmp_path / "stepped", cfg=CFG)
    one.frontier.adopt(bundle, now)
    one.raw.commit()
    reads = adopt_in_steps(stepped, CountedBundle(bundle), now, budget)
    assert max(reads) <= budget and sum(reads) == bundle.records_count
    assert len(reads) >= bundle.records_count // budget >= scale // 2
    assert moved_state(stepped) == moved_state(one)


@pytest.mark.parametrize("cut", [1, 2, 5])
def test_an_adoption_cut_between_steps_and_sent_again_loses_nothing_and_doubles_nothing(
        tmp_path: Path, cut: int) -> None:
    """Rule 9 with chunks rule 3: a crash after ``cut`` committed steps, and the chunk (its
    acknowledgement never sent) adopted again: as one adoption, the adopter's own URLs kept; a URL
    queued here that the exporter had finished dropped (rule 3), even when the steps that queue its host's
    other URLs come before it."""
    a = Rig(tmp_path / "a", cfg=CFG)
    s = 7
    now = fill_slice(a, s, 3, 1000.0)
    bundle = a.raw.export_slices([s], now)
    finished = sorted(url for _, key, raw in bundle.records() if _ == "urls"
                      for url in [UrlRecord.decode(raw).url])
    host = hosts_in(s, 1)[0]
    mine = [canon(f"http://{host}/mine"), *[u for u in finished if host in u][:1]]
    assert len(mine) == 2
    rigs = []
    for name in ("one", "cut"):
        rig = Rig(tmp_path / name, cfg=CFG)
        for url in mine:  # queued here before the adoption: one new, one the exporter finished
            rig.frontier.add(url, 1, 0.5, now)
        rig.raw.commit()
        rigs.append(rig)
    one, cut_rig = rigs
    one.frontier.adopt(bundle, now)
    one.raw.commit()
    adopt_in_steps(cut_rig, bundle, now, 7, cut=cut)
    adopt_in_steps(cut_rig, bundle, now, 7)
    assert moved_state(cut_rig, fetched=False) == moved_state(one, fetched=False)
    assert mine[0] in queued_urls(one) and mine[1] not in queued_urls(one)


def test_a_slice_being_adopted_is_not_released_until_the_adoption_ends(tmp_path: Path) -> None:
    """Rule 9: a release of a slice an adoption is taking in would delete what its steps wrote and leave
    what the next ones write; it is refused until the adoption is over, done or given up."""
    a, b = Rig(tmp_path / "a", cfg=CFG), Rig(tmp_path / "b", cfg=CFG)
    s = 7
    now = fill_slice(a, s, 2, 1000.0)
    adoption = b.raw.begin_adopt(a.raw.export_slices([s], now), now)
    b.db.apply(adoption.step(5).writes)
    with pytest.raises(FrontierError, match="being adopted here"):
        b.frontier.release_slices([s])
    adoption.close()
    b.frontier.release_slices([s])
    assert queued_urls_of(b, s) == set()


@pytest.mark.parametrize("scale", [1, 10])
def test_an_adoption_keeps_the_url_keys_of_hosts_queued_here_alone(tmp_path: Path, scale: int) -> None:
    """Handover rule 10: whatever the bundle's size, an adoption holds in memory the finished and queued
    URL keys of the hosts that had URLs queued here before it, and no other (at 50M URLs a restore of 64
    slices held all 778,750 and the step that read its last record held the loop ~110 ms); rule 3's drop
    still drops what the exporter finished of those hosts."""
    a = Rig(tmp_path / "a", cfg=CFG)
    s = 7
    now = fill_slice(a, s, 4 * scale, 1000.0)
    bundle = a.raw.export_slices([s], now)
    finished = [UrlRecord.decode(raw).url for table, _, raw in bundle.records() if table == "urls"]
    host = hosts_in(s, 1)[0]
    theirs = [u for u in finished if f"//{host}/" in u]
    assert theirs and len(finished) > 3 * scale * len(theirs)
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.add(theirs[0], 1, 0.5, now)  # queued here before: the exporter finished it
    b.raw.commit()
    adoption = b.raw.begin_adopt(bundle, now)
    steps = 0
    while (step := adoption.step(7)).value is None:
        b.db.apply(step.writes)
        steps += 1
    b.db.apply(step.writes)
    assert steps >= len(finished) // 7
    assert adoption._finished == {url_key(u, host) for u in theirs}  # what rule 3 read, and all it kept
    assert theirs[0] not in queued_urls(b)
