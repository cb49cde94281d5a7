"""bench_cpu_ratios: the in-process side runs with the same flags as the server it is compared to,
and each round's own served / Engine ratio and steal time are what the summary reports."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
from bench_cpu_ratios import cpu_ticks, engine_kwargs, paired_ratios, steal_percent  # noqa: E402

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


def test_each_round_is_paired_with_its_own_engine_run():
    rows = [
        {"served": {"c=64": {"texts_per_s": 180.0}}, "engine": {"texts_per_s": 200.0}},
        {"served": {"c=64": {"texts_per_s": 240.0}}, "engine": {"texts_per_s": 250.0}},
    ]
    assert paired_ratios(rows) == pytest.approx([0.9, 0.96])


def test_interleaved_rounds_pair_each_slice_not_the_medians():
    """--interleave: each round holds one ratio per (served level, Engine slice) pair, and the
    summary's spread is over those, not over the rounds' medians."""
    rows = [
        {"served": {"c=64": {"texts_per_s": 190.0}}, "engine": {"texts_per_s": 200.0}, "pair_ratios": [0.9, 1.0]},
        {"served": {"c=64": {"texts_per_s": 160.0}}, "engine": {"texts_per_s": 200.0}, "pair_ratios": [0.8]},
    ]
    assert paired_ratios(rows) == [0.9, 1.0, 0.8]


def test_steal_is_the_share_of_all_ticks_between_two_readings():
    assert steal_percent((10, 1000), (60, 2000)) == pytest.approx(5.0)
    assert steal_percent((10, 1000), (10, 1000)) == 0.0  # no time passed: no division by zero


def test_cpu_ticks_reads_this_machines_counters():
    steal, total = cpu_ticks()
    later_steal, later_total = cpu_ticks()
    assert total > 0 and 0 <= steal <= total  # Linux: /proc/stat's first line
    assert later_total >= total and later_steal >= steal
