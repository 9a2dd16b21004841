"""A private etcd for tests and benchmarks: one member on loopback ports, data in a temp dir.

Needs the ``etcd`` binary (Debian's ``etcd-server`` 3.4 or newer); :func:`etcd_binary` says where it is.
``stop()`` ends the process and removes its data; ``pause()``/``resume()`` stop and continue it
(SIGSTOP/SIGCONT) so a test can cut nodes off etcd without losing its data; ``halt()`` then ``start()``
restarts it with its data. With :class:`EtcdTls` it serves TLS only (and, with a client CA, wants a
client certificate signed by it); :meth:`EtcdServer.enable_auth` turns etcd's users on (a root user, and
one user with read and write on a key prefix), as ``etcdctl user add`` / ``role grant-permission`` /
``auth enable`` do.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any


def etcd_binary() -> str | None:
    """The etcd server binary on PATH (or in /usr/bin, where Debian puts it), or None."""
    return shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/local/bin")


PORT_TRIES = 3
"""Tries of a first start whose ports were taken before etcd bound them (:meth:`EtcdServer.start`)."""


class _PortTaken(RuntimeError):
    """etcd could not bind a port chosen free a moment before."""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """PEM files of etcd's TLS: its certificate and key, and the CA client certificates must be signed
    by (None: no client certificate asked for)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


class EtcdServer:
    """``with EtcdServer() as etcd: etcd.endpoint`` -> ``http://127.0.0.1:PORT`` (``https://`` with
    ``tls``)."""

    def __init__(self, host: str = "127.0.0.1", *, tls: EtcdTls | None = None) -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (apt-get install etcd-server)")
        self._binary = binary
        self.host = host
        self._dir = Path(tempfile.mkdtemp(prefix="polecat-etcd-"))
        self.client_port = _free_port(host)
        self.peer_port = _free_port(host)
        self.tls = tls
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = False
        self.log_path = self._dir / "etcd.log"

    @property
    def endpoint(self) -> str:
        """The client URL: ``http://HOST:PORT`` (``https://`` with ``tls``)."""
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.client_port}"

    def start(self, timeout: float = 20.0) -> EtcdServer:
        """Start etcd; after :meth:`halt`, again on the same ports with its data. Ports are chosen free
        when the server is made, and another process may bind one before etcd does (a test beside it
        whose outgoing connection gets it as its local port): a first start that finds a port taken is
        made again on new ports and an empty data dir, up to :data:`PORT_TRIES` times."""
        for _ in range(PORT_TRIES - 1):
            try:
                return self._start(timeout)
            except _PortTaken:
                if self._started:
                    raise
                shutil.rmtree(self._dir / "data", ignore_errors=True)
                self.client_port, self.peer_port = _free_port(self.host), _free_port(self.host)
        return self._start(timeout)

    def _start(self, timeout: float) -> EtcdServer:
        peer = f"http://{self.host}:{self.peer_port}"
        tls: list[str] = []
        if self.tls is not None:  # the flags the README's "Securing a cluster" names
            tls = ["--cert-file", str(self.tls.cert), "--key-file", str(self.tls.key)]
            if self.tls.client_ca is not None:
                tls += ["--client-cert-auth", "--trusted-ca-file", str(self.tls.client_ca)]
        with open(self.log_path, "ab") as log:
            logged = log.tell()
            self._proc = subprocess.Popen(
                [self._binary, "--name", "test", "--data-dir", str(self._dir / "data"),
                 "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"test={peer}",
                 "--heartbeat-interval", "50", "--election-timeout", "500", *tls],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                said = self.log_path.read_bytes()[logged:].decode("utf-8", "replace")
                raise (_PortTaken if "address already in use" in said else RuntimeError)(
                    f"etcd exited: {said[-2000:]}")
            try:
                with socket.create_connection((self.host, self.client_port), 0.2):
                    pass
                if b"ready to serve client requests" in self.log_path.read_bytes()[logged:]:
                    self._started = True
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("etcd did not start in time")

    async def enable_auth(self, root_password: str, user: str, password: str, prefix: str, *,
                          ca: bytes | None = None, cert: bytes | None = None, key: bytes | None = None
                          ) -> None:
        """Add ``root`` and ``user`` (read and write under ``prefix``), then turn auth on. ``ca``,
        ``cert``, ``key``: the TLS material to reach a TLS etcd with."""
        import grpc
        from aetcd import rpc

        target = f"{self.host}:{self.client_port}"
        channel = (grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(ca, key, cert))
                   if self.tls is not None else grpc.aio.insecure_channel(target))
        async with channel:
            auth: Any = rpc.AuthStub(channel)
            end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=root_password), timeout=10)
            await auth.RoleAdd(rpc.AuthRoleAddRequest(name="root"), timeout=10)
            await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
            await auth.UserAdd(rpc.AuthUserAddRequest(name=user, password=password), timeout=10)
            await auth.RoleAdd(rpc.AuthRoleAddRequest(name=user), timeout=10)
            permission = rpc.Permission(permType=rpc.Permission.READWRITE, key=prefix.encode(),
                                        range_end=end.encode())
            await auth.RoleGrantPermission(rpc.AuthRoleGrantPermissionRequest(name=user, perm=permission),
                                           timeout=10)
            await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user=user, role=user), timeout=10)
            await auth.AuthEnable(rpc.AuthEnableRequest(), timeout=10)

    def pause(self) -> None:
        """Freeze etcd (SIGSTOP): clients' calls hang until :meth:`resume`."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def halt(self) -> None:
        """End the etcd process (SIGTERM, then SIGKILL after 10 s) and keep its data: :meth:`start`
        again restarts it on the same ports with the same keys and leases."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
