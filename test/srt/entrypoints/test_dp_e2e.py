"""--dp-size on the real server and Engine: replicas pinned to their cores, vectors equal to one
scheduler's, work spread over every replica (read from /metrics and the replicas' CPU time), a
replica's death failing requests fast, and a SIGTERM draining every replica."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import time

import numpy as np
import pytest
import requests

from test.helpers.kill_load import KillLoad
from test.helpers.procs import pids_by_name, running
from test.helpers.prom import parse, value
from test.helpers.server import ServerProcess
from test.helpers.texts import load_texts
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
LONG = "the quick brown fox jumps over the lazy dog " * 25  # ~226 tokens


@pytest.fixture(scope="module")
def dp_server():
    with ServerProcess("--dp-size", "2", "--max-batch-size", "8", "--graceful-timeout", "30") as s:
        yield s


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _allowed_cores(pid: int) -> list[int]:
    return sorted(os.sched_getaffinity(pid))


def _batches(server: ServerProcess) -> dict[str, float]:
    fams = parse(requests.get(server.base_url + "/metrics", timeout=10).text)
    return {rank: value(fams, "sglang_batch_size_count", dp_rank=rank) for rank in ("0", "1")}


def _embed(server: ServerProcess, texts: list[str], headers=None) -> np.ndarray:
    r = requests.post(server.base_url + "/v1/embeddings", json={"input": texts}, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [d["index"] for d in data] == list(range(len(texts)))
    return np.asarray([d["embedding"] for d in data], dtype=np.float32)


def test_each_replica_runs_on_its_own_cores_with_that_many_threads(dp_server):
    info = requests.get(dp_server.base_url + "/model_info", timeout=10).json()
    assert info["dp_size"] == 2 and [r["dp_rank"] for r in info["replicas"]] == [0, 1]
    cores = [r["cpu_cores"] for r in info["replicas"]]
    assert not set(cores[0]) & set(cores[1]), cores  # disjoint sets (2+ cores here)
    assert sorted(cores[0] + cores[1]) == sorted(os.sched_getaffinity(0))
    for replica in info["replicas"]:
        assert replica["device"] == "cpu" and replica["cpu_threads"] == len(replica["cpu_cores"])
    # The operating system agrees: each replica process may only run on its own cores.
    pids = pids_by_name(dp_server.children())
    assert _allowed_cores(pids["sglang-sched-0"]) == cores[0]
    assert _allowed_cores(pids["sglang-sched-1"]) == cores[1]
    log = dp_server.log()
    for rank in (0, 1):
        assert f"replica {rank}: cpu (cores " in log


def test_a_large_request_is_split_over_both_replicas_in_order_with_the_vectors_of_one_scheduler(
    dp_server, hardened_server
):
    texts = [t for t in load_texts() if len(t.split()) < 120][:12]
    before = _batches(dp_server)
    ours = _embed(dp_server, texts)  # one request of 12 inputs
    after = _batches(dp_server)
    assert after["0"] > before["0"] and after["1"] > before["1"], (before, after)
    # The same texts one at a time through a one-scheduler server (--dp-size 1, the shared fixture).
    ref = np.concatenate([_embed(hardened_server, [t], hardened_server.headers) for t in texts])
    np.testing.assert_allclose(ours, ref, atol=2e-5)


def test_concurrent_clients_keep_both_replicas_busy(dp_server):
    texts = [t for t in load_texts() if len(t.split()) < 120]  # within the 256-token context
    before = _batches(dp_server)

    def client(i: int) -> list[int]:
        with requests.Session() as sess:
            return [
                sess.post(
                    dp_server.base_url + "/v1/embeddings", json={"input": texts[(i * 7 + k) % len(texts)]}
                ).status_code
                for k in range(4)
            ]

    with cf.ThreadPoolExecutor(16) as pool:
        codes = [c for cs in pool.map(client, range(16)) for c in cs]
    assert codes == [200] * 64
    after = _batches(dp_server)
    for rank in ("0", "1"):
        assert after[rank] - before[rank] >= 4, (before, after)  # each replica ran a fair share of batches
    fams = parse(requests.get(dp_server.base_url + "/metrics", timeout=10).text)
    for rank in ("0", "1"):
        assert value(fams, "sglang_forward_duration_seconds_count", dp_rank=rank) == after[rank]
        assert value(fams, "sglang_batch_tokens_sum", dp_rank=rank) > 0
        assert value(fams, "sglang_queue_length", dp_rank=rank) >= 0


def test_a_hung_replica_gets_no_new_work_under_shortest_queue(dp_server):
    """A stopped replica holds what it has; every later request goes to the other and is answered."""
    hung = pids_by_name(dp_server.children())["sglang-sched-1"]
    os.kill(hung, signal.SIGSTOP)
    try:
        with cf.ThreadPoolExecutor(4) as pool:
            stuck = []
            for i in range(4):  # until one request lands on the stopped replica (ties take turns)
                stuck.append(pool.submit(_embed, dp_server, [f"stuck {i}"]))
                time.sleep(0.5)  # unanswered after 0.5 s: it is on the stopped replica
                if not stuck[-1].done():
                    break
            assert not stuck[-1].done(), "no request went to the stopped replica"
            before = _batches(dp_server)
            t0 = time.monotonic()
            for i in range(10):
                assert _embed(dp_server, [f"after {i}"]).shape[0] == 1
            assert time.monotonic() - t0 < 20
            after = _batches(dp_server)
            assert after["0"] - before["0"] >= 10 and after["1"] == before["1"], (before, after)
            os.kill(hung, signal.SIGCONT)
            assert stuck[-1].result(timeout=30).shape[0] == 1  # answered once the replica runs again
    finally:
        os.kill(hung, signal.SIGCONT)


def test_zz_sigterm_drains_every_replica_then_exits_0(dp_server):
    """Runs last in this module: it stops the shared server."""
    s = dp_server
    children = s.children()
    ipc_dir = s.ipc_dir()

    def one(i: int):
        # 16 long inputs each: enough work that the first requests are still running when the last arrive
        r = requests.post(s.base_url + "/v1/embeddings", json={"input": [f"{i} {LONG}"] * 16}, timeout=60)
        return r, time.monotonic()

    with cf.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, i) for i in range(6)]
        assert wait_until(lambda: s.in_flight() >= 6, 30), "the 6 requests never were all in flight"
        sig_time = time.monotonic()
        os.killpg(s.proc.pid, signal.SIGTERM)  # every process of the group at once, like systemd
        done = [f.result(timeout=60) for f in futures]
    for r, _ in done:
        assert r.status_code == 200, r.text
        assert len(r.json()["data"]) == 16
    assert max(t for _, t in done) > sig_time + 0.1, "nothing was in flight at SIGTERM"
    assert s.proc.wait(30) == 0
    assert wait_until(lambda: not running(children), 5.0), f"left running: {running(children)}"
    assert not os.path.exists(ipc_dir)
    assert "finishing in-flight requests" in open(s.log_path).read()


def test_two_workers_use_both_replicas_and_a_dead_replica_fails_requests_fast_then_exits_1():
    s = ServerProcess("--dp-size", "2", "--tokenizer-worker-num", "2", "--max-batch-size", "4")
    pids = pids_by_name(s.children())
    replicas = [pids["sglang-sched-0"], pids["sglang-sched-1"]]
    children = s.children()
    cpu_before = [_cpu_seconds(p) for p in replicas]
    load = KillLoad(s.base_url, lambda i: [f"{i} {LONG}"] * 2)
    load.start()
    try:
        # Every client answered once: both HTTP workers serve (a worker still starting its app holds
        # the connections the kernel gave it; those were reset, not answered 503, at a kill then).
        load.wait_running()
        # both replicas computed under two workers (each HTTP worker's router places on both)
        grown = lambda: all(_cpu_seconds(p) - b > 0.2 for p, b in zip(replicas, cpu_before))  # noqa: E731
        assert wait_until(grown, 30, interval=0.1), (cpu_before, [_cpu_seconds(p) for p in replicas])
        k = load.mark_kill()
        os.kill(replicas[1], signal.SIGKILL)
        assert s.proc.wait(15) == 1
    finally:
        load.join()
        s.stop()
    assert all(o == 200 for t0, t1, o in load.results if t1 < k), "requests failed before the kill"
    in_flight = [(t1 - k, o) for t0, t1, o in load.in_flight_at_kill()]
    print(f"\nin flight at the kill: {[(o, round(dt, 3)) for dt, o in in_flight]}")
    assert any(o == 503 for _, o in in_flight)
    for dt, outcome in in_flight:
        assert outcome in (200, 503), outcome  # answered, never dropped or hung
        assert dt < 1.0, f"an in-flight request took {dt:.2f} s to fail"
    assert wait_until(lambda: not running(children), 5.0), f"orphans left: {running(children)}"
    log = open(s.log_path).read()
    assert "sglang-scheduler-1 exited unexpectedly (killed by SIGKILL" in log
    assert "exiting with status 1" in log


def test_engine_dp2_spreads_a_10000_text_call_over_both_replicas_in_order(tmp_path_factory):
    import sglang
    from test.helpers.tiny_models import WORDS, build_tiny_bert

    model = build_tiny_bert(str(tmp_path_factory.mktemp("tiny-bert-dp")), st_pooling="mean")
    texts = [" ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 2 + i % 7)) + f" {i}" for i in range(10_000)]
    with sglang.Engine(model_path=model, dp_size=2) as engine:
        assert [r["dp_rank"] for r in engine.get_model_info()["replicas"]] == [0, 1]
        router = engine.model().tm.router  # the Engine's own tokenizer manager's: count what each replica is sent
        inputs, send_part = [0, 0], router._send_part

        def counting_send(part, reqs):
            inputs[part.rank] += len(reqs)
            return send_part(part, reqs)

        router._send_part = counting_send
        out = engine.encode(texts)
        sample = list(range(0, 10_000, 997))
        singles = [engine.encode(texts[i])["embedding"] for i in sample]
    # >= : a part a full replica refused is sent again to the other one.
    assert len(out) == 10_000 and sum(inputs) >= 10_000 and min(inputs) > 0, inputs
    assert abs(inputs[0] - inputs[1]) < 0.2 * 10_000, inputs  # both replicas took a real share
    for i, single in zip(sample, singles):
        np.testing.assert_allclose(out[i]["embedding"], single, atol=1e-5)


@pytest.mark.gpu
def test_cuda_replicas_run_on_their_own_gpus():
    import torch

    from sglang.srt.model_executor.placement import gpu_for_replica

    count = torch.cuda.device_count()
    with ServerProcess("--dp-size", "2", "--device", "cuda") as s:
        info = requests.get(s.base_url + "/model_info", timeout=10).json()
        expected = [f"cuda:{gpu_for_replica(rank, 0, count)}" for rank in (0, 1)]
        assert [r["device"] for r in info["replicas"]] == expected
        texts = [t for t in load_texts() if len(t.split()) < 120][:32]
        before = _batches(s)
        _embed(s, texts)
        after = _batches(s)
        assert after["0"] > before["0"] and after["1"] > before["1"]
