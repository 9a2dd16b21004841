"""A private etcd for tests and benchmarks: one member on loopback ports, data in a temp dir.

Needs the ``etcd`` binary (Debian's ``etcd-server`` 3.4 or newer); :func:`etcd_binary` says where it is.
``stop()`` ends the process and removes its data; ``pause()``/``resume()`` stop and continue it
(SIGSTOP/SIGCONT) so a test can cut nodes off etcd without losing its data; ``halt()`` then ``start()``
restarts it with its data.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType


def etcd_binary() -> str | None:
    """The etcd server binary on PATH (or in /usr/bin, where Debian puts it), or None."""
    return shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/local/bin")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EtcdServer:
    """``with EtcdServer() as etcd: etcd.endpoint`` -> ``http://127.0.0.1:PORT``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd is not installed (apt-get install etcd-server)")
        self._binary = binary
        self.host = host
        self._dir = Path(tempfile.mkdtemp(prefix="polecat-etcd-"))
        self.client_port = _free_port(host)
        self.peer_port = _free_port(host)
        self.endpoint = f"http://{host}:{self.client_port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path = self._dir / "etcd.log"

    def start(self, timeout: float = 20.0) -> EtcdServer:
        peer = f"http://{self.host}:{self.peer_port}"
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [self._binary, "--name", "test", "--data-dir", str(self._dir / "data"),
                 "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"test={peer}",
                 "--heartbeat-interval", "50", "--election-timeout", "500"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"etcd exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection((self.host, self.client_port), 0.2):
                    pass
                if b"ready to serve client requests" in self.log_path.read_bytes():
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("etcd did not start in time")

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
