"""The soak benchmark's verdict: which processes it judges, over which window, and its flags."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
from bench_soak import parse_args, verdicts  # noqa: E402
from rss_sampler import RssLog  # noqa: E402


def _two_valued_log() -> RssLog:
    """A flat scheduler whose samples take two values, busy (1,000 MB) and just purged (600 MB),
    with more purged samples in the first minute after the warm-up than later: what a decoder's
    scheduler looks like. The HTTP process grows, but only schedulers are judged."""
    log = RssLog(server_pid=0)
    purged_at = {130, 140, 150, 160, 200, 260, 330, 400, 470}
    for t in range(0, 490, 10):
        log.samples.append((float(t), {"http": 300.0 + t, "scheduler": 600.0 if t in purged_at else 1000.0}))
    return log


def test_a_flat_two_valued_scheduler_passes_on_two_minute_windows_not_one():
    log = _two_valued_log()
    one_minute, ok_one = verdicts(log, warmup=120, max_growth=0.15, window=60)
    two_minutes, ok_two = verdicts(log, warmup=120, max_growth=0.15, window=120)
    scheduler = {g.role: g for g in two_minutes}["scheduler"]
    assert not ok_one and {g.role: g for g in one_minute}["scheduler"].ratio > 0.15  # the noise
    assert ok_two and scheduler.baseline_mb == scheduler.final_mb == 1000.0
    assert {g.role for g in two_minutes} == {"http", "scheduler"}


def test_no_scheduler_found_is_a_failure():
    log = RssLog(server_pid=0, samples=[(float(t), {"http": 300.0}) for t in range(0, 300, 10)])
    assert verdicts(log, warmup=60, max_growth=0.15, window=60)[1] is False


def test_the_window_must_fit_the_run():
    assert parse_args([]).window == 120.0
    assert parse_args(["--duration", "240"]).window == 120.0
    with pytest.raises(SystemExit):
        parse_args(["--duration", "180"])  # two minutes at each end would overlap
    with pytest.raises(SystemExit):
        parse_args(["--window", "5"])  # fewer than one sample per window
