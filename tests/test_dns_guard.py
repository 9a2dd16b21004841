"""The SSRF guard: which addresses are refused, with and without allow_private; nameserver validation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from polecat.config import config_from_mapping
from polecat.errors import ConfigError
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


# Every IPv6 form that carries an IPv4 address, each wrapping the metadata address and loopback.
EMBEDDED = {
    "nat64": ("64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1"),
    "nat64-local/48": ("64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1:7f00:0:100::"),
    "nat64-local/64": ("64:ff9b:1:0:a9:fea9:fe00:0", "64:ff9b:1:0:7f:0:100:0"),
    "nat64-local/96": ("64:ff9b:1::a9fe:a9fe", "64:ff9b:1::7f00:1"),
    "ipv4-compatible": ("::a9fe:a9fe", "::7f00:1"),
    "ipv4-translated": ("::ffff:0:a9fe:a9fe", "::ffff:0:7f00:1"),
    "ipv4-mapped": ("::ffff:a9fe:a9fe", "::ffff:7f00:1"),
    "6to4": ("2002:a9fe:a9fe::1", "2002:7f00:1::1"),
    "teredo": ("2001:0:4136:e378:8000:63bf:5601:5601", "2001:0:4136:e378:8000:63bf:80ff:fffe"),
    "isatap": ("2600:1f18::5efe:a9fe:a9fe", "2600:1f18::200:5efe:7f00:1"),
}


@pytest.mark.parametrize("form", sorted(EMBEDDED))
def test_every_ipv6_form_is_judged_by_the_ipv4_inside(form: str) -> None:
    metadata, loopback = EMBEDDED[form]
    assert "169.254.169.254 is a cloud metadata" in (blocked_reason(metadata, True) or "")
    assert "127.0.0.1 is a loopback" in (blocked_reason(loopback, False) or "")
    assert blocked_reason(loopback, True) is None


def test_embedded_public_ipv4_is_allowed_and_site_local_refused() -> None:
    for addr in ("64:ff9b::808:808", "::ffff:0:808:808", "::808:808", "2002:808:808::1"):
        assert blocked_reason(addr, False) is None
    assert "private" in (blocked_reason("fec0::1", False) or "")
    assert blocked_reason("fec0::1", True) is None


@pytest.mark.parametrize(("entry", "problem"), [
    ("not-an-ip", "not an IP address"), ("127.0.0.1:99999", "not in 1-65535"),
    ("127.0.0.1:0", "not in 1-65535"),
    ("[::1]x", "not ip, ip:port"), ("1.2.3.4:", "not in 1-65535"), ("dns.test:53", "not an IP address"),
])
def test_bad_nameservers_are_config_errors_naming_the_entry(entry: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"dns\.nameservers\[1\]: .*{problem}"):
        config_from_mapping({"dns": {"nameservers": ["127.0.0.1", entry]}})


def test_good_nameservers_pass() -> None:
    servers = ["127.0.0.1", "127.0.0.1:5353", "::1", "[::1]", "[::1]:53"]
    assert config_from_mapping({"dns": {"nameservers": servers}}).dns.nameservers == tuple(servers)


def test_cli_names_the_flag_of_a_bad_nameserver(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "polecat", "crawl", "http://a.test/", "--data",
                          str(tmp_path / "d"), "--dns-server", "127.0.0.1:99999"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--dns-server (dns.nameservers[0]): " in run.stderr, run.stderr
