"""The SSRF guard: which addresses count as public, odd IPv4 spellings, the host allowlist."""

from __future__ import annotations

import ipaddress

import pytest

from sglang.srt.frontend.multimodal.url_guard import (
    UrlPolicy,
    UrlRefused,
    is_public_address,
    normalize_host,
    parse_ip_literal,
)

NOT_PUBLIC = [
    "127.0.0.1",
    "127.255.255.254",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",  # AWS / GCP / Azure metadata
    "100.100.100.200",  # Alibaba Cloud metadata (shared address space)
    "100.64.0.1",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.2.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd00:ec2::254",  # AWS metadata over IPv6
    "ff02::1",
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",  # IPv4-compatible
    "2002:7f00:1::",  # 6to4 around 127.0.0.1
    "2002:a9fe:a9fe::",  # 6to4 around 169.254.169.254
    "64:ff9b::a00:1",  # NAT64 around 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo whose client is 127.0.0.1
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_non_public_addresses_are_refused(address):
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address):
    assert is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("spelling", ["127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.1", "127.0.1"])
def test_odd_ipv4_spellings_are_addresses(spelling):
    ip = parse_ip_literal(spelling)
    assert ip is not None and ip.version == 4 and ip.is_loopback


def test_names_are_not_addresses():
    assert parse_ip_literal("example.com") is None and parse_ip_literal("cafe") is None
    assert parse_ip_literal("face.b00c") is None  # hex letters, but not a number inet_aton takes
    assert str(parse_ip_literal("fe80::1%25eth0")) == "fe80::1%eth0"
    assert not is_public_address(parse_ip_literal("fe80::1%25eth0"))


def test_normalize_host():
    assert normalize_host("Example.COM.") == "example.com"
    assert normalize_host("bücher.example") == "xn--bcher-kva.example"


def test_default_policy_checks_every_resolved_address():
    policy = UrlPolicy()
    policy.check_host("anything.example")  # no allowlist: any name
    policy.check_addresses("a.example", [ipaddress.ip_address("8.8.8.8")])
    with pytest.raises(UrlRefused, match="non-public address 10.0.0.1"):  # one bad answer among good ones
        policy.check_addresses("a.example", [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("10.0.0.1")])
    with pytest.raises(UrlRefused, match="resolved to no address"):
        policy.check_addresses("a.example", [])
    UrlPolicy(allow_private=True).check_addresses("a.example", [ipaddress.ip_address("127.0.0.1")])


def test_allowlist():
    policy = UrlPolicy.from_flags(False, ["images.example.com, .cdn.example", "10.0.0.5"], False)
    assert policy.allowed_hosts == ("images.example.com", ".cdn.example", "10.0.0.5")
    for host in ("images.example.com", "cdn.example", "a.b.cdn.example", "10.0.0.5"):
        policy.check_host(host)
    for host in ("example.com", "evil-images.example.com", "xcdn.example", "10.0.0.6", "localhost"):
        with pytest.raises(UrlRefused, match="not in --mm-allowed-url-hosts"):
            policy.check_host(host)
    assert UrlPolicy.from_flags(False, ["*.cdn.example"], False).allowed_hosts == ("*.cdn.example",)
    UrlPolicy.from_flags(False, ["*.cdn.example"], False).check_host("x.cdn.example")
    # An allowed host is still address-checked unless private addresses are allowed too.
    with pytest.raises(UrlRefused):
        policy.check_addresses("10.0.0.5", [ipaddress.ip_address("10.0.0.5")])
    assert not UrlPolicy.from_flags(True, [], False).enabled
