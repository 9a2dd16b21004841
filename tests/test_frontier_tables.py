"""The in-memory frontier database (polecat/testing/fakes.py) reads as the LMDB one after the same writes.

The frontier decision tests run on both (tests/conftest.py, ``frontier_backend``); these check the fake's
side of that bargain directly: the rules of polecat/frontier/tables.py, on the same sequences of writes,
commits and crashes, give the same reads from both.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.frontier import seenlog, slices
from polecat.frontier.db import FrontierDB
from polecat.frontier.handover_ranges import SLICED_TABLES, WrittenSlices
from polecat.frontier.keys import GLOBAL
from polecat.frontier.slices import prefix_slice, slice_prefix
from polecat.frontier.tables import FrontierTables
from polecat.testing.fakes import MemoryFrontierDB
from polecat.writes import Delete, DeleteSlices, Put, Table, Write

SLICES = (0, 1, 4095)
PREFIXES = [b"", GLOBAL, *(slice_prefix(s) for s in SLICES)]
"""Where the drawn keys start: the slices drawn, the global ops, and (b"") anywhere."""
META = b"t:"
"""Keys drawn in ``meta`` start here: FrontierDB keeps its own (schema, slices, seq) beside them."""
TABLES: tuple[Table, ...] = (*SLICED_TABLES, "meta")

keys = st.builds(lambda p, tail: p + tail, st.sampled_from(PREFIXES[1:]), st.binary(max_size=3))
OTHER = tuple(t for t in TABLES if t != "seen")
puts = st.builds(lambda t, k, v: Put(t, META + k if t == "meta" else k, v),
                 st.sampled_from(OTHER), keys, st.binary(max_size=4))
seen_keys = st.builds(lambda s, tail: slice_prefix(s) + bytes([tail]) * 15 + b"\x00",
                      st.sampled_from(SLICES), st.integers(0, 5))
"""The seen table's keys are 18 bytes, a slice and a URL fingerprint (seenlog.py rule 1); few, so that
they come back after a release and meet in merges."""
seen_puts = st.builds(lambda k: Put("seen", k, b""), seen_keys)
deletes = st.builds(lambda t, k: Delete(t, META + k if t == "meta" else k), st.sampled_from(OTHER), keys)
releases = st.builds(DeleteSlices, st.frozensets(st.sampled_from(SLICES), min_size=1))
steps = st.lists(st.one_of(st.lists(st.one_of(puts, seen_puts, seen_puts, deletes, releases), min_size=1,
                                    max_size=8),
                           st.just("commit"), st.just("crash")), max_size=14)


@dataclass
class Lmdb:
    """A FrontierDB in ``path``, reopened after a crash as a node would."""

    path: Path
    db: FrontierDB | None = None

    def open(self) -> FrontierDB:
        self.db = FrontierDB(self.path, map_size=1 << 24, params={})
        return self.db


def reads(db: FrontierTables, probes: list[bytes]) -> dict[str, object]:
    """Everything the frontier could read of the drawn keys."""
    out: dict[str, object] = {}
    for table in TABLES:
        prefixes = [META] if table == "meta" else [*PREFIXES, *(p[:3] for p in probes if len(p) > 2)]
        for prefix in prefixes:
            out[f"{table} {prefix!r}"] = list(db.items(table, prefix))
        out[f"{table} get"] = [db.get(table, META + k if table == "meta" else k) for k in probes]
        if table != "meta":
            out[f"{table} count"] = db.count(table)
        if table not in ("meta", "seen"):  # a scan in steps goes on after the last key it read
            out[f"{table} after"] = [list(db.items_after(table, k)) for k in (b"", *probes, b"\xff" * 4)]
    return out


@settings(max_examples=60, deadline=None)
@given(steps=steps)
def test_the_fake_reads_as_lmdb_after_the_same_writes(steps: list[list[Write] | str]) -> None:
    with tempfile.TemporaryDirectory() as tmp, patch.object(seenlog, "FANOUT", 2):  # merges early
        lmdb = Lmdb(Path(tmp) / "frontier")
        real, fake = lmdb.open(), MemoryFrontierDB()
        probes = [w.key for step in steps if isinstance(step, list)
                  for w in step if not isinstance(w, DeleteSlices)]
        try:
            base = real.seq
            for step in steps:
                if step == "commit":
                    assert real.commit() - base == fake.commit()
                elif step == "crash":
                    real.close()
                    real = lmdb.open()
                    fake.close()
                else:
                    assert isinstance(step, list)
                    real.apply(step)
                    fake.apply(step)
                assert reads(fake, probes) == reads(real, probes)
            snap_real, snap_fake = real.snapshot(), fake.snapshot()
            after = [Put("queue", slice_prefix(0) + b"after", b"x"),
                     Put("seen", slice_prefix(1) + b"a" * 16, b"")]
            real.apply(after)
            fake.apply(after)
            for table in TABLES:
                assert list(snap_fake.items(table, META if table == "meta" else b"")) == list(
                    snap_real.items(table, META if table == "meta" else b""))
            snap_real.close()
            snap_fake.close()
        finally:
            real.close()


def test_a_range_reads_on_past_keys_deleted_while_it_is_read() -> None:
    # The frontier retires robots-disallowed URLs while it reads a host's queue: its deletes are applied
    # later (writes.py rule 3), but a range must not lose its place if a key goes meanwhile, as in LMDB.
    fake = MemoryFrontierDB()
    fake.apply([Put("queue", bytes([0, 0, i]), b"") for i in range(5)])
    seen = []
    for key, _ in fake.items("queue", b"\x00\x00"):
        seen.append(key[-1])
        fake.apply([Delete("queue", key)])
    assert seen == [0, 1, 2, 3, 4] and fake.count("queue") == 0


def test_a_getter_reads_later_writes_and_a_crash_keeps_the_last_commit() -> None:
    fake = MemoryFrontierDB()
    seen = fake.getter("seen")
    fake.apply([Put("seen", b"a", b"")])
    assert seen(b"a") == b"" and fake.pending == 0
    assert fake.commit() == 1 and fake.get("meta", b"seq") == b"1"
    fake.apply([Put("seen", b"b", b""), Delete("seen", b"a")])
    fake.close()
    assert [k for k, _ in fake.items("seen")] == [b"a"] and fake.commits == 1


@given(st.lists(st.one_of(st.integers(0, slices.SLICES - 1).map(slice_prefix), st.just(GLOBAL),
                          st.just(b"\x01")), max_size=30))
def test_a_commit_makes_the_slices_its_marks_name_committed(marks: list[bytes]) -> None:
    """Rule 6, as WrittenSlices turns a commit's key prefixes into slices (one unpack for them all): each
    prefix's slice, or every slice once one is cross-slice (GLOBAL, or a key shorter than a prefix)."""
    written = WrittenSlices()
    written.take()  # a database opened anew starts with every slice marked
    written.marks.update(marks)
    written.commit()
    cross = GLOBAL in marks or b"\x01" in marks
    assert written.take() == (frozenset(range(slices.SLICES)) if cross else {prefix_slice(m) for m in marks})
    assert not written.marks
