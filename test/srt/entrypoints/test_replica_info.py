"""How the server process reports its --dp-size replicas (/model_info, the start-up log)."""

from __future__ import annotations

from sglang.srt.configs.model_info import ReplicaInfo
from sglang.srt.entrypoints.engine_processes import describe_replica, format_cores, merge_replica_infos
from test.helpers.model_info import make_model_info


def test_every_replica_is_listed_under_replica_zeros_model_info():
    infos = [
        make_model_info(device="cpu", cpu_threads=r + 1, replicas=(ReplicaInfo(dp_rank=r, device="cpu"),))
        for r in range(3)
    ]
    merged = merge_replica_infos(infos)
    assert merged.dp_size == 3 and [r.dp_rank for r in merged.replicas] == [0, 1, 2]
    assert merged.cpu_threads == 1  # the top-level fields are replica 0's


def test_cores_and_devices_read_the_way_taskset_writes_them():
    assert format_cores((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert format_cores((3,)) == "3"
    cpu = ReplicaInfo(dp_rank=1, device="cpu", cpu_cores=(2, 3), cpu_threads=2)
    assert describe_replica(cpu) == "cpu (cores 2-3, 2 torch threads)"
    assert describe_replica(ReplicaInfo(dp_rank=1, device="cuda:1")) == "cuda:1"
