"""Where one scheduler replica runs (`--dp-size`): its GPU, or its CPU cores and threads.

The server process plans the CPU core sets (replica_slots.py: it knows the cores the whole server
may use); each replica resolves its device and applies its placement itself, before torch creates
a CUDA context or an OpenMP thread pool in that process.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

import torch

from sglang.srt.errors import ConfigError
from sglang.srt.model_executor.replica_slots import ReplicaSlot, available_cores

logger = logging.getLogger(__name__)


def gpu_for_replica(dp_rank: int, base_gpu_id: int, gpu_count: int) -> int:
    """Replica i uses GPU base_gpu_id + i; with fewer GPUs, replicas share them in turn."""
    if base_gpu_id >= gpu_count:
        raise ConfigError(f"--base-gpu-id {base_gpu_id} names no GPU: torch sees {gpu_count}")
    return base_gpu_id + dp_rank % (gpu_count - base_gpu_id)


def replicas_sharing_gpu(dp_rank: int, dp_size: int, base_gpu_id: int, gpu_count: int) -> int:
    """How many replicas (this one included) run on this replica's GPU."""
    mine = gpu_for_replica(dp_rank, base_gpu_id, gpu_count)
    return sum(gpu_for_replica(r, base_gpu_id, gpu_count) == mine for r in range(dp_size))


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(requested)


def configure_cpu_threads(requested: Optional[int]) -> int:
    """Intra-op threads: the user's number, else every core this process may use."""
    threads = requested or len(available_cores())
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


@dataclass(frozen=True)
class Placement:
    """What a replica ended up with (reported in /model_info)."""

    device: torch.device
    cpu_cores: Optional[tuple[int, ...]] = None
    memory_fraction: Optional[float] = None  # CUDA: this replica's share of --mem-fraction-static


def place_replica(
    slot: ReplicaSlot, device: str, base_gpu_id: int, cpu_threads: Optional[int], mem_fraction: float
) -> Placement:
    """Pin this process to its replica's GPU or cores; call before any model work."""
    resolved = resolve_device(device)
    if resolved.type == "cuda":
        count = torch.cuda.device_count()
        gpu = gpu_for_replica(slot.dp_rank, base_gpu_id, count)
        torch.cuda.set_device(gpu)  # before anything allocates: the context is created on this GPU
        sharing = replicas_sharing_gpu(slot.dp_rank, slot.dp_size, base_gpu_id, count)
        fraction = mem_fraction / sharing  # replicas on one GPU split the cap between them
        torch.cuda.set_per_process_memory_fraction(fraction, gpu)
        return Placement(torch.device("cuda", gpu), memory_fraction=fraction)
    if resolved.type == "cpu":
        if slot.cpu_cores is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, slot.cpu_cores)  # OpenMP threads inherit it when they start
        configure_cpu_threads(cpu_threads)
        return Placement(resolved, cpu_cores=tuple(available_cores()))
    return Placement(resolved)
