"""A local authoritative DNS server for tests: answers only the names it was given, forwards nothing.

It serves UDP and TCP on one ephemeral port of 127.0.0.1 from background threads, so it answers a resolver
in the test's event loop and a crawler running in another process alike::

    with LocalDnsServer() as dns:
        dns.add("h01.test", ["127.0.0.1"])
        dns.fail("broken.test")                 # SERVFAIL
        dns.drop("slow.test", 2)                # its next 2 queries get no answer
        dns.silence("lame.test")                # no query of it is ever answered
        dns.hold(1.5, at=120)                   # every answer 1.5 s late from the 120th query on
        crawl(nameserver=dns.address)           # "127.0.0.1:PORT"
        assert dns.queries["h01.test"] >= 1

Names that were not added answer NXDOMAIN. Names are matched case-insensitively, without the trailing dot.

:class:`DnsServerProcess` is the same server in a child process, driven through the same methods: for a
benchmark whose own process is busy (a web serving its crawlers, in a thread beside the server's), where
the server's threads would wait on that process's GIL. A 3-node crawl of 2,000 hosts so lost every lookup a
node asked in its first seconds in half of its runs (each failed after ``dns.timeout``, its host's robots.txt
closed for ``robots.retry_base``: the crawl's last tenth came ~50 s later; benchmarks/README.md "Issue 35:
the 3-node crawls' late tail").
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import Any

try:  # dnslib comes with the test extra, not with the crawler
    from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSError, DNSRecord
    from dnslib.server import DNSLogger, DNSServer, TCPServer, UDPServer
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("polecat.testing.dns needs dnslib, part of the test extra: "
                      "pip install 'polecat[test]'") from exc

__all__ = ["DnsServerProcess", "LocalDnsServer", "query"]

_BIND_ATTEMPTS = 20


def _norm(name: str) -> str:
    return name.rstrip(".").lower()


class _Resolver:
    """The zone: name -> (addresses, ttl) or a failure rcode; counts queries. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, tuple[list[ipaddress.IPv4Address | ipaddress.IPv6Address], int]] = {}
        self._failures: dict[str, int] = {}
        self._drops: dict[str, float] = {}
        """Queries of a name left unanswered from now on (``inf``: every one)."""
        self._hold_at: tuple[int, float] | None = None
        """(the query from which answers are held, for how long): :meth:`LocalDnsServer.hold`."""
        self._held_until = 0.0
        self._asked = 0
        """Queries of any name so far."""
        self.queries: Counter[str] = Counter()
        self.types: Counter[str] = Counter()

    def add(self, name: str, addrs: list[str], ttl: int) -> None:
        parsed = [ipaddress.ip_address(a) for a in addrs]
        with self._lock:
            self._failures.pop(_norm(name), None)
            self._records[_norm(name)] = (parsed, ttl)

    def fail(self, name: str, rcode: int) -> None:
        with self._lock:
            self._records.pop(_norm(name), None)
            self._failures[_norm(name)] = rcode

    def drop(self, name: str, count: int | float) -> None:
        with self._lock:
            self._drops[_norm(name)] = count

    def hold(self, seconds: float, at: int) -> None:
        with self._lock:
            self._hold_at = (self._asked + at, seconds)

    def remove(self, name: str) -> None:
        with self._lock:
            self._records.pop(_norm(name), None)
            self._failures.pop(_norm(name), None)

    def resolve(self, request: Any, handler: Any) -> Any:
        """dnslib's resolver hook: build the reply for one query."""
        reply = request.reply()
        reply.header.aa = 1
        qname = str(request.q.qname)
        qtype = request.q.qtype
        name = _norm(qname)
        with self._lock:
            self.queries[name] += 1
            self._asked += 1
            self.types[QTYPE.get(qtype, str(qtype))] += 1
            failure = self._failures.get(name)
            record = self._records.get(name)
            drops = self._drops.get(name, 0)
            dropped = drops > 0
            if dropped:
                self._drops[name] = drops - 1
            if self._hold_at is not None and self._asked == self._hold_at[0]:
                self._held_until = time.monotonic() + self._hold_at[1]
            late = self._held_until - time.monotonic()
        if late > 0:  # the server's handler threads wait: answers of any name are held meanwhile
            time.sleep(late)
        if dropped:  # dnslib's handler sends nothing for this error (its logger is silenced in start())
            raise DNSError(f"{name}: query dropped")
        if failure is not None:
            reply.header.rcode = failure
        elif record is None:
            reply.header.rcode = RCODE.NXDOMAIN
        else:
            addrs, ttl = record
            for addr in addrs:
                if addr.version == 4 and qtype in (QTYPE.A, QTYPE.ANY):
                    reply.add_answer(RR(qname, QTYPE.A, rdata=A(str(addr)), ttl=ttl))
                elif addr.version == 6 and qtype in (QTYPE.AAAA, QTYPE.ANY):
                    reply.add_answer(RR(qname, QTYPE.AAAA, rdata=AAAA(str(addr)), ttl=ttl))
            # A name that exists but has no record of the asked type answers NOERROR with no data.
        return reply


class LocalDnsServer:
    """UDP+TCP DNS on ``127.0.0.1:<ephemeral>``; see the module docstring."""

    def __init__(self) -> None:
        self._resolver = _Resolver()
        self._servers: list[DNSServer] = []
        self._port = 0

    @property
    def queries(self) -> Counter[str]:
        """Queries received per (lowercased) name, every type counted."""
        return self._resolver.queries

    @property
    def query_types(self) -> Counter[str]:
        """Queries received per type (``"A"``, ``"AAAA"``...), every name counted."""
        return self._resolver.types

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("LocalDnsServer is not started")
        return self._port

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"``, the form ``DnsConfig.nameservers`` takes."""
        return f"127.0.0.1:{self.port}"

    def add(self, name: str, addrs: list[str], ttl: int = 300) -> None:
        """Answer ``name`` with these addresses (A for IPv4, AAAA for IPv6); replaces earlier records."""
        self._resolver.add(name, addrs, ttl)

    def fail(self, name: str, rcode: str = "SERVFAIL") -> None:
        """Answer ``name`` with an error rcode (``"SERVFAIL"``, ``"REFUSED"``, ``"NXDOMAIN"``...)."""
        self._resolver.fail(name, getattr(RCODE, rcode.upper()))

    def drop(self, name: str, count: int) -> None:
        """Leave the next ``count`` queries of ``name`` (any type) unanswered: a nameserver that lost them,
        or answers too late; they are counted in :attr:`queries` all the same."""
        self._resolver.drop(name, count)

    def silence(self, name: str) -> None:
        """Leave every query of ``name`` unanswered from now on: a lame delegation, whose nameservers
        never answer (counted in :attr:`queries`)."""
        self._resolver.drop(name, float("inf"))

    def hold(self, seconds: float, at: int) -> None:
        """Hold every answer for ``seconds`` from the ``at``-th query from now on (1: the next), as a
        starved nameserver on a loaded machine does: a query asked meanwhile is answered at its end."""
        self._resolver.hold(seconds, at)

    def remove(self, name: str) -> None:
        """Forget ``name``: it answers NXDOMAIN again."""
        self._resolver.remove(name)

    def start(self) -> LocalDnsServer:
        if self._servers:
            return self
        logger = DNSLogger(log="-recv,-send,-request,-reply,-truncated,-error,-data", logf=lambda _s: None)
        for _ in range(_BIND_ATTEMPTS):
            udp = DNSServer(self._resolver, address="127.0.0.1", port=0, logger=logger, server=UDPServer)
            port = udp.server.server_address[1]
            try:
                tcp = DNSServer(
                    self._resolver, address="127.0.0.1", port=port, logger=logger, server=TCPServer
                )
            except OSError:
                # The UDP port's TCP twin is taken by someone else: try another port.
                udp.server.server_close()
                continue
            break
        else:
            raise OSError("could not bind a UDP and TCP port pair on 127.0.0.1")
        self._servers = [udp, tcp]
        self._port = port
        for server in self._servers:
            # A short poll interval keeps stop() quick (socketserver checks for shutdown between polls).
            thread = threading.Thread(
                target=server.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
            )
            thread.start()
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.server.shutdown()
            server.server.server_close()
        self._servers = []

    def __enter__(self) -> LocalDnsServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class DnsServerProcess:
    """:class:`LocalDnsServer` run by a child Python process, each method a request over its pipes (see
    the module docstring)."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[str] | None = None
        self._address = ""
        self._lock = threading.Lock()  # one request at a time: a web's thread may add a host meanwhile

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"``, as :attr:`LocalDnsServer.address`."""
        if not self._address:
            raise RuntimeError("DnsServerProcess is not started")
        return self._address

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    @property
    def queries(self) -> Counter[str]:
        """Queries received per (lowercased) name, every type counted: a copy, read from the child."""
        return Counter(self._call("queries"))

    @property
    def query_types(self) -> Counter[str]:
        return Counter(self._call("query_types"))

    def add(self, name: str, addrs: list[str], ttl: int = 300) -> None:
        self._call("add", name, addrs, ttl)

    def fail(self, name: str, rcode: str = "SERVFAIL") -> None:
        self._call("fail", name, rcode)

    def drop(self, name: str, count: int) -> None:
        self._call("drop", name, count)

    def silence(self, name: str) -> None:
        self._call("silence", name)

    def hold(self, seconds: float, at: int) -> None:
        self._call("hold", seconds, at)

    def remove(self, name: str) -> None:
        self._call("remove", name)

    def start(self) -> DnsServerProcess:
        if self._child is not None:
            return self
        self._child = subprocess.Popen(
            [sys.executable, "-c", "from polecat.testing.dns import _serve_pipes; _serve_pipes()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if not line:
            self._child.wait()
            self._child = None
            raise OSError("the DNS server process exited before it listened")
        self._address = json.loads(line)
        return self

    def stop(self) -> None:
        if self._child is None:
            return
        assert self._child.stdin is not None
        self._child.stdin.close()  # the child stops its server at the end of its input
        try:
            self._child.wait(10)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        self._child = None
        self._address = ""

    def _call(self, method: str, *args: Any) -> Any:
        if self._child is None:
            raise RuntimeError("DnsServerProcess is not started")
        assert self._child.stdin is not None and self._child.stdout is not None
        with self._lock:
            self._child.stdin.write(json.dumps([method, args]) + "\n")
            self._child.stdin.flush()
            line = self._child.stdout.readline()
        if not line:
            raise OSError("the DNS server process has exited")
        ok, value = json.loads(line)
        if not ok:
            raise RuntimeError(f"DNS server process: {method}: {value}")
        return value

    def __enter__(self) -> DnsServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


_CALLS: dict[str, Callable[..., Any]] = {
    "queries": lambda dns: dict(dns.queries),
    "query_types": lambda dns: dict(dns.query_types),
    "add": LocalDnsServer.add, "fail": LocalDnsServer.fail, "drop": LocalDnsServer.drop,
    "silence": LocalDnsServer.silence, "hold": LocalDnsServer.hold, "remove": LocalDnsServer.remove,
}


def _serve_pipes() -> None:
    """:class:`DnsServerProcess`'s child: a :class:`LocalDnsServer` whose address is the first line out,
    then one JSON request a line in (``[method, args]``), one ``[ok, value]`` line out each, until the
    input ends."""
    with LocalDnsServer() as dns:
        print(json.dumps(dns.address), flush=True)
        for line in sys.stdin:
            method, args = json.loads(line)
            try:
                reply = [True, _CALLS[method](dns, *args)]
            except Exception as exc:  # a bad request is the parent's to raise, the server stays up
                reply = [False, f"{type(exc).__name__}: {exc}"]
            print(json.dumps(reply), flush=True)


def query(address: str, name: str, qtype: str = "A", tcp: bool = False, timeout: float = 2.0) -> DNSRecord:
    """Send one query to ``address`` ("ip:port") and return the parsed reply (a test helper)."""
    host, port = address.rsplit(":", 1)
    packet = DNSRecord.question(name, qtype).pack()
    if tcp:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(len(packet).to_bytes(2, "big") + packet)
            data = b""
            while len(data) < 2 or len(data) - 2 < int.from_bytes(data[:2], "big"):
                chunk = sock.recv(65535)
                if not chunk:
                    break
                data += chunk
            return DNSRecord.parse(data[2:])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, (host, int(port)))
        return DNSRecord.parse(sock.recv(65535))
