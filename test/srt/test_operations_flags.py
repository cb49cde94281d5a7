"""The limits / security / shutdown / observability flags: parsing, defaults, validation."""

from __future__ import annotations

import pytest

from sglang.cli import build_serve_parser
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs

NEW_FLAGS = [
    "--api-key",
    "--cors-allow-origin",
    "--max-payload-bytes",
    "--max-client-batch-size",
    "--request-timeout",
    "--graceful-timeout",
    "--startup-timeout",
    "--log-requests",
    "--log-request-text",
    "--log-format",
]


def _parse(*argv: str) -> ServerArgs:
    return ServerArgs.from_cli_args(build_serve_parser().parse_args(list(argv)))


def test_flags_are_documented_and_defaults_are_safe(monkeypatch):
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    help_text = build_serve_parser().format_help()
    for flag in NEW_FLAGS:
        assert flag in help_text
    a = _parse()
    assert a.api_key is None and a.cors_allow_origin == []
    assert 1 << 20 <= a.max_payload_bytes <= 64 << 20 and a.max_client_batch_size >= 1
    assert a.request_timeout > 0 and a.graceful_timeout > 0
    assert not a.log_requests and not a.log_request_text and a.log_format == "text"


def test_api_key_from_flag_or_environment_and_never_in_repr(monkeypatch):
    monkeypatch.setenv("SGLANG_API_KEY", "from-env")
    assert _parse().api_key == "from-env"
    a = _parse("--api-key", "from-flag")
    assert a.api_key == "from-flag" and "from-flag" not in repr(a)
    monkeypatch.setenv("SGLANG_API_KEY", "")
    assert _parse().api_key is None


def test_cors_origins_repeat_or_comma_separate():
    a = _parse("--cors-allow-origin", "https://a.example, https://b.example", "--cors-allow-origin", "http://c:1")
    assert a.cors_allow_origin == ["https://a.example", "https://b.example", "http://c:1"]


def test_log_request_text_implies_log_requests():
    a = _parse("--log-request-text", "--log-format", "json")
    assert a.log_requests and a.log_format == "json"


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"max_payload_bytes": 0}, "--max-payload-bytes"),
        ({"max_client_batch_size": 0}, "--max-client-batch-size"),
        ({"request_timeout": -1}, "--request-timeout"),
        ({"graceful_timeout": -0.5}, "--graceful-timeout"),
        ({"log_format": "xml"}, "--log-format"),
        ({"startup_timeout": 0}, "--startup-timeout"),
        ({"api_key": " padded "}, "--api-key"),
        ({"api_key": "new\nline"}, "--api-key"),
    ],
)
def test_bad_values_are_config_errors(kwargs, fragment):
    with pytest.raises(ConfigError) as e:
        ServerArgs(**kwargs)
    assert fragment in str(e.value)


def test_zero_timeouts_mean_no_limit():
    a = ServerArgs(request_timeout=0, graceful_timeout=0)
    assert a.request_timeout == 0 and a.graceful_timeout == 0
    assert a.queue_timeout is None and a.backstop_timeout is None


def test_request_timeout_derived_once():
    """The scheduler's queue limit and the HTTP process's backstop (twice it) come from ServerArgs."""
    a = ServerArgs(request_timeout=7.5)
    assert (a.queue_timeout, a.backstop_timeout) == (7.5, 15.0)


def test_connection_and_watchdog_flags():
    a = _parse()
    assert a.allowed_hosts is None and a.max_connections >= 256 and a.max_header_bytes >= 8192
    assert 0 < a.header_timeout <= 60 and 0 < a.body_timeout and 0 < a.keep_alive_timeout
    assert 0 < a.watchdog_timeout <= 60 <= a.watchdog_exit_timeout and not a.expose_model_path
    a = _parse("--allowed-hosts", "A.example.com, *.svc", "--allowed-hosts", "localhost", "--expose-model-path",
               "--watchdog-timeout", "5", "--watchdog-exit-timeout", "0", "--max-connections", "10")  # fmt: skip
    assert a.allowed_hosts == ["a.example.com", "*.svc", "localhost"] and a.expose_model_path
    assert a.watchdog_timeout == 5 and a.watchdog_exit_timeout == 0 and a.max_connections == 10
    for bad in (
        ("--max-connections", "0"),
        ("--header-timeout", "0"),
        ("--watchdog-timeout", "-1"),
        ("--watchdog-timeout", "10", "--watchdog-exit-timeout", "5"),
    ):
        with pytest.raises(ConfigError):
            _parse(*bad)
