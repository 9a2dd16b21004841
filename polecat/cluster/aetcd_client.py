"""The real :class:`~polecat.cluster.etcd.EtcdClient`: etcd's v3 gRPC API through ``aetcd`` (pinned).

Every call is bounded by the client's ``timeout``, so an unreachable etcd is an error after a few
seconds, never a hang; the caller turns errors into state-machine events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aetcd

from polecat.cluster.etcd import KeyEvent
from polecat.errors import PolecatError


def parse_endpoint(url: str) -> tuple[str, int]:
    """``http://host:port`` -> (host, port); the client speaks plain gRPC (no TLS yet)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http" or not parts.hostname:
        raise PolecatError(f"etcd endpoint {url!r} is not http://host:port")
    return parts.hostname, parts.port or 2379


class AetcdClient:
    """One connection to one etcd endpoint."""

    def __init__(self, endpoint: str, *, timeout: int = 3) -> None:
        host, port = parse_endpoint(endpoint)
        self._client = aetcd.Client(host=host, port=port, timeout=timeout, connect_wait_timeout=timeout)

    async def grant(self, ttl: int) -> int:
        lease = await self._client.lease(ttl)
        return int(lease.id)

    async def keepalive(self, lease: int) -> bool:
        reply = await self._client.refresh_lease(lease)
        return reply is not None and int(reply.TTL) > 0

    async def revoke(self, lease: int) -> None:
        await self._client.revoke_lease(lease)

    async def put(self, key: str, value: bytes, lease: int) -> None:
        await self._client.put(key.encode(), value, lease=lease)

    async def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        got = await self._client.get_prefix(prefix.encode())
        return {kv.key.decode(): bytes(kv.value) for kv in got}, int(got.header.revision)

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[KeyEvent]:
        watch = await self._client.watch_prefix(prefix.encode(), start_revision=start_revision)
        try:
            async for event in watch:
                value = None if event.kind == "DELETE" else bytes(event.kv.value)
                yield KeyEvent(event.kv.key.decode(), value)
        finally:
            # aetcd's cancel can wait for ever on a dead stream (a full request queue): bounded, so a
            # cancelled watch always ends.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(watch.cancel(), 1.0)

    async def create_all(self, values: dict[str, bytes], lease: int) -> bool:
        txn = self._client.transactions
        ok, _ = await self._client.transaction(
            compare=[txn.create(k.encode()) == 0 for k in values],
            success=[txn.put(k.encode(), v, lease=lease) for k, v in values.items()],
            failure=[])
        return bool(ok)

    async def delete_all_if(self, values: dict[str, bytes]) -> bool:
        txn = self._client.transactions
        ok, _ = await self._client.transaction(
            compare=[txn.value(k.encode()) == v for k, v in values.items()],
            success=[txn.delete(k.encode()) for k in values], failure=[])
        return bool(ok)

    async def close(self) -> None:
        await self._client.close()
