"""In-repo fakes for the cluster seams: a membership whose view a test changes by hand, a transport whose
answers a test scripts, an etcd in memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from functools import partial

from polecat.cluster.etcd import KeyEvent
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


class MemoryEtcd:
    """An :class:`~polecat.cluster.etcd.EtcdClient` in memory, for one node's tests: leases never expire
    by themselves (``alive`` says whether keepalives succeed), keys live in a dict, and the watch only
    waits (the member list is read by ``get_prefix``)."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[bytes, int]] = {}
        """Key -> (value, lease)."""
        self.revision = 0
        self.alive = True
        self._leases = 0

    async def grant(self, ttl: int) -> int:
        self._leases += 1
        return self._leases

    async def keepalive(self, lease: int) -> bool:
        return self.alive

    async def revoke(self, lease: int) -> None:
        self.keys = {k: v for k, v in self.keys.items() if v[1] != lease}

    async def put(self, key: str, value: bytes, lease: int) -> int:
        self.revision += 1
        self.keys[key] = (value, lease)
        return self.revision

    async def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        return {k: v for k, (v, _) in self.keys.items() if k.startswith(prefix)}, self.revision

    async def get_prefix_leased(self, prefix: str) -> tuple[dict[str, tuple[bytes, int]], int]:
        return {k: held for k, held in self.keys.items() if k.startswith(prefix)}, self.revision

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[KeyEvent]:
        await asyncio.Event().wait()  # changes are read by get_prefix only
        yield KeyEvent(prefix, None)  # pragma: no cover - never reached: it makes this a generator

    async def create_all(self, values: dict[str, bytes], lease: int) -> bool:
        if any(k in self.keys for k in values):
            return False
        for k, v in values.items():
            await self.put(k, v, lease)
        return True

    async def delete_all_if(self, values: dict[str, bytes]) -> bool:
        if any(self.keys.get(k, (None, 0))[0] != v for k, v in values.items()):
            return False
        for k in values:
            del self.keys[k]
        return True

    async def close(self) -> None:
        return None


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
