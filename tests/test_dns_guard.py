"""The SSRF guard: which addresses are refused, with and without allow_private."""

from __future__ import annotations

import pytest

from polecat.fetch.guard import blocked_reason, is_ip_literal

PUBLIC = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.4.4"]
PRIVATE = [
    "127.0.0.1", "127.9.9.9", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.1.1", "100.64.0.1",
    "0.0.0.0", "::1", "::", "fe80::1", "fc00::1", "240.0.0.1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
    "2002:7f00:1::1",  # 6to4 wrapping 127.0.0.1
]
MULTICAST = ["224.0.0.1", "239.255.255.250", "ff02::1"]
METADATA = ["169.254.169.254", "fd00:ec2::254", "169.254.170.2", "::ffff:169.254.169.254"]


@pytest.mark.parametrize("addr", PUBLIC)
def test_public_allowed(addr: str) -> None:
    assert blocked_reason(addr, False) is None


@pytest.mark.parametrize("addr", PRIVATE + MULTICAST)
def test_private_refused_unless_allowed(addr: str) -> None:
    assert blocked_reason(addr, False) is not None
    assert blocked_reason(addr, True) is None


@pytest.mark.parametrize("addr", METADATA)
def test_metadata_refused_always(addr: str) -> None:
    assert "metadata" in (blocked_reason(addr, False) or "")
    assert "metadata" in (blocked_reason(addr, True) or "")


def test_reason_names_the_kind() -> None:
    assert "loopback" in (blocked_reason("127.0.0.1", False) or "")
    assert "private" in (blocked_reason("10.0.0.1", False) or "")
    assert "link-local" in (blocked_reason("169.254.3.3", False) or "")


def test_non_address_refused() -> None:
    assert blocked_reason("example.org", True) is not None


@pytest.mark.parametrize(("host", "literal"), [
    ("127.0.0.1", True), ("::1", True), ("fe80::1%eth0", True), ("a.test", False), ("2130706433", False),
])
def test_is_ip_literal(host: str, literal: bool) -> None:
    assert is_ip_literal(host) is literal
