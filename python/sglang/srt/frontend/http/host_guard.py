"""--allowed-hosts: which Host header values the server answers to (DNS rebinding; middleware.HostGuard).

A web page can make a browser resolve its own domain to 127.0.0.1 and then talk to a server on
the user's machine as a same-origin page; the one thing it cannot change is the Host header,
which still carries the attacker's domain. A loopback-bound server therefore answers only to
loopback names by default. Bound to any other address the server cannot guess the names it is
reached by (a Kubernetes service, a load balancer), so by default it answers any Host there:
name them with --allowed-hosts, and use --api-key on a server others can reach.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Optional

from sglang.srt.server_args import ServerArgs

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
OPEN_PATHS = frozenset({"/health", "/ping"})  # probes often use an IP; health tells an attacker nothing


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(server_args: ServerArgs) -> Optional[list[str]]:
    """The Host names this server answers to, or None for any (see the module docstring)."""
    if server_args.allowed_hosts is not None:
        return None if "*" in server_args.allowed_hosts else list(server_args.allowed_hosts)
    if is_loopback(server_args.host):
        return sorted({*LOOPBACK_NAMES, server_args.host.strip("[]").lower()})
    return None


_PORT_RE = re.compile(r"^[0-9]{0,5}$")
_NAME_RE = re.compile(r"^[a-z0-9._~-]+$")  # a DNS name or an IPv4 address (RFC 3986 reg-name, minus escapes)


def host_name(header: str) -> Optional[str]:
    """The name part of a Host header value: no port, no IPv6 brackets, lower case; None when the
    value is not `name[:port]` or `[IPv6]:port` (`[::1]evil`, `a:b`, `localhost:x` pass nothing)."""
    value = header.strip().lower()
    if value.startswith("["):
        close = value.find("]")
        rest = value[close + 1 :] if close > 0 else ""
        if close < 0 or (rest and not (rest.startswith(":") and _PORT_RE.match(rest[1:]))):
            return None
        try:
            return ipaddress.IPv6Address(value[1:close]).compressed
        except ValueError:
            return None
    name, colon, port = value.partition(":")
    if colon and not _PORT_RE.match(port):
        return None
    name = name.rstrip(".")
    return name if _NAME_RE.match(name) else None


def _pattern_name(pattern: str) -> Optional[str]:
    """An --allowed-hosts entry as host_name() would give it (a bare IPv6 address, like `::1`, too)."""
    try:
        return ipaddress.IPv6Address(pattern.strip().strip("[]")).compressed
    except ValueError:
        return host_name(pattern)


def host_allowed(name: Optional[str], allowed: list[str]) -> bool:
    if name is None:
        return False
    for pattern in allowed:
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and len(name) > len(pattern) - 1:
                return True
        elif name == _pattern_name(pattern):
            return True
    return False
