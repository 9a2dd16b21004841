"""Crawling through an HTTP proxy: which requests go through one (:class:`ProxyRoutes`, sans-IO), and
the CONNECT tunnel an https request is sent through (:func:`open_tunnel`).

Rules:

1. The proxy of a target is ``fetch.proxy`` (for http and https targets alike); else, with
   ``fetch.proxy_env``, the environment's as curl reads it: ``http_proxy`` then ``HTTP_PROXY`` for http
   targets, ``https_proxy`` then ``HTTPS_PROXY`` for https ones. Without ``proxy_env`` the environment is
   not read: a shell's variables must not change where a crawl's requests go, nor its SSRF posture.
2. No proxy for a target that ``fetch.no_proxy`` names, or with ``proxy_env`` ``no_proxy``/``NO_PROXY``
   (entries separated by commas or spaces): ``*`` is every target; a name matches itself and every name
   under it (a leading dot is optional, case is ignored); an IP address or CIDR block matches the IP
   literals it covers (names are not resolved for it); ``entry:port`` matches that port only.
3. An http target goes to its proxy as ``GET http://host/path`` (absolute form); an https target through
   a ``CONNECT`` tunnel, with TLS to the target (its name checked) inside it. ``Proxy-Authorization`` goes
   with both when the proxy URL carries credentials, and never to a target.
4. The SSRF guard applies to the target, not the proxy: the node resolves the target itself, every
   address through the guard (polecat/fetch/dns.py), before a byte goes to the proxy. A CONNECT names the
   checked address, not the name, so the proxy's own DNS cannot point the tunnel elsewhere. An http
   request must name the host (proxies route by it and set ``Host`` from it), so a proxy whose DNS answers
   differently from the node's (rebinding) reaches what the proxy's own rules allow: those rules are the
   proxy operator's.
5. The proxy may be private or loopback (a corporate proxy usually is), but never a cloud metadata
   address: the address actually connected to is checked (a name may resolve anywhere).
6. A proxied response's remote address is the target's checked address, so per-IP politeness spaces
   targets as without a proxy (the proxy's one address would serialise every host).
7. A CONNECT answer is bounded: its head within :data:`MAX_CONNECT_HEAD` bytes, within the connect
   timeout (the pool's); anything but a 2xx, bytes after the head, or a close is a
   :class:`~polecat.errors.ConnectError` naming the proxy and what it said.
8. A failure of the leg to the proxy itself (refused, unreachable, no connection within the connect
   timeout, no CONNECT answer in time) names the proxy, not the target: the target was never reached,
   and an operator who reads "check the host" of a target that is up looks in the wrong place.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import Callable, Mapping
from typing import TypeVar

from polecat.config import FetchConfig
from polecat.config.proxy import ProxyAddress, parse_proxy
from polecat.errors import BlockedAddressError, ConnectError, FetchTimeout
from polecat.faults import descriptor_shortage
from polecat.fetch.guard import blocked_reason, is_ip_literal

__all__ = [
    "MAX_CONNECT_HEAD", "ProxyAddress", "ProxyRoutes", "check_proxy_peer", "connect_proxy", "connect_request",
    "open_tunnel",
    "routes_from",
]

MAX_CONNECT_HEAD = 16 * 1024
"""Bytes of a CONNECT answer's head read at most (rule 7)."""

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class _Bypass:
    """One ``no_proxy`` entry (rule 2)."""

    __slots__ = ("every", "name", "network", "port")

    def __init__(self, entry: str) -> None:
        text = entry.strip().lower()
        self.port: int | None = None
        host, sep, port = text.rpartition(":")
        if sep and port.isdigit() and (not host.count(":") or host.endswith("]")):
            text, self.port = host, int(port)
        text = text.strip("[]")
        self.every = text == "*"
        self.network: _Network | None = None
        with contextlib.suppress(ValueError):  # a name, not an address or block
            self.network = ipaddress.ip_network(text, strict=False)
        self.name = text.lstrip(".").rstrip(".")

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.every:
            return True
        if self.network is not None:
            if not is_ip_literal(host):
                return False
            ip = ipaddress.ip_address(host.split("%", 1)[0])
            return ip.version == self.network.version and ip in self.network
        host = host.rstrip(".")
        return bool(self.name) and (host == self.name or host.endswith("." + self.name))


class ProxyRoutes:
    """Which proxy, if any, a target's requests go through (rules 1 and 2)."""

    def __init__(self, http: ProxyAddress | None, https: ProxyAddress | None,
                 bypass: tuple[str, ...]) -> None:
        self._by_scheme = {"http": http, "https": https}
        self._bypass = tuple(_Bypass(entry) for entry in bypass if entry.strip())

    def proxy_for(self, scheme: str, host: str, port: int) -> ProxyAddress | None:
        """The proxy for ``scheme://host:port`` (host lower-case, no brackets), or None: direct."""
        proxy = self._by_scheme.get(scheme)
        if proxy is None:
            return None
        host = host.lower()
        if any(b.matches(host, port) for b in self._bypass):
            return None
        return proxy


def _env(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    for key in (name.lower(), name.upper()):
        value = environ.get(key, "").strip()
        if value:
            return key, value
    return None


def routes_from(cfg: FetchConfig, environ: Mapping[str, str]) -> ProxyRoutes | None:
    """The routes ``cfg`` asks for (rule 1), the environment read only with ``proxy_env``; None when no
    request goes through a proxy. A variable that names no usable proxy is a ConfigError naming it."""
    http = https = parse_proxy(cfg.proxy, "fetch.proxy") if cfg.proxy else None
    bypass = list(cfg.no_proxy)
    if cfg.proxy_env:
        if http is None:
            for scheme in ("http", "https"):
                found = _env(environ, f"{scheme}_proxy")
                if found is not None:
                    proxy = parse_proxy(found[1], f"{found[0]} (fetch.proxy_env)")
                    http, https = (proxy, https) if scheme == "http" else (http, proxy)
        found = _env(environ, "no_proxy")
        if found is not None:
            bypass.extend(found[1].replace(",", " ").split())
    if http is None and https is None:
        return None
    return ProxyRoutes(http, https, tuple(bypass))


def check_proxy_peer(transport: asyncio.BaseTransport, proxy: ProxyAddress) -> None:
    """Rule 5: BlockedAddressError (the transport closed) when the proxy connected to is a metadata
    address."""
    peer = transport.get_extra_info("peername")
    reason = blocked_reason(peer[0], True) if peer else f"{proxy} has no peer address"
    if reason is not None:
        transport.close()
        raise BlockedAddressError(f"proxy {proxy}: {reason}")


class _ConnectAnswer(asyncio.Protocol):
    """Reads the head of the proxy's answer to a CONNECT (rule 7)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, what: str) -> None:
        self._buf = bytearray()
        self._what = what
        self.head: asyncio.Future[bytes] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.head.done():  # the target speaks after the client's TLS hello, never before it
            return
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_CONNECT_HEAD:
                self.head.set_exception(
                    ConnectError(f"{self._what}: answer head over {MAX_CONNECT_HEAD} bytes"))
            return
        if end + 4 != len(self._buf):
            self.head.set_exception(ConnectError(f"{self._what}: bytes after the answer, before TLS"))
            return
        self.head.set_result(bytes(self._buf[:end]))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(ConnectError(f"{self._what}: the proxy closed the connection"
                                                 + (f" ({exc})" if exc else "")))


P = TypeVar("P", bound=asyncio.Protocol)


def connect_request(proxy: ProxyAddress, address: str, port: int) -> bytes:
    """The CONNECT request for ``address:port`` (rules 3 and 4)."""
    authority = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def connect_proxy(loop: asyncio.AbstractEventLoop, proxy: ProxyAddress, protocol: Callable[[], P],
                        within: float) -> tuple[asyncio.Transport, P]:
    """The TCP leg to ``proxy`` itself, in at most ``within`` seconds; its failures name the proxy (rules 5
    and 8)."""
    try:
        async with asyncio.timeout(within):
            transport, proto = await loop.create_connection(protocol, proxy.host, proxy.port)
    except TimeoutError:
        raise FetchTimeout(f"proxy {proxy}: no connection within {within:g} s") from None
    except OSError as exc:
        raise ConnectError(f"proxy {proxy}: cannot connect: {descriptor_shortage(exc) or exc}") from exc
    check_proxy_peer(transport, proxy)
    return transport, proto


async def open_tunnel(
    loop: asyncio.AbstractEventLoop,
    proxy: ProxyAddress,
    address: str,
    port: int,
    protocol: Callable[[], P],
    tls: ssl.SSLContext,
    server_hostname: str,
    within: float,
) -> tuple[asyncio.Transport, P]:
    """A TLS connection to ``server_hostname`` at the checked ``address:port``, through a CONNECT tunnel
    of ``proxy`` (rules 3-5, 7-8), all in at most ``within`` seconds: a TimeoutError past that is the TLS
    handshake with the target's."""
    deadline = loop.time() + within
    what = f"proxy {proxy}: CONNECT {address}:{port}"
    transport, answer = await connect_proxy(loop, proxy, lambda: _ConnectAnswer(loop, what), within)
    try:
        transport.write(connect_request(proxy, address, port))
        try:
            async with asyncio.timeout_at(deadline):
                head = await answer.head
        except TimeoutError:
            raise FetchTimeout(f"{what}: no answer within {within:g} s") from None
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ConnectError(f"{what}: not an HTTP answer: {status_line[:100]!r}")
        if not 200 <= int(parts[1]) < 300:
            raise ConnectError(f"{what}: refused with {status_line[:100]!r}")
        app = protocol()
        async with asyncio.timeout_at(deadline):
            tls_transport = await loop.start_tls(transport, app, tls, server_hostname=server_hostname)
    except BaseException:
        transport.close()
        raise
    if tls_transport is None:  # the loop's start_tls returns None only when the transport closed
        raise ConnectError(f"{what}: closed during the TLS handshake")
    app.connection_made(tls_transport)  # start_tls does not call it
    return tls_transport, app
