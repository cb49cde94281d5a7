"""`sglang serve` / `python -m sglang.launch_server`: help, flag spellings, one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sglang.cli import build_serve_parser, parse_serve_args, sagemaker_mode
from sglang.srt.server_args import ServerArgs

FLAGS = [
    "--model-path",
    "--is-embedding",
    "--host",
    "--port",
    "--served-model-name",
    "--dtype",
    "--device",
    "--context-length",
    "--allow-auto-truncate",
    "--trust-remote-code",
    "--log-level",
]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )


def test_help_documents_every_flag():
    help_text = build_serve_parser().format_help()
    for flag in FLAGS:
        assert flag in help_text
    r = _run("-m", "sglang.cli", "serve", "--help")
    assert r.returncode == 0 and "--max-batch-size" in r.stdout


def test_defaults_serve_the_bundled_model():
    args = ServerArgs.from_cli_args(build_serve_parser().parse_args([]))
    assert args.served_model_name == "all-MiniLM-L6-v2"
    assert args.model_path.endswith("model") and args.port == 30000 and args.host == "127.0.0.1"


def test_trtllm_and_sglang_flag_spellings():
    parse = build_serve_parser().parse_args
    a = ServerArgs.from_cli_args(parse(["--max_batch_size", "7", "--max-prefill-tokens", "99"]))
    assert a.max_batch_size == 7 and a.max_num_tokens == 99
    assert ServerArgs.from_cli_args(parse(["--max-running-requests", "3"])).max_batch_size == 3
    assert ServerArgs.from_cli_args(parse(["--max-payload-size", "1024", "--enable-metrics"])).max_payload_bytes == 1024


def test_vllm_hf_overrides_spelling():
    parse = build_serve_parser().parse_args
    overrides = '{"classifier_from_token": ["no", "yes"], "is_original_qwen3_reranker": true}'
    for flag in ("--hf-overrides", "--json-model-override-args"):
        args = ServerArgs.from_cli_args(parse([flag, overrides]))
        assert args.model_override_args == {"classifier_from_token": ["no", "yes"], "is_original_qwen3_reranker": True}


@pytest.mark.slow
def test_missing_model_directory_is_one_line_error():
    r = _run("-m", "sglang.launch_server", "--model-path", "/nonexistent/model/dir")
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0 and "does not exist" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_offline_uncached_hub_id_is_one_line_error():
    r = _run("-m", "sglang.launch_server", "--model-path", "no-such-org/no-such-model-xyz")
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0 and "no-such-org/no-such-model-xyz" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_flag_values_are_rejected():
    r = _run("-m", "sglang.launch_server", "--max-batch-size", "0")
    assert r.returncode != 0 and "--max-batch-size must be at least 1" in r.stderr


def test_sagemaker_serve_argument_means_port_8080_unless_told_otherwise():
    """SageMaker runs the image as `docker run IMAGE serve`: the ENTRYPOINT sees `sglang serve serve`."""
    argv, env = sagemaker_mode(["serve"], {})
    assert parse_serve_args(argv, env).port == 8080
    argv, env = sagemaker_mode(["serve"], {"SGLANG_PORT": "9000"})
    assert parse_serve_args(argv, env).port == 9000
    argv, env = sagemaker_mode(["serve", "--port", "7000"], {"SGLANG_PORT": "9000"})
    assert parse_serve_args(argv, env).port == 7000
    argv, env = sagemaker_mode(["--port", "7000"], {})  # no `serve`: nothing changes
    assert argv == ["--port", "7000"] and env == {} and parse_serve_args([], {}).port == 30000
