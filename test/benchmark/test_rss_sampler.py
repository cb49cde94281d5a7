"""The soak benchmark's RSS sampling: which processes it finds, and how it judges growth."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
from rss_sampler import RssLog, cpu_seconds, growth, server_processes  # noqa: E402

from test.helpers.waiting import wait_until  # noqa: E402


def test_growth_compares_window_medians_after_the_warm_up():
    rising = [(t, 100.0 + t) for t in range(0, 60, 10)]  # the warm-up: caches and pools still filling
    after = [(60, 200.0), (70, 500.0), (80, 200.0), (90, 200.0)]  # the first window after it, one spike
    series = rising + after + [(t, 220.0) for t in range(100, 160, 10)]
    g = growth(series, warmup=60, window=30)
    assert g.baseline_mb == 200.0  # after the warm-up, not its rising end; the spike is one sample of four
    assert g.final_mb == 220.0 and g.peak_mb == 500.0
    assert g.ratio == pytest.approx(0.10)
    assert growth([], 60, 30) is None


# A stand-in server: a session leader with children named like the real ones, plus a helper
# process (a compiler, say) that must not be counted.
_FAKE_SERVER = textwrap.dedent("""
    import ctypes, multiprocessing as mp, subprocess, time

    def child(name):
        ctypes.CDLL("libc.so.6").prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME, as the server does
        time.sleep(60)

    if __name__ == "__main__":
        ctx = mp.get_context("fork")
        # the names a --dp-size 2 server gives its processes (scheduler_process.py, http_worker.py)
        for name in ("sglang-sched-0", "sglang-sched-1", "sglang-detokenizer", "sglang-http-1"):
            ctx.Process(target=child, args=(name,), daemon=True).start()
        subprocess.Popen(["sleep", "60"])
        print("ready", flush=True)
        time.sleep(60)
""")


def test_server_processes_are_found_by_session_and_named_by_role():
    proc = subprocess.Popen(
        [sys.executable, "-c", _FAKE_SERVER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        expected = {"http", "scheduler", "scheduler-2", "detokenizer", "http-1"}
        assert wait_until(lambda: set(server_processes(proc.pid)) == expected, 10), server_processes(proc.pid)
        log = RssLog(proc.pid, interval=0.05).start()
        wait_until(lambda: len(log.samples) >= 3, 5)
        log.stop()
        assert set(log.roles()) == expected
        assert all(mb > 1 for _, mb in log.series("scheduler"))
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(5)


def test_cpu_seconds_counts_this_process_work_and_not_its_sleep():
    import time

    before, start = cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - start < 0.3:
        pass
    time.sleep(0.2)
    used = cpu_seconds(os.getpid()) - before
    assert 0.2 <= used < 0.45, used
    assert cpu_seconds(2**22 + 12345) is None  # no such process
