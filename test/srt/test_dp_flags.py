"""The data-parallel flags (--dp-size, --load-balance-method, --base-gpu-id): parsing and validation."""

from __future__ import annotations

import pytest

from sglang.cli import build_serve_parser
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs


def _parse(*argv: str) -> ServerArgs:
    return ServerArgs.from_cli_args(build_serve_parser().parse_args(list(argv)))


def test_defaults_and_the_peers_spellings():
    a = _parse()
    assert (a.dp_size, a.load_balance_method, a.base_gpu_id) == (1, "shortest_queue", 0)
    assert _parse("--dp-size", "2").dp_size == 2
    assert _parse("--data-parallel-size", "3").dp_size == 3  # vLLM's name
    b = _parse("--dp-size", "4", "--load-balance-method", "round_robin", "--base-gpu-id", "2")
    assert (b.dp_size, b.load_balance_method, b.base_gpu_id) == (4, "round_robin", 2)
    help_text = build_serve_parser().format_help()
    for flag in ("--dp-size", "--load-balance-method", "--base-gpu-id"):
        assert flag in help_text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dp_size": 0}, "--dp-size must be at least 1"),
        ({"load_balance_method": "random"}, "--load-balance-method must be one of shortest_queue, round_robin"),
        ({"base_gpu_id": -1}, "--base-gpu-id must be >= 0"),
        ({"dp_size": 4, "max_queue_size": 3}, "--max-queue-size is shared by the --dp-size replicas"),
    ],
)
def test_bad_values_are_refused_with_the_flag_named(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ServerArgs(**kwargs)
