"""`sglang health`: probe the local server's /health, for Docker's HEALTHCHECK and other supervisors.

It reads the server's settings the way `sglang serve` does (flags, then `SGLANG_*` variables), so a
container configured through the environment needs no extra arguments: exit 0 when /health
answers 200, 1 otherwise (with the reason on stderr). A wildcard listen address is probed on
loopback; with TLS the probe speaks HTTPS without checking the server's own certificate (it is
talking to itself), and presents that certificate as its client certificate when the server
asks for one.
"""

from __future__ import annotations

import http.client
import ssl

from sglang.srt.server_args import ServerArgs

WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def probe_target(server_args: ServerArgs) -> tuple[str, int, bool]:
    """(host, port, https) to probe: a wildcard bind address becomes loopback."""
    host = WILDCARD_HOSTS.get(server_args.host, server_args.host)
    return host, server_args.port, bool(server_args.ssl_certfile)


def _client_context(server_args: ServerArgs) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if server_args.ssl_ca_certs:  # mutual TLS: the server will want a certificate from us too
        password = server_args.ssl_keyfile_password
        ctx.load_cert_chain(server_args.ssl_certfile, server_args.ssl_keyfile, (lambda: password) if password else None)
    return ctx


def check_health(server_args: ServerArgs, timeout: float = 5.0) -> tuple[bool, str]:
    """(healthy, what happened) for the server these settings describe."""
    host, port, https = probe_target(server_args)
    try:
        if https:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=_client_context(server_args))
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", "/health")
            status = conn.getresponse().status
        finally:
            conn.close()
    except (OSError, ssl.SSLError, http.client.HTTPException) as e:
        return False, f"{'https' if https else 'http'}://{host}:{port}/health: {e}"
    return status == 200, f"{'https' if https else 'http'}://{host}:{port}/health: HTTP {status}"
