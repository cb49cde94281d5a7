"""Run one request against a server while watching it: `/health` latency on the side and the HTTP
process's RSS (before, peak, a moment after), for the hostile-input tests and probes."""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


@dataclass
class Watch:
    result: Any = None
    elapsed_s: float = 0.0
    health_max_s: float = 0.0
    health_checks: int = 0
    rss_before_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_after_mb: float = 0.0
    health_failures: list = field(default_factory=list)

    @property
    def peak_growth_mb(self) -> float:
        return self.rss_peak_mb - self.rss_before_mb

    @property
    def growth_mb(self) -> float:
        return self.rss_after_mb - self.rss_before_mb

    def summary(self) -> str:
        return (
            f"{self.elapsed_s:.2f} s, /health max {self.health_max_s * 1000:.0f} ms over {self.health_checks}, "
            f"RSS {self.rss_before_mb:.0f} MB -> peak +{self.peak_growth_mb:.0f} MB, after +{self.growth_mb:.0f} MB"
        )


def tokenize_seconds(base_url: str, headers: Optional[dict] = None) -> float:
    """The server's total time spent validating and tokenizing requests (every HTTP worker's,
    from /metrics): the difference around a request is that request's share."""
    req = urllib.request.Request(base_url + "/metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    name = "sglang_tokenization_duration_seconds_sum"
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def watched(base_url: str, pid: int, send: Callable[[], Any], settle_s: float = 1.0) -> Watch:
    """`send()`'s result with the measurements taken while it ran (RSS `after` is read `settle_s`
    after it returned, the peak sampled every 10 ms meanwhile)."""
    w = Watch(rss_before_mb=rss_mb(pid))
    w.rss_peak_mb = w.rss_before_mb
    done = threading.Event()

    def sample_rss() -> None:
        while not done.is_set():
            w.rss_peak_mb = max(w.rss_peak_mb, rss_mb(pid))
            time.sleep(0.01)

    def poll_health() -> None:
        while not done.is_set():
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(base_url + "/health", timeout=10) as r:
                    r.read()
            except Exception as e:  # noqa: BLE001 - recorded, judged by the caller
                w.health_failures.append(repr(e))
            w.health_max_s = max(w.health_max_s, time.monotonic() - t0)
            w.health_checks += 1
            time.sleep(0.05)

    threads = [threading.Thread(target=sample_rss, daemon=True), threading.Thread(target=poll_health, daemon=True)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    try:
        w.result = send()
    finally:
        w.elapsed_s = time.monotonic() - t0
        done.set()
        for t in threads:
            t.join(15)
    time.sleep(settle_s)
    w.rss_after_mb = rss_mb(pid)
    return w
