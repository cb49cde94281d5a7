"""The scheduler's memory stays flat under mixed-size traffic: benchmark/bench_soak.py, shortened.

Eight closed-loop clients send requests of 1-128 corpus texts for two minutes; the scheduler's RSS
at the end must be within SOAK_MAX_GROWTH of its level after the first minute. Before the memory
set-up (utils/allocator.py) it roughly doubled in that time (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys

import pytest
import requests

from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmark"))
from bench_serving import DEFAULT_TEXTS, load_texts, run_event_loop  # noqa: E402
from bench_soak import DEFAULT_SIZES, mixed_load  # noqa: E402
from rss_sampler import RssLog, growth, rss_mb, server_processes  # noqa: E402

from sglang.srt.utils.allocator import DEFAULT_POOL_MB, IDLE_RELEASE_S  # noqa: E402

pytestmark = pytest.mark.slow

WARMUP_S, MEASURED_S, WINDOW_S = 60.0, 60.0, 20.0
SOAK_MAX_GROWTH = 0.30  # looser than the benchmark's 15% over 20 minutes: one minute is noisier


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--allow-auto-truncate") as s:
        yield s


def test_memory_set_up_is_reported(server):
    memory = requests.get(server.base_url + "/model_info", timeout=10).json()["memory"]
    # The Makefile installs libjemalloc2, so the default (auto) finds and preloads it.
    assert memory["cpu_allocator"] == "jemalloc", memory
    assert memory["cpu_allocator_library"].endswith("libjemalloc.so.2")
    assert memory["onednn_primitive_cache_capacity"] == 256 and memory["ideep_cache_capacity"] == 256
    assert memory["idle_release_s"] == IDLE_RELEASE_S and memory["pool_cap_mb"] == DEFAULT_POOL_MB
    assert "memory: allocator=jemalloc" in server.log()


def test_scheduler_rss_is_flat_under_mixed_sizes(server):
    scheduler_pid = server_processes(server.proc.pid)["scheduler"]
    before_mb = rss_mb(scheduler_pid)
    texts = load_texts(DEFAULT_TEXTS, None)
    sizes = [int(s) for s in DEFAULT_SIZES.split(",")]
    log = RssLog(server.proc.pid, interval=2.0).start()  # ten samples per window: medians that hold still
    try:
        stats = run_event_loop(mixed_load(server.base_url, texts, sizes, 8, WARMUP_S + MEASURED_S, seed=0), True)
    finally:
        log.stop()
    assert not stats.errors, stats.errors
    assert stats.requests > 20, stats.row()
    assert {"http", "scheduler", "detokenizer"} <= set(log.roles())
    g = growth(log.series("scheduler"), WARMUP_S, WINDOW_S, "scheduler")
    assert g is not None
    summary = f"scheduler RSS {g.baseline_mb:.0f} -> {g.final_mb:.0f} MB (peak {g.peak_mb:.0f}), {stats.row()}"
    print(summary)
    assert g.ratio <= SOAK_MAX_GROWTH, summary

    # Busy, the scheduler keeps freed pages as a pool; idle, it gives them back: within a few
    # seconds RSS is near where it started (plus oneDNN's cached shapes), well under the peak.
    wait_until(lambda: rss_mb(scheduler_pid) <= before_mb + 150, IDLE_RELEASE_S + 10, interval=0.5)
    idle_mb = rss_mb(scheduler_pid)
    assert idle_mb <= before_mb + 150 and idle_mb < g.peak_mb - 50, (before_mb, idle_mb, summary)
