"""The SSRF guard: which IP addresses the crawler may connect to.

A crawler fed untrusted URLs must not become a tool for reaching the machine's own network. Every address
a host name resolves to, and every IP literal in a URL (so also in redirects and robots.txt fetches),
passes through :func:`blocked_reason` before a connection is made.

Refused unless ``allow_private``: private (RFC 1918, ULA), loopback, link-local, shared (CGNAT),
unspecified, reserved and documentation ranges (everything ``ipaddress`` does not call global),
deprecated site-local ``fec0::/10``, and multicast.

An IPv6 address that carries an IPv4 address is judged by the IPv4 address inside (every place it may
be, refused if any is): IPv4-mapped ``::ffff:a.b.c.d``, IPv4-translated ``::ffff:0:a.b.c.d``,
IPv4-compatible ``::a.b.c.d`` (``::`` and ``::1`` excepted), NAT64 ``64:ff9b::/96`` and the local-use
``64:ff9b:1::/48`` (RFC 8215: each RFC 6052 position its prefix length may put it at, /48 to /96), 6to4
``2002::/16``, Teredo's client and ISATAP interface identifiers (``::0:5efe:a.b.c.d`` and
``::200:5efe:a.b.c.d`` under any prefix). Without this, ``64:ff9b::a9fe:a9fe`` reaches the metadata address
through a NAT64 gateway.

Refused always, even with ``allow_private``: cloud metadata endpoints. No crawl needs them and an
intranet crawl on a cloud VM would otherwise hand instance credentials to whoever wrote a link.
"""

from __future__ import annotations

import functools
import ipaddress

__all__ = ["blocked_reason", "is_ip_literal"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA = frozenset({
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack...
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("fd00:ec2::254"),  # AWS IPv6
})


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_COMPATIBLE = ipaddress.ip_network("::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")


def _v4(bits: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(bits & 0xFFFFFFFF)


def _rfc6052(value: int, prefix: int) -> ipaddress.IPv4Address:
    """The IPv4 address RFC 6052 embeds after a ``prefix``-bit NAT64 prefix (bits 64-71 are skipped)."""
    if prefix == 96:
        return _v4(value)
    octets = value.to_bytes(16, "big")
    start = prefix // 8
    carried = [b for i, b in enumerate(octets[start:start + 5], start) if i != 8][:4]
    return ipaddress.IPv4Address(bytes(carried))


def _embedded_v4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address ``ip`` may carry (see the module docstring); empty for a plain IPv6 address."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return [ip.teredo[1]]
    value = int(ip)
    if ip in _NAT64 or ip in _TRANSLATED or (ip in _COMPATIBLE and value > 1):
        return [_v4(value)]
    if ip in _NAT64_LOCAL:
        return [_rfc6052(value, prefix) for prefix in (48, 56, 64, 96)]
    if (value >> 32) & 0xFDFFFFFF == 0x00005EFE:  # ISATAP: the u/l bit may be set (0200:5efe)
        return [_v4(value)]
    return []


@functools.lru_cache(maxsize=65536)
def blocked_reason(address: str, allow_private: bool) -> str | None:
    """Why connecting to ``address`` (an IP literal, no brackets) is refused, or None if it is allowed.
    A string that is not an IP address is refused too."""
    try:
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner:
            reasons = [r for r in (blocked_reason(str(v4), allow_private) for v4 in inner) if r]
            reasons.sort(key=lambda r: ("metadata" not in r, "loopback" not in r))  # the gravest first
            return f"{address} embeds {reasons[0]}" if reasons else None
    if ip in _METADATA:
        return f"{address} is a cloud metadata address"
    if allow_private:
        return None
    if ip.is_multicast:
        return f"{address} is a multicast address"
    if not ip.is_global or ip in _SITE_LOCAL:
        kind = (
            "loopback" if ip.is_loopback
            else "link-local" if ip.is_link_local
            else "private" if ip.is_private or ip in _SITE_LOCAL
            else "reserved"
        )
        return f"{address} is a {kind} address"
    return None


@functools.lru_cache(maxsize=65536)
def is_ip_literal(host: str) -> bool:
    """Is ``host`` (as in a URL, brackets removed) an IP address rather than a name?"""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
