"""How much one lease call may do (polecat/frontier/leasing.py rules 4 and 9): it looks at most
HOSTS_PER_LEASE due hosts and pops at most STALE_PER_LEASE stale heap entries, and it reads nothing of
a host that the spent page budget leaves nothing to. Counted in hosts, calls and reads, never timed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from polecat.config import Config, ScopeConfig
from polecat.frontier.leasing import HOSTS_PER_LEASE, STALE_PER_LEASE
from polecat.frontier.records import Idle, Lease, Wait
from polecat.frontier.robots import RobotsPolicy
from polecat.writes import Put
from tests.frontier_helpers import Rig, canon, politeness

pytestmark = pytest.mark.usefixtures("frontier_backend")

HOSTS = 3 * HOSTS_PER_LEASE + 17


def rig_of(tmp_path: Path, *, max_pages: int = 0) -> Rig:
    rig = Rig(tmp_path, cfg=Config(scope=ScopeConfig(mode="any", max_pages=max_pages),
                                   politeness=politeness(rate=1.0)))
    for i in range(HOSTS):
        rig.frontier.add_seed(canon(f"http://h{i}.bound.test/"), 0.0)
    rig.frontier.commit()
    return rig


def robots_round(rig: Rig, now: float, body: bytes) -> float:
    """Lease and answer every host's robots.txt with ``body``; the time when all are due again."""
    asked = 0
    while not isinstance(got := rig.frontier.lease(now), Idle):
        if isinstance(got, Wait):
            if got.until == now:  # rule 9
                continue
            break
        assert got.kind == "robots"
        rig.complete_robots(got, now, body=body)
        asked += 1
    assert asked == HOSTS
    return now + 10.0


def test_one_call_looks_at_most_hosts_per_lease_due_hosts(tmp_path: Path) -> None:
    """Every host's only URL disallowed: each call retires the URLs of at most HOSTS_PER_LEASE hosts, then
    answers Wait(now); the calls after it go on with the others, and every URL is retired once."""
    rig = rig_of(tmp_path)
    now = robots_round(rig, 0.0, b"User-agent: *\nDisallow: /\n")
    retired_by_call: list[int] = []
    while True:
        decided = rig.raw.lease(now)
        rig.db.apply(decided.writes)
        retired_by_call.append(sum(isinstance(w, Put) and w.table == "urls" for w in decided.writes))
        if not isinstance(decided.value, Wait) or decided.value.until != now:
            break
    assert isinstance(decided.value, Idle)
    assert retired_by_call == [HOSTS_PER_LEASE] * 3 + [17]
    assert rig.raw.queued == 0


def test_a_spent_budget_leaves_the_other_due_hosts_unread(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """max_pages 5: five hosts get their robots.txt (the budget then full), each its page; the due hosts
    left are passed over without a read of their queue or robots.txt, HOSTS_PER_LEASE a call."""
    rig = rig_of(tmp_path, max_pages=5)
    reads: Counter[str] = Counter()
    items, lookup = rig.db.items, RobotsPolicy.lookup

    def counted_items(table: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        reads[table] += 1
        return items(table, prefix)  # type: ignore[arg-type]

    def counted_lookup(policy: RobotsPolicy, origin: str, now: float):  # type: ignore[no-untyped-def]
        reads["robots"] += 1
        return lookup(policy, origin, now)

    leases: list[Lease] = []
    calls = 0
    now = 0.0
    for _ in range(5):
        got = rig.frontier.lease(now)
        assert isinstance(got, Lease) and got.kind == "robots"
        rig.complete_robots(got, now)
        leases.append(got)
    assert rig.raw.budget.full
    now = 10.0
    monkeypatch.setattr(rig.db, "items", counted_items)
    monkeypatch.setattr(RobotsPolicy, "lookup", counted_lookup)
    pages = []
    while not isinstance(got := rig.frontier.lease(now), Idle):
        calls += 1
        if isinstance(got, Lease):
            assert got.kind == "page"
            pages.append(got.host)
            rig.complete(got, now)
        else:
            assert isinstance(got, Wait)
            if got.until != now:
                break
    assert sorted(pages) == sorted(lease.host for lease in leases)
    assert reads["queue"] == 5 and reads["robots"] == 5  # those of the five pages only
    assert calls <= 5 + HOSTS // HOSTS_PER_LEASE + 1


def test_one_call_pops_at_most_stale_per_lease_stale_entries(tmp_path: Path) -> None:
    """A host scheduled again 10,000 times leaves 9,999 stale entries ahead of its due one: they are
    popped STALE_PER_LEASE a call, each call answering Wait(now), and then the host is leased."""
    rig = rig_of(tmp_path)
    table = rig.raw._table
    host = "h0.bound.test"
    for i in range(10_000):
        table.schedule(host, -20_000.0 + i)
    sizes = [len(table.heap)]
    while isinstance(got := rig.frontier.lease(0.0), Wait):
        assert got.until == 0.0
        sizes.append(len(table.heap))
    assert isinstance(got, Lease) and got.host == host
    popped = [a - b for a, b in pairwise(sizes)]
    assert popped == [STALE_PER_LEASE] * (9_999 // STALE_PER_LEASE)
