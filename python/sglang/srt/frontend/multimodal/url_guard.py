"""Which image URLs the server may fetch: the host allowlist and the address check against SSRF.

An image URL makes the server connect somewhere from its own network position, so by default it
refuses every address that is not on the public internet: loopback, private, link-local (the
cloud metadata endpoints 169.254.169.254 / fd00:ec2::254 among them), shared (100.64.0.0/10,
where Alibaba's metadata answers), multicast, unspecified and reserved ranges. IPv6 forms that
carry an IPv4 address (IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64) are judged by that
address. The check runs on the addresses a host name resolves to, for every hop of a redirect
chain, and the connection then goes to the very address that was checked (http_fetch.py), so a
DNS answer that changes between check and connect cannot slip through.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_SHARED = ipaddress.ip_network("100.64.0.0/10")


class UrlRefused(Exception):
    """The policy refuses this URL; the message is for the server log, not the client."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> Optional[ipaddress.IPv4Address]:
    """The IPv4 address an IPv6 address stands for, if it is one of the forms that carry one."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # (server, client): the client is where packets end up
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public_address(ip: IPAddress) -> bool:
    """True only for a globally routable unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return False
        inner = embedded_ipv4(ip)
        if inner is not None:
            return is_public_address(inner)
    if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip.is_link_local or ip.is_reserved:
        return False
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return False
    return ip.is_global and not ip.is_private


def parse_ip_literal(host: str) -> Optional[IPAddress]:
    """`host` as an IP address when it is one, including the spellings inet_aton accepts
    (`127.1`, `2130706433`, `0x7f.0.0.1`, `0177.0.0.1`) that resolvers also turn into addresses."""
    try:  # an IPv6 zone arrives percent-encoded from a URL ("fe80::1%25eth0")
        return ipaddress.ip_address(host.replace("%25", "%", 1) if ":" in host else host)
    except ValueError:
        pass
    if ":" not in host and host and all(c in "0123456789abcdefxABCDEFX." for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _host_matches(host: str, pattern: str) -> bool:
    """Exact name or address; `*.example.com` or `.example.com` also matches every subdomain."""
    if pattern.startswith("*."):
        pattern = pattern[1:]
    if pattern.startswith("."):
        return host == pattern[1:] or host.endswith(pattern)
    return host == pattern


def normalize_host(host: str) -> str:
    """Lower case, no trailing dot, IDNA (punycode) for non-ASCII names."""
    host = host.strip().rstrip(".").lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise UrlRefused(f"host {host!r} is not a valid domain name") from None
    return host


@dataclass(frozen=True)
class UrlPolicy:
    """--mm-disable-url-fetch, --mm-allowed-url-hosts and --mm-allow-private-urls, applied."""

    enabled: bool = True
    allowed_hosts: tuple[str, ...] = ()  # empty: any host (subject to the address check)
    allow_private: bool = False
    # Judges one resolved address; replaceable so tests can call a loopback address "public".
    is_allowed_address: Callable[[IPAddress], bool] = is_public_address

    @classmethod
    def from_flags(cls, disable: bool, allowed_hosts: Sequence[str], allow_private: bool) -> "UrlPolicy":
        hosts = tuple(normalize_host(h) for item in allowed_hosts for h in item.split(",") if h.strip())
        return cls(enabled=not disable, allowed_hosts=hosts, allow_private=allow_private)

    def check_host(self, host: str) -> None:
        """Before resolving: is this host name one we may fetch from at all?"""
        if not self.allowed_hosts:
            return
        literal = parse_ip_literal(host)
        names = {host} | ({str(literal)} if literal is not None else set())
        if not any(_host_matches(name, pattern) for name in names for pattern in self.allowed_hosts):
            raise UrlRefused(f"host {host!r} is not in --mm-allowed-url-hosts")

    def check_addresses(self, host: str, addresses: Sequence[IPAddress]) -> None:
        """After resolving: every address the host resolved to must be allowed (one bad answer
        among good ones is refused too, or a resolver could mix them to win a race)."""
        if not addresses:
            raise UrlRefused(f"host {host!r} resolved to no address")
        if self.allow_private:
            return
        for ip in addresses:
            if not self.is_allowed_address(ip):
                raise UrlRefused(f"host {host!r} resolves to the non-public address {ip}")
