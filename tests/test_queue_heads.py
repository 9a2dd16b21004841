"""The queue heads read ahead (polecat/frontier/host_table.py rule 15): after any sequence of pushes,
leases, completions (fetched, retried), withdrawals, blocks, slices released and adopted, and commits
with hosts leaving memory, every head kept is what a fresh read of its host's queue gives; and leases
hand out what they would without heads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.config import Config, FrontierConfig
from polecat.frontier.host_table import HEAD_ROWS
from polecat.frontier.keys import queue_prefix
from polecat.frontier.records import Lease
from polecat.frontier.slices import slice_of
from tests.frontier_helpers import Rig, canon, politeness

HOSTS = [f"h{i}.test" for i in range(6)]
CFG = Config(scope=replace(Config().scope, mode="any"), politeness=politeness(rate=1000.0),
             frontier=FrontierConfig(working_hosts=100))

OPS = st.lists(st.one_of(
    st.tuples(st.just("push"), st.sampled_from(HOSTS), st.integers(1, 2 * HEAD_ROWS),
              st.sampled_from([1.0, 0.5, 0.3, 0.01])),
    st.tuples(st.just("lease"), st.sampled_from(["fetched", "retry", "withdraw", "keep"])),
    st.tuples(st.just("complete")),
    st.tuples(st.just("block"), st.sampled_from(HOSTS)),
    st.tuples(st.just("move"), st.sampled_from(HOSTS)),
    st.tuples(st.just("commit")),
), min_size=1, max_size=40)


def check_heads(rig: Rig) -> None:
    table = rig.raw._table
    for host, head in table.heads.items():
        st_ = table.hosts[host]
        rows = [(bytes(k), bytes(v)) for k, v in rig.db.items("queue", queue_prefix(host, st_.num))]
        if head.end is None:
            assert head.rows == rows, host
        else:
            assert head.rows == [row for row in rows if row[0] <= head.end], host
        assert len(head.rows) <= HEAD_ROWS


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_every_head_is_what_a_fresh_read_of_its_queue_gives(ops: list[tuple]) -> None:
    rig = Rig(Path("unused"), cfg=CFG, backend="memory")
    other = Rig(Path("unused-b"), cfg=CFG, backend="memory")
    now, serial, held = 1_000.0, 0, []
    for op in ops:
        now += 0.5
        if op[0] == "push":
            _, host, n, importance = op
            urls = [canon(f"http://{host}/p{serial + i}") for i in range(n)]
            rig.frontier.add_many(urls, 1, importance, now)
            serial += n
        elif op[0] == "lease":
            got = rig.frontier.lease(now)
            if isinstance(got, Lease):
                if got.kind == "robots":
                    rig.complete_robots(got, now)
                elif op[1] == "withdraw":
                    rig.raw.withdraw(got)
                elif op[1] == "keep":
                    held.append(got)
                else:
                    rig.complete(got, now, "fetched" if op[1] == "fetched" else "retry",
                                 status=200 if op[1] == "fetched" else 503)
        elif op[0] == "complete" and held:
            rig.complete(held.pop(), now)
        elif op[0] == "block":
            rig.frontier.block(op[1])
        elif op[0] == "move" and not held:
            s = frozenset({slice_of(op[1])})
            bundle = rig.frontier.export_slices(s, now)
            rig.frontier.release_slices(s)
            other.frontier.adopt(bundle, now)
            back = other.frontier.export_slices(s, now)
            other.frontier.release_slices(s)
            rig.frontier.adopt(back, now)
        elif op[0] == "commit":
            rig.frontier.commit()
        check_heads(rig)
    while held:
        rig.complete(held.pop(), now)
        check_heads(rig)


def test_a_push_ahead_of_a_head_is_leased_first_and_one_behind_it_in_its_turn() -> None:
    rig = Rig(Path("unused"), cfg=CFG, backend="memory")
    now = 1_000.0
    rig.frontier.add_many([canon(f"http://h0.test/low{i}") for i in range(2 * HEAD_ROWS)], 1, 0.3, now)
    lease = rig.frontier.lease(now)
    assert isinstance(lease, Lease) and lease.kind == "robots"
    rig.complete_robots(lease, now)
    first = rig.frontier.lease(now + 1)
    assert isinstance(first, Lease) and first.url == "http://h0.test/low0"
    head = rig.raw._table.heads["h0.test"]
    assert len(head.rows) == HEAD_ROWS and head.end is not None
    rig.frontier.add_many(["http://h0.test/high"], 1, 1.0, now + 1)  # better than every queued URL
    rig.frontier.add_many(["http://h0.test/last"], 1, 0.01, now + 1)  # behind the head: not kept
    rig.complete(first, now + 1)
    check_heads(rig)
    urls = []
    for i in range(2 * HEAD_ROWS + 1):
        got = rig.frontier.lease(now + 10 + i)
        assert isinstance(got, Lease)
        urls.append(got.url)
        rig.complete(got, now + 10 + i)
        check_heads(rig)
    assert urls[0] == "http://h0.test/high" and urls[-1] == "http://h0.test/last"
    assert urls[1:-1] == [f"http://h0.test/low{i}" for i in range(1, 2 * HEAD_ROWS)]
