"""In-repo fakes for the cluster seams: a membership whose view a test changes by hand, a transport whose
answers a test scripts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from functools import partial

from polecat.cluster.membership import Member, view
from polecat.cluster.receiver import Reply
from polecat.cluster.unixwire import FrameReceiver


class FakeMembership:
    """A :class:`~polecat.cluster.membership.Membership` driven by the test: :meth:`set` publishes a new
    view to every ``changes()`` iterator."""

    def __init__(self, self_id: str, members: Iterable[Member]) -> None:
        self._self_id = self_id
        self._members = view(members)
        self._version = 0
        self._changed = asyncio.Condition()
        self._closed = False

    @property
    def self_id(self) -> str:
        return self._self_id

    def members(self) -> tuple[Member, ...]:
        return self._members

    async def set(self, members: Iterable[Member]) -> None:
        """Replace the view (a join, a leave or a death, as the etcd backend would report it)."""
        async with self._changed:
            self._members = view(members)
            self._version += 1
            self._changed.notify_all()

    async def changes(self) -> AsyncIterator[tuple[Member, ...]]:
        seen = self._version
        yield self._members
        while True:
            async with self._changed:
                await self._changed.wait_for(partial(self._moved_on, seen))
                if self._closed:
                    return
                seen = self._version
                current = self._members
            yield current

    def _moved_on(self, version: int) -> bool:
        return self._closed or self._version != version

    async def close(self) -> None:
        async with self._changed:
            self._closed = True
            self._changed.notify_all()


class FakeTransport:
    """A :class:`~polecat.cluster.transport.Transport` that answers every post with ``reply`` (change it
    between posts) and counts the posts per address."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.posts: dict[str, int] = {}

    async def post(self, address: str, data: bytes) -> Reply:
        self.posts[address] = self.posts.get(address, 0) + 1
        return self.reply

    async def close(self) -> None:
        pass


class LoopbackTransport:
    """A :class:`~polecat.cluster.transport.Transport` that hands each post to the receiver registered at
    its address, in this process; an address in ``down`` (or with no receiver) answers "error", as a
    member that is not listening does."""

    def __init__(self) -> None:
        self.receivers: dict[str, FrameReceiver] = {}
        self.down: set[str] = set()
        self.posts = 0

    async def post(self, address: str, data: bytes) -> Reply:
        self.posts += 1
        receiver = self.receivers.get(address)
        if receiver is None or address in self.down:
            return Reply("error", detail=f"ConnectionRefusedError: nobody at {address}")
        return await receiver.receive(data)

    async def close(self) -> None:
        pass
