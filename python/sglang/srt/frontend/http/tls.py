"""HTTPS for every HTTP worker: --ssl-keyfile / --ssl-certfile, and client certificates checked
against --ssl-ca-certs (mutual TLS). uvicorn terminates TLS; this module turns the flags into its
settings and loads them once at start-up, so a wrong password or a key that does not fit the
certificate is a one-line error before any process is spawned.
"""

from __future__ import annotations

import ssl
from typing import Any

from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs

CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def client_cert_mode(server_args: ServerArgs) -> str:
    """none / optional / required: --ssl-cert-reqs, by default required when --ssl-ca-certs is set."""
    return server_args.ssl_cert_reqs or ("required" if server_args.ssl_ca_certs else "none")


def tls_options(server_args: ServerArgs) -> dict[str, Any]:
    """uvicorn.Config keyword arguments for TLS (none without a certificate)."""
    if not server_args.ssl_certfile:
        return {}
    return {
        "ssl_keyfile": server_args.ssl_keyfile,
        "ssl_certfile": server_args.ssl_certfile,
        "ssl_keyfile_password": server_args.ssl_keyfile_password,
        "ssl_ca_certs": server_args.ssl_ca_certs,
        "ssl_cert_reqs": CERT_REQS[client_cert_mode(server_args)],
    }


def check_tls(server_args: ServerArgs) -> None:
    """Load the key, certificate and CA file as uvicorn will; ConfigError saying what is wrong."""
    if not server_args.ssl_certfile:
        return
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    password = server_args.ssl_keyfile_password
    try:
        ctx.load_cert_chain(server_args.ssl_certfile, server_args.ssl_keyfile, (lambda: password) if password else None)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(
            f"Cannot load --ssl-certfile {server_args.ssl_certfile} with --ssl-keyfile {server_args.ssl_keyfile} "
            f"(wrong password, or a key that does not match the certificate?): {e}"
        ) from None
    if server_args.ssl_ca_certs:
        try:
            ctx.load_verify_locations(server_args.ssl_ca_certs)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"Cannot load --ssl-ca-certs {server_args.ssl_ca_certs}: {e}") from None
