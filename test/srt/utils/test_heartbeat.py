"""Heartbeats: a stage is stalled when it stops beating, or holds work and finishes none."""

from __future__ import annotations

import time

from sglang.srt.utils.heartbeat import Heartbeat, HeartbeatReader, heartbeat_interval


def test_idle_busy_and_silent_stages(tmp_path):
    sched = Heartbeat(str(tmp_path), "scheduler")
    detok = Heartbeat(str(tmp_path), "detokenizer")
    reader = HeartbeatReader(str(tmp_path))
    now = time.monotonic()
    assert {b.name for b in reader.read()} == {"scheduler", "detokenizer"}
    assert reader.stalled(5.0, now=now) == []
    # Nobody beats here (no thread): 6 s on, both are stalled by the missing heartbeat alone.
    silent = reader.stalled(5.0, now=now + 6)
    assert {b.name for b, _ in silent} == {"scheduler", "detokenizer"}
    assert all("has not answered" in b.describe(now + 6) for b, _ in silent)
    sched.set_pending(8)  # picks work up: its progress clock starts now
    time.sleep(1.0)  # Heartbeat reads the real clock: its progress clock ages past 0.8 s
    sched.beat()  # alive, but has finished nothing
    detok.beat()  # alive and idle
    stalled = reader.stalled(0.8)
    assert [b.name for b, _ in stalled] == ["scheduler"]
    assert "made no progress" in stalled[0][0].describe(time.monotonic())
    sched.progressed(0)
    assert reader.stalled(0.8) == []
    assert reader.stalled(0, now=now + 100) == []  # 0: the watchdog is off
    reader.close()


def test_a_started_heartbeat_keeps_beating(tmp_path):
    hb = Heartbeat(str(tmp_path), "scheduler", interval=0.05).start()
    reader = HeartbeatReader(str(tmp_path))
    time.sleep(0.3)  # six beat intervals: the last beat must still be fresh
    (beat,) = reader.read()
    assert time.monotonic() - beat.beat < 0.2 and beat.pending == 0
    assert hb.name == "scheduler"
    assert heartbeat_interval(2.0) == 0.5 and heartbeat_interval(30) == 1.0 and heartbeat_interval(0) == 1.0
