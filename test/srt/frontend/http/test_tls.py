"""TLS settings (frontend/http/tls.py, server_args) and the `sglang health` probe, without a server;
the served HTTPS with client certificates is test_production_e2e.py."""

from __future__ import annotations

import ssl

import pytest

from sglang.cli import main as cli_main
from sglang.srt.entrypoints.health_probe import check_health, probe_target
from sglang.srt.errors import ConfigError
from sglang.srt.frontend.http.tls import check_tls, tls_options
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import get_free_port
from test.helpers.certs import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), key_password="pw")


def _tls_args(pki, **kw) -> ServerArgs:
    return ServerArgs(ssl_certfile=str(pki.server_cert), ssl_keyfile=str(pki.server_key), **kw)


def test_plain_http_by_default():
    args = ServerArgs()
    assert tls_options(args) == {} and args.url.startswith("http://")
    check_tls(args)  # nothing to load


def test_client_certificates_are_required_with_a_ca(pki):
    args = _tls_args(pki, ssl_keyfile_password="pw", ssl_ca_certs=str(pki.ca))
    opts = tls_options(args)
    assert opts["ssl_cert_reqs"] == ssl.CERT_REQUIRED and opts["ssl_ca_certs"] == str(pki.ca)
    assert opts["ssl_keyfile_password"] == "pw" and args.url.startswith("https://")
    check_tls(args)
    optional = _tls_args(pki, ssl_keyfile_password="pw", ssl_ca_certs=str(pki.ca), ssl_cert_reqs="optional")
    assert tls_options(optional)["ssl_cert_reqs"] == ssl.CERT_OPTIONAL
    assert tls_options(_tls_args(pki, ssl_keyfile_password="pw"))["ssl_cert_reqs"] == ssl.CERT_NONE


def test_wrong_password_or_mismatched_key_is_a_config_error(pki):
    with pytest.raises(ConfigError, match="wrong password"):
        check_tls(_tls_args(pki, ssl_keyfile_password="not-it"))
    mismatched = ServerArgs(ssl_certfile=str(pki.server_cert), ssl_keyfile=str(pki.client_key))
    with pytest.raises(ConfigError, match="does not match"):
        check_tls(mismatched)
    with pytest.raises(ConfigError, match="--ssl-ca-certs"):
        check_tls(_tls_args(pki, ssl_keyfile_password="pw", ssl_ca_certs=str(pki.server_key)))


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"ssl_keyfile": "KEY"}, "go together"),
        ({"ssl_certfile": "CERT"}, "go together"),
        ({"ssl_ca_certs": "CA"}, "needs --ssl-keyfile"),
        ({"ssl_certfile": "CERT", "ssl_keyfile": "KEY", "ssl_cert_reqs": "required"}, "needs --ssl-ca-certs"),
        ({"ssl_certfile": "/nonexistent.crt", "ssl_keyfile": "KEY"}, "is not a file"),
    ],
)
def test_flag_combinations_are_checked(pki, kw, message):
    files = {"KEY": str(pki.server_key), "CERT": str(pki.server_cert), "CA": str(pki.ca)}
    with pytest.raises(ConfigError, match=message):
        ServerArgs(**{k: files.get(v, v) for k, v in kw.items()})


def test_health_probe_targets_loopback_and_reports_a_closed_port(capsys):
    assert probe_target(ServerArgs(host="0.0.0.0", port=8080)) == ("127.0.0.1", 8080, False)
    assert probe_target(ServerArgs(host="::", port=8080))[0] == "::1"
    port = get_free_port()
    healthy, detail = check_health(ServerArgs(port=port), timeout=2)
    assert not healthy and f"http://127.0.0.1:{port}/health" in detail
    assert cli_main(["health", "--port", str(port)]) == 1
    assert f"127.0.0.1:{port}/health" in capsys.readouterr().err
    assert cli_main(["health", "--port", "0"]) == 2  # a bad setting is a usage error, as for serve
