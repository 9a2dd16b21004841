"""The SSRF guard: which IP addresses the crawler may connect to.

A crawler fed untrusted URLs must not become a tool for reaching the machine's own network. Every address
a host name resolves to, and every IP literal in a URL (so also in redirects and robots.txt fetches),
passes through :func:`blocked_reason` before a connection is made.

Refused unless ``allow_private``: private (RFC 1918, ULA), loopback, link-local, shared (CGNAT),
unspecified, reserved and documentation ranges (everything ``ipaddress`` does not call global), and
multicast. IPv4-mapped and 6to4/Teredo-embedded IPv4 addresses are judged by the IPv4 address inside.

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


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


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
        if inner is not None:
            reason = blocked_reason(str(inner), allow_private)
            return f"{address} embeds {reason}" if reason else None
    if ip in _METADATA:
        return f"{address} is a cloud metadata address"
    if allow_private:
        return None
    if ip.is_multicast:
        return f"{address} is a multicast address"
    if not ip.is_global:
        kind = (
            "loopback" if ip.is_loopback
            else "link-local" if ip.is_link_local
            else "private" if ip.is_private
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
