"""Routing before dedup (polecat/frontier/routing.py): the frontier admits what it owns, returns the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from polecat.cluster.ring import Ring
from polecat.frontier.records import Lease
from polecat.frontier.routing import Routing
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from tests.frontier_helpers import Rig, canon

pytestmark = pytest.mark.usefixtures("frontier_backend")  # each test on LMDB and on the in-memory fake

URLS = [canon(f"http://h{i}.test/p{i % 3}") for i in range(60)]
RING = Ring(["w0", "w1", "w2"])


def owner(url: str) -> str:
    return RING.owner(slice_of(host_key(url)))


def test_admit_queues_owned_urls_and_returns_the_rest_per_owner_unmarked(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.frontier.set_routing(Routing(RING, "w1"))
    got = rig.frontier.admit(URLS, 1, 0.5, 0.0)
    mine = [u for u in URLS if owner(u) == "w1"]
    assert 0 < len(mine) < len(URLS)
    assert got.accepted == len(mine) == rig.frontier.queued
    assert got.outbox == {peer: [u for u in URLS if owner(u) == peer] for peer in ("w0", "w2")}
    assert all(rig.frontier.owns(u) == (owner(u) == "w1") for u in URLS)
    # Again: the owned ones are seen now; the others are still handed back, never judged here.
    again = rig.frontier.admit(URLS, 1, 0.5, 0.0)
    assert again.accepted == 0 and again.outbox == got.outbox
    # The others were never marked seen: once this frontier owns every slice, they are all new.
    rig.frontier.set_routing(Routing(Ring(["w1"]), "w1"))
    alone = rig.frontier.admit(URLS, 1, 0.5, 0.0)
    assert alone.accepted == len(URLS) - len(mine) and alone.outbox == {}


def test_one_member_ring_admits_like_add_many(tmp_path: Path) -> None:
    routed, plain = Rig(tmp_path / "routed"), Rig(tmp_path / "plain")
    routed.frontier.set_routing(Routing(Ring(["solo"]), "solo"))
    got = routed.frontier.admit(URLS + URLS[:5], 2, 0.25, 0.0)
    assert got.outbox == {} and got.accepted == plain.frontier.add_many(URLS + URLS[:5], 2, 0.25, 0.0)
    assert routed.frontier.stats(0.0) == plain.frontier.stats(0.0)


def test_admit_carries_redirect_hops_to_the_lease(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    target = canon("http://a.test/moved")
    assert rig.frontier.admit([target], 1, 0.5, 0.0, hops=2).accepted == 1
    robots = rig.frontier.lease(0.0)
    assert isinstance(robots, Lease) and robots.kind == "robots"
    rig.complete_robots(robots, 0.0)
    page = rig.frontier.lease(10.0)
    assert isinstance(page, Lease) and page.url == target and page.hops == 2
