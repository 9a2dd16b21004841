"""The real :class:`~polecat.cluster.etcd.EtcdClient`: etcd's v3 gRPC API through ``aetcd`` (pinned).

Rules:
1. Every call is bounded by the client's ``timeout``, so an unreachable etcd is an error after a few
   seconds, never a hang; the caller turns errors into state-machine events.
2. Several endpoints (members of one etcd cluster) are tried in turn: one connection at a time, to the
   current endpoint; a call that fails there moves the client to the next endpoint (round robin), on a
   new connection, also when there is only one endpoint: a gRPC channel that failed to connect backs
   off its reconnects (1 s, growing 1.6 times a try), so after an etcd outage of a few seconds it would
   come back later than a lease of a few seconds lasts, and every node would lose its lease and
   re-register once etcd was back (slices moving to and fro). Each connection has its own gRPC
   subchannel (rule 8).
3. A call that is safe to repeat (lease grant, keepalive and revoke, put, reads, watches) is tried
   once on each endpoint before its error is raised. A transaction (claim, conditional delete) is
   never repeated here: its first try may have been applied before the answer was lost, so its error
   goes to the caller (the state machine retries with a fresh read), and the next call goes to the next
   endpoint. A lease granted twice that way leaves an orphan lease that expires after its TTL.
4. ``https://`` endpoints speak gRPC over TLS: the server's certificate is checked against
   ``cluster.etcd_ca`` (the system's roots when empty) and, with ``etcd_cert``/``etcd_key``, the client
   proves itself with its own (mutual TLS). With ``etcd_user`` the client authenticates as that etcd user
   on every connection; the password (``POLECAT_ETCD_PASSWORD`` or ``etcd_password_file``) is never
   logged nor shown in a repr. A token etcd no longer knows (etcd restarted) makes the client connect
   again, which authenticates again.
5. A certificate, key or password file that cannot be read is a :class:`~polecat.errors.ConfigError`
   naming the setting; a TLS handshake or an authentication that fails is an :class:`EtcdAccessError`
   saying which, so a node with the wrong CA, password or scheme stops at start-up with that reason.
6. A connection given up (rule 2) is closed while other calls may be in flight on it, and gRPC ends
   those with ``asyncio.CancelledError`` although nobody cancelled their tasks. Such a call raises
   :class:`ConnectionError` instead, a failed call like any other: a CancelledError escapes the loops
   that take every ``Exception`` as "no answer" (etcd.py rule 3) and ended them without a word (a node
   whose renew loop ended so lost its lease after an etcd restart, its event loop running).
7. A keepalive whose stream ends with no answer (its connection closed under it, rule 6, in the other
   way gRPC ends such a call) is a failed call, raised as :class:`ConnectionError`: only an answer with
   no time left (TTL 0) says the lease expired. Taken as "expired", it made a node drop every slice and
   register again although its lease was good (etcd.py rule 3).
8. A new connection connects at once: each has its own gRPC subchannel (``use_local_subchannel_pool``),
   and one that failed to connect tries again within a second (``max_reconnect_backoff_ms``). gRPC
   shares a subchannel between the channels to one address, so while an older connection to etcd
   stayed open (one given up whose close outlasted its second, a watch's), rule 2's new connection got
   its subchannel, backing off its reconnects (1 s growing 1.6 times a try: about 4 s after a 12 s
   outage): every call failed at once with the outage's "Connection refused" for seconds after etcd
   was back, other nodes renewing meanwhile, and a node missed the lease a restarted etcd gives back
   (etcd.py rule 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import aetcd

from polecat.cluster.etcd import KeyEvent
from polecat.config import ClusterConfig
from polecat.errors import ConfigError, PolecatError

log = logging.getLogger(__name__)

T = TypeVar("T")


class EtcdAccessError(ConfigError):
    """etcd refused this client: its TLS handshake or its user and password (rule 5)."""


@dataclass(frozen=True, slots=True)
class EtcdAccess:
    """How to reach etcd beyond its address (rule 4): TLS material as PEM bytes, and the etcd user."""

    tls: bool = False
    ca: bytes | None = None
    """PEM of the CAs that sign etcd's certificate (None: the system's roots)."""
    cert: bytes | None = None
    key: bytes | None = field(default=None, repr=False)
    user: str = ""
    password: str = field(default="", repr=False)


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cluster.{setting} {path}: {exc.strerror or exc}") from exc


def etcd_access(cc: ClusterConfig) -> EtcdAccess:
    """The :class:`EtcdAccess` of a validated cluster configuration; reads its files (rule 5)."""
    password = cc.etcd_password
    if cc.etcd_password_file:
        raw = _read(cc.etcd_password_file, "etcd_password_file")
        password = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not password:
            raise ConfigError(f"cluster.etcd_password_file {cc.etcd_password_file}: the file is empty")
    return EtcdAccess(
        tls=any(e.startswith("https://") for e in cc.etcd),
        ca=_read(cc.etcd_ca, "etcd_ca") if cc.etcd_ca else None,
        cert=_read(cc.etcd_cert, "etcd_cert") if cc.etcd_cert else None,
        key=_read(cc.etcd_key, "etcd_key") if cc.etcd_key else None,
        user=cc.etcd_user, password=password if cc.etcd_user else "")


def parse_endpoint(url: str) -> tuple[str, int]:
    """``http://host:port`` or ``https://host:port`` -> (host, port); whether it is TLS is
    :class:`EtcdAccess`'s."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PolecatError(f"etcd endpoint {url!r} is not http://host:port or https://host:port")
    return parts.hostname, parts.port or 2379


def _refusal(exc: BaseException, access: EtcdAccess) -> str | None:
    """What a failed call says about this client's access (rule 5), or None when it says nothing."""
    text = str(exc).strip()
    low = text.lower()
    if "authentication failed" in low:
        return f"etcd refused user {access.user!r}: wrong user or password ({text[:200]})"
    if "permission denied" in low or "user name is not provided" in low or "invalid auth token" in low:
        if not access.user:
            return f"etcd has auth enabled: set cluster.etcd_user and its password ({text[:200]})"
        return (f"etcd user {access.user!r} may not do this: grant it read and write on /<name>/ "
                f"({text[:200]})")
    if any(word in low for word in ("ssl", "handshake", "certificate", "tsi_")):
        return f"etcd TLS failed: check cluster.etcd_ca, etcd_cert and etcd_key ({text[:300]})"
    if not access.tls and "socket closed" in low:
        return f"etcd closed the connection at once: does it serve TLS (https:// endpoints)? ({text[:200]})"
    return None


class AetcdClient:
    """A connection to one of ``endpoints`` at a time (rules above)."""

    def __init__(self, endpoints: Sequence[str] | str, *, timeout: int = 3,
                 access: EtcdAccess | None = None) -> None:
        urls = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not urls:
            raise PolecatError("no etcd endpoint given")
        self._endpoints = [parse_endpoint(url) for url in urls]
        self._access = access or EtcdAccess(tls=urls[0].startswith("https://"))
        self._timeout = timeout
        self._index = 0
        self._client = self._connect()
        self._closing: set[asyncio.Task[None]] = set()
        """Connections given up, being closed in the background (:meth:`_failed`)."""

    @property
    def endpoint(self) -> str:
        """The endpoint calls go to now."""
        host, port = self._endpoints[self._index]
        return f"{'https' if self._access.tls else 'http'}://{host}:{port}"

    def _connect(self) -> aetcd.Client:
        import aetcd  # here, not at the top: it loads gRPC (~45 ms), which a single-node crawl never needs

        host, port = self._endpoints[self._index]
        a = self._access
        kwargs: dict[str, Any] = {"host": host, "port": port, "timeout": self._timeout,
                                  "connect_wait_timeout": self._timeout, "options": _CHANNEL_OPTIONS}
        if a.user:
            kwargs.update(username=a.user, password=a.password)
        if a.tls:
            return _tls_client_class()(a, **kwargs)
        return aetcd.Client(**kwargs)

    def explain(self, exc: BaseException) -> PolecatError:
        """``exc`` from a call as the error to stop with: an :class:`EtcdAccessError` when it says
        the TLS handshake or the user failed (rule 5), else one naming the endpoint."""
        why = _refusal(exc, self._access)
        if why is not None:
            return EtcdAccessError(f"etcd {self.endpoint}: {why}")
        return PolecatError(f"etcd {self.endpoint}: {str(exc).strip()[:300] or type(exc).__name__}")

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
                with _closed_under_it():
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
            with _closed_under_it():
                return await call(client)
        except Exception as exc:
            self._failed(client, exc)
            raise

    async def grant(self, ttl: int) -> int:
        lease = await self._retried(lambda c: c.lease(ttl))
        return int(lease.id)

    async def keepalive(self, lease: int) -> bool:
        async def renewed(client: aetcd.Client) -> bool:
            reply = await client.refresh_lease(lease)
            if reply is None:  # rule 7
                raise ConnectionError("etcd keepalive ended with no answer (its connection closed under it)")
            return int(reply.TTL) > 0

        return await self._retried(renewed)

    async def revoke(self, lease: int) -> None:
        await self._retried(lambda c: c.revoke_lease(lease))

    async def put(self, key: str, value: bytes, lease: int) -> int:
        reply = await self._retried(lambda c: c.put(key.encode(), value, lease=lease))
        return int(reply.header.revision)

    async def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        got = await self._retried(lambda c: c.get_prefix(prefix.encode()))
        return {kv.key.decode(): bytes(kv.value) for kv in got}, int(got.header.revision)

    async def get_prefix_leased(self, prefix: str) -> tuple[dict[str, tuple[bytes, int]], int]:
        got = await self._retried(lambda c: c.get_prefix(prefix.encode()))
        return {kv.key.decode(): (bytes(kv.value), int(kv.lease)) for kv in got}, int(got.header.revision)

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[KeyEvent]:
        watch = await self._retried(lambda c: c.watch_prefix(prefix.encode(), start_revision=start_revision))
        client = self._client  # the endpoint the watch runs on
        try:
            with _closed_under_it():
                async for event in watch:
                    value = None if event.kind == "DELETE" else bytes(event.kv.value)
                    yield KeyEvent(event.kv.key.decode(), value, 0 if value is None else int(event.kv.lease))
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


_CHANNEL_OPTIONS = {"grpc.use_local_subchannel_pool": 1, "grpc.initial_reconnect_backoff_ms": 200,
                    "grpc.max_reconnect_backoff_ms": 1000}
"""gRPC channel arguments of every connection (rule 8). Not ``grpc.min_reconnect_backoff_ms``: gRPC
takes it as the connect timeout too, and a handshake on a loaded machine can outlast a short one."""

_TLS_CLIENT: type[aetcd.Client] | None = None


def _tls_client_class() -> type[aetcd.Client]:
    """aetcd's client over a TLS channel (rule 4). aetcd 1.0 opens only plain channels: its ``connect``
    is done again here with ``secure_channel``, the rest (stubs, watcher, metadata) as aetcd does it."""
    global _TLS_CLIENT
    if _TLS_CLIENT is not None:
        return _TLS_CLIENT
    import aetcd
    import grpc
    from aetcd import exceptions, rpc, watcher

    class TlsClient(aetcd.Client):  # type: ignore[misc]
        _is_connecting: bool  # aetcd's, set by its __init__

        def __init__(self, access: EtcdAccess, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=access.ca, private_key=access.key, certificate_chain=access.cert)

        async def connect(self) -> None:
            if self._connected.is_set():
                return
            if self._is_connecting:  # another task connects: wait for it
                async with asyncio.timeout(self._connect_wait_timeout):
                    await self._connected.wait()
                return
            try:
                self._is_connecting = True
                self.channel = rpc.secure_channel(f"{self._host}:{self._port}", self._credentials,
                                                  options=self._options.items())
                if self._username is not None:
                    self.auth_stub = rpc.AuthStub(self.channel)
                    request = rpc.AuthenticateRequest(name=self._username, password=self._password)
                    resp = await self.auth_stub.Authenticate(request, timeout=self._timeout)
                    self.metadata = (("token", resp.token),)
                self.kvstub = rpc.KVStub(self.channel)
                self.clusterstub = rpc.ClusterStub(self.channel)
                self.leasestub = rpc.LeaseStub(self.channel)
                self.maintenancestub = rpc.MaintenanceStub(self.channel)
                self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                                metadata=self.metadata)
                self._connected.set()
            except rpc.AioRpcError as exc:
                exceptions._handle_exception(exc)
            finally:
                self._is_connecting = False

    _TLS_CLIENT = TlsClient
    return TlsClient


@contextlib.contextmanager
def _closed_under_it() -> Iterator[None]:
    """Rule 6: a CancelledError while the task is not being cancelled is gRPC ending a call whose
    connection was closed (by :meth:`AetcdClient._failed`, for another call): a failed call."""
    try:
        yield
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        raise ConnectionError("etcd connection closed under it (another call failed over)") from None


async def _close_quietly(client: aetcd.Client) -> None:
    """Close a connection given up, ignoring what it says, for at most a second."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):  # not wait_for: it can swallow a cancel (etcd.py)
            await client.close()
