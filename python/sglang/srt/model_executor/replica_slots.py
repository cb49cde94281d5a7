"""Which replicas the server runs (`--dp-size`) and the CPU cores each may use.

Planned in the server process, which must not import torch (the HTTP process of a text model
stays torch-free), and handed to each scheduler replica; placement.py applies a slot there.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional, Sequence

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaSlot:
    """One replica's identity and, on CPU, the cores the server process gave it."""

    dp_rank: int = 0
    dp_size: int = 1
    cpu_cores: Optional[tuple[int, ...]] = None  # None: every core this process may use


def available_cores() -> list[int]:
    """The cores this process may run on (taskset, container CPU sets), in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def plan_cpu_cores(cores: Sequence[int], dp_size: int) -> list[tuple[int, ...]]:
    """Split `cores` into `dp_size` contiguous sets whose sizes differ by at most one.

    With fewer cores than replicas each replica gets one core and the cores are shared in turn.
    """
    cores = list(cores)
    if dp_size <= len(cores):
        base, extra = divmod(len(cores), dp_size)
        out, start = [], 0
        for rank in range(dp_size):
            size = base + (1 if rank < extra else 0)
            out.append(tuple(cores[start : start + size]))
            start += size
        return out
    return [(cores[rank % len(cores)],) for rank in range(dp_size)]


def plan_slots(dp_size: int, cores: Optional[Sequence[int]] = None) -> list[ReplicaSlot]:
    """The server's replicas; with one replica the core set is left alone (every core)."""
    if dp_size == 1:
        return [ReplicaSlot()]
    cores = available_cores() if cores is None else list(cores)
    if dp_size > len(cores):
        logger.warning("--dp-size %d with %d CPU cores: replicas that run on the CPU share cores", dp_size, len(cores))
    sets = plan_cpu_cores(cores, dp_size)
    return [ReplicaSlot(rank, dp_size, sets[rank]) for rank in range(dp_size)]
