"""Timing shared by the micro-benchmarks: one warm-up call, then the median of `repeats` calls."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first-call allocations and lazy initialisation stay out of the samples
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
