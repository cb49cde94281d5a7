"""The scheduler's own metrics: its queue and the batches it runs, recorded where they happen.

Written by the scheduler process itself (into the server's multiprocess directory, see
prometheus.py), so the queue gauge is current even when no result is on its way (aborts,
disconnects, an idle server) and a batch is counted once however many HTTP workers it served.
Every series carries the served model's name as `model` (as the HTTP side's do), plus `labels`:
further constant labels of this scheduler (its data-parallel rank).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.metrics.prometheus import Gauge, Histogram, Registry
from sglang.srt.metrics.server_metrics import DURATION_BUCKETS

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
BATCH_TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


class SchedulerMetrics:
    def __init__(self, model: str, labels: Optional[dict[str, str]] = None) -> None:
        if not model:
            raise ValueError("SchedulerMetrics needs the served model's name (its `model` label)")
        self.labels = {"model": model, **{k: str(v) for k, v in (labels or {}).items()}}
        c = self.labels
        self.registry = Registry()
        r = self.registry.collectors
        self.queue_length = Gauge(
            "sglang_queue_length", "Inputs waiting in the scheduler queue now.", registry=r, constant=c
        )
        self.batch_size = Histogram(
            "sglang_batch_size", "Inputs per forward pass.", BATCH_SIZE_BUCKETS, registry=r, constant=c
        )
        self.batch_tokens = Histogram(
            "sglang_batch_tokens", "Tokens per forward pass.", BATCH_TOKEN_BUCKETS, registry=r, constant=c
        )
        self.forward_duration = Histogram(
            "sglang_forward_duration_seconds", "Forward-pass time per batch.", DURATION_BUCKETS, registry=r, constant=c
        )

    def observe_queue(self, queue_length: int) -> None:
        self.queue_length.set(queue_length)

    def observe_batch(self, batch_size: int, batch_tokens: int, forward_time: float = 0.0) -> None:
        self.batch_size.observe(batch_size)
        self.batch_tokens.observe(batch_tokens)
        self.forward_duration.observe(forward_time)
