"""Where each --dp-size replica runs: core sets on CPU, GPUs on CUDA. (That a CPU replica really is
pinned to its cores, with that many threads, is checked on the running server in test_dp_e2e.py.)"""

from __future__ import annotations

import multiprocessing as mp

import pytest

from sglang.srt.errors import ConfigError
from sglang.srt.model_executor.placement import gpu_for_replica, place_replica, replicas_sharing_gpu
from sglang.srt.model_executor.replica_slots import ReplicaSlot, plan_cpu_cores, plan_slots


def test_cores_are_split_into_contiguous_sets_of_nearly_equal_size():
    assert plan_cpu_cores([0, 1], 2) == [(0,), (1,)]
    assert plan_cpu_cores(range(8), 2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert plan_cpu_cores([2, 3, 4, 5, 6], 2) == [(2, 3, 4), (5, 6)]  # taskset -c 2-6
    assert plan_cpu_cores([0, 1], 3) == [(0,), (1,), (0,)]  # fewer cores than replicas: shared in turn
    assert plan_cpu_cores([7], 1) == [(7,)]


def test_one_replica_keeps_every_core_and_several_get_their_own():
    assert plan_slots(1) == [ReplicaSlot()]
    slots = plan_slots(2, cores=[0, 1, 2, 3])
    assert [(s.dp_rank, s.dp_size, s.cpu_cores) for s in slots] == [(0, 2, (0, 1)), (1, 2, (2, 3))]


def test_gpus_from_base_gpu_id_shared_round_robin_when_fewer():
    assert [gpu_for_replica(r, 0, 4) for r in range(4)] == [0, 1, 2, 3]
    assert [gpu_for_replica(r, 2, 4) for r in range(4)] == [2, 3, 2, 3]
    assert [gpu_for_replica(r, 0, 1) for r in range(2)] == [0, 0]  # dp 2 on one GPU
    assert replicas_sharing_gpu(0, 2, 0, 1) == 2 and replicas_sharing_gpu(0, 2, 0, 2) == 1
    assert replicas_sharing_gpu(0, 3, 0, 2) == 2 and replicas_sharing_gpu(1, 3, 0, 2) == 1
    with pytest.raises(ConfigError, match="--base-gpu-id 2"):
        gpu_for_replica(0, 2, 2)


def _place_in_child(slot, device, threads, out):
    import torch

    placement = place_replica(slot, device, 0, threads, 0.9)
    out.put((str(placement.device), torch.cuda.current_device(), placement.memory_fraction))


def _run_placed(slot, device, threads=None):
    """Place a replica in a fresh process (CUDA is set up once per process)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_place_in_child, args=(slot, device, threads, out))
    p.start()
    try:
        return out.get(timeout=120)
    finally:
        p.join(30)


@pytest.mark.gpu
def test_a_cuda_replica_runs_on_its_gpu_with_its_share_of_the_memory_cap():
    import torch

    count = torch.cuda.device_count()
    device, current, fraction = _run_placed(ReplicaSlot(1, 2), "cuda")
    gpu = gpu_for_replica(1, 0, count)  # GPU 1, or GPU 0 shared by both replicas on a one-GPU machine
    assert device == f"cuda:{gpu}" and current == gpu
    assert fraction == pytest.approx(0.9 / replicas_sharing_gpu(1, 2, 0, count))
