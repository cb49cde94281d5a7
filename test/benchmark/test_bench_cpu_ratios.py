"""bench_cpu_ratios: the in-process side runs with the same flags as the server it is compared to."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
from bench_cpu_ratios import engine_kwargs  # noqa: E402

from sglang.srt.server_args import ServerArgs  # noqa: E402


def test_server_flags_become_the_engines_keyword_arguments():
    kwargs = engine_kwargs("--quantization int8 --dp-size 2 --max-queue-delay 0.005 --cpu-threads 1")
    assert kwargs == {"quantization": "int8", "dp_size": 2, "max_queue_delay": 0.005, "cpu_threads": 1}
    ServerArgs(**kwargs)  # every key is a ServerArgs field


def test_flags_are_read_as_sglang_serve_reads_them():
    kwargs = engine_kwargs("--max-payload-size 1024 --max_batch_size 7")  # SGLang's and trtllm's spellings
    assert kwargs == {"max_payload_bytes": 1024, "max_batch_size": 7}


def test_no_flags_leave_every_default():
    assert engine_kwargs("") == {}


def test_an_unknown_flag_is_an_error_not_ignored():
    with pytest.raises(SystemExit):
        engine_kwargs("--dp-sise 2")
