"""The systemd notify protocol (``Type=notify``): datagrams of ``KEY=VALUE`` lines to ``$NOTIFY_SOCKET``.

No dependency: it is one ``sendto`` on an AF_UNIX datagram socket. A name starting with ``@`` is in the
abstract namespace. Without ``$NOTIFY_SOCKET`` (not started by systemd) every call is a no-op. A failed
send is logged and ignored: the service must not die because its supervisor's socket went away.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger("polecat.systemd")


class Notifier:
    """Sends state changes to systemd; see the module docstring."""

    def __init__(self, address: str | None) -> None:
        self._address = "\0" + address[1:] if address and address.startswith("@") else address
        self._sock: socket.socket | None = None
        if self._address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        return cls(environ.get("NOTIFY_SOCKET") or None)

    def notify(self, *fields: str) -> None:
        """Send ``fields`` (``READY=1``, ``STATUS=...``, ``WATCHDOG=1``, ``STOPPING=1``) as one message."""
        if self._sock is None or self._address is None:
            return
        try:
            self._sock.sendto("\n".join(fields).encode(), self._address)
        except OSError as exc:
            log.warning("systemd notify failed: %s", exc)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def watchdog_interval(environ: Mapping[str, str] = os.environ) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``WatchdogSec``), or None when not asked for."""
    usec = environ.get("WATCHDOG_USEC", "")
    pid = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2e6
