"""Membership: the local backend's fixed list and the fake that tests drive."""

from __future__ import annotations

import asyncio

import pytest

from polecat.cluster.membership import LocalMembership, Member
from polecat.errors import PolecatError
from polecat.testing.cluster import FakeMembership

A, B, C = Member("w0", "unix:/tmp/a"), Member("w1", "unix:/tmp/b"), Member("w2", "unix:/tmp/c")


async def test_local_membership_is_the_sorted_fixed_list_and_yields_once() -> None:
    m = LocalMembership("w1", [C, A, B])
    assert m.self_id == "w1"
    assert m.members() == (A, B, C)
    views = []

    async def watch() -> None:
        async for v in m.changes():
            views.append(v)

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.01)
    await m.close()
    await asyncio.wait_for(task, 1)
    assert views == [(A, B, C)]


def test_local_membership_refuses_unknown_self_and_duplicate_ids() -> None:
    with pytest.raises(PolecatError, match="not in the member list"):
        LocalMembership("w9", [A, B])
    with pytest.raises(PolecatError, match="duplicate"):
        LocalMembership("w0", [A, Member("w0", "unix:/tmp/other")])


async def test_fake_membership_publishes_each_change() -> None:
    m = FakeMembership("w0", [A, B])
    views = []

    async def watch() -> None:
        async for v in m.changes():
            views.append(v)

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.01)
    await m.set([A, B, C])
    await asyncio.sleep(0.01)
    await m.set([A])
    await asyncio.sleep(0.01)
    await m.close()
    await asyncio.wait_for(task, 1)
    assert views == [(A, B), (A, B, C), (A,)]
