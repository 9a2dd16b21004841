"""The real :class:`~polecat.cluster.etcd.EtcdClient`: etcd's v3 gRPC API through ``aetcd`` (pinned).

Rules:
1. Every call is bounded by the client's ``timeout``, so an unreachable etcd is an error after a few
   seconds, never a hang; the caller turns errors into state-machine events.
2. Several endpoints (members of one etcd cluster) are tried in turn: one connection at a time, to the
   current endpoint; a call that fails there moves the client to the next endpoint (round robin), on a
   new connection, also when there is only one endpoint: a gRPC channel that failed to connect backs
   off its reconnects (1 s, growing 1.6 times a try), so after an etcd outage of a few seconds it would
   come back later than a lease of a few seconds lasts, and every node would lose its lease and
   re-register once etcd was back (slices moving to and fro).
3. A call that is safe to repeat (lease grant, keepalive and revoke, put, reads, watches) is tried
   once on each endpoint before its error is raised. A transaction (claim, conditional delete) is
   never repeated here: its first try may have been applied before the answer was lost, so its error
   goes to the caller (the state machine retries with a fresh read), and the next call goes to the next
   endpoint. A lease granted twice that way leaves an orphan lease that expires after its TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import aetcd

from polecat.cluster.etcd import KeyEvent
from polecat.errors import PolecatError

log = logging.getLogger(__name__)

T = TypeVar("T")


def parse_endpoint(url: str) -> tuple[str, int]:
    """``http://host:port`` -> (host, port); the client speaks plain gRPC (no TLS yet)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http" or not parts.hostname:
        raise PolecatError(f"etcd endpoint {url!r} is not http://host:port")
    return parts.hostname, parts.port or 2379


class AetcdClient:
    """A connection to one of ``endpoints`` at a time (rules above)."""

    def __init__(self, endpoints: Sequence[str] | str, *, timeout: int = 3) -> None:
        urls = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not urls:
            raise PolecatError("no etcd endpoint given")
        self._endpoints = [parse_endpoint(url) for url in urls]
        self._timeout = timeout
        self._index = 0
        self._client = self._connect()
        self._closing: set[asyncio.Task[None]] = set()
        """Connections given up, being closed in the background (:meth:`_failed`)."""

    @property
    def endpoint(self) -> str:
        """The endpoint calls go to now."""
        host, port = self._endpoints[self._index]
        return f"http://{host}:{port}"

    def _connect(self) -> aetcd.Client:
        import aetcd  # here, not at the top: it loads gRPC (~45 ms), which a single-node crawl never needs

        host, port = self._endpoints[self._index]
        return aetcd.Client(host=host, port=port, timeout=self._timeout, connect_wait_timeout=self._timeout)

    def _failed(self, client: aetcd.Client, exc: Exception) -> None:
        """``client`` failed a call: the next call goes to the next endpoint, on a new connection (rule 2).
        The old connection is closed in the background: the caller (a lease renewal) must not wait on
        it, and closing a channel whose streams are dead can outlast any timeout put around it."""
        if client is not self._client:
            return  # a concurrent call already moved on
        failed = self.endpoint
        self._index = (self._index + 1) % len(self._endpoints)
        self._client = self._connect()
        if len(self._endpoints) > 1:
            log.warning("etcd %s failed (%s): using %s", failed, exc or type(exc).__name__, self.endpoint)
        task = asyncio.get_running_loop().create_task(_close_quietly(client))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _retried(self, call: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        """Rule 3: a repeatable call, tried once on each endpoint."""
        for attempt in range(len(self._endpoints)):
            client = self._client
            try:
                return await call(client)
            except Exception as exc:
                self._failed(client, exc)
                if attempt == len(self._endpoints) - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _once(self, call: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        """Rule 3: a transaction, tried once."""
        client = self._client
        try:
            return await call(client)
        except Exception as exc:
            self._failed(client, exc)
            raise

    async def grant(self, ttl: int) -> int:
        lease = await self._retried(lambda c: c.lease(ttl))
        return int(lease.id)

    async def keepalive(self, lease: int) -> bool:
        reply = await self._retried(lambda c: c.refresh_lease(lease))
        return reply is not None and int(reply.TTL) > 0

    async def revoke(self, lease: int) -> None:
        await self._retried(lambda c: c.revoke_lease(lease))

    async def put(self, key: str, value: bytes, lease: int) -> int:
        reply = await self._retried(lambda c: c.put(key.encode(), value, lease=lease))
        return int(reply.header.revision)

    async def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        got = await self._retried(lambda c: c.get_prefix(prefix.encode()))
        return {kv.key.decode(): bytes(kv.value) for kv in got}, int(got.header.revision)

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[KeyEvent]:
        watch = await self._retried(lambda c: c.watch_prefix(prefix.encode(), start_revision=start_revision))
        client = self._client  # the endpoint the watch runs on
        try:
            async for event in watch:
                value = None if event.kind == "DELETE" else bytes(event.kv.value)
                yield KeyEvent(event.kv.key.decode(), value)
        except Exception as exc:  # a watch that breaks: the caller watches again, on the next endpoint
            self._failed(client, exc)
            raise
        finally:
            # aetcd's cancel can wait for ever on a dead stream (a full request queue): bounded, so a
            # cancelled watch always ends.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await watch.cancel()

    async def create_all(self, values: dict[str, bytes], lease: int) -> bool:
        txn = self._client.transactions
        ok, _ = await self._once(lambda c: c.transaction(
            compare=[txn.create(k.encode()) == 0 for k in values],
            success=[txn.put(k.encode(), v, lease=lease) for k, v in values.items()],
            failure=[]))
        return bool(ok)

    async def delete_all_if(self, values: dict[str, bytes]) -> bool:
        txn = self._client.transactions
        ok, _ = await self._once(lambda c: c.transaction(
            compare=[txn.value(k.encode()) == v for k, v in values.items()],
            success=[txn.delete(k.encode()) for k in values], failure=[]))
        return bool(ok)

    async def close(self) -> None:
        for task in self._closing:
            task.cancel()
        await self._client.close()


async def _close_quietly(client: aetcd.Client) -> None:
    """Close a connection given up, ignoring what it says, for at most a second."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):  # not wait_for: it can swallow a cancel (etcd.py)
            await client.close()
