"""What the periodic jobs and operator changes read, at one frontier size and at ten times it (issue 39):
a hand-over reads the key ranges of its slices only, an operator control reads no table, a refresh scan
reads the head of its time-keyed indexes and the refresh rows of the hosts with a URL due. Operations are
counted (rows read, and where), never timed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def frontier_of(path: Path, extra_hosts: int) -> tuple[Rig, Reads, float]:
    """A frontier that crawled a little, with ``extra_hosts`` more hosts queued."""
    rig = Rig(path, cfg=CFG, backend="memory")
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
    assert all(p == queue_prefix("x1.test") for _, p in reads.ranges)
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
