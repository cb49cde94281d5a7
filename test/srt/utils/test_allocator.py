"""The scheduler's allocator set-up: the plan, the child's environment, what really gets loaded,
and that the glibc fallback's trims give back what glibc would keep; the OpenMP spin count it gets."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from sglang.srt.entrypoints.engine_processes import scheduler_environment
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import allocator
from sglang.srt.utils.allocator import (
    IDEEP_CACHE_CAPACITY,
    IDEEP_CACHE_VAR,
    ONEDNN_CACHE_CAPACITY,
    ONEDNN_CACHE_VAR,
    OPENMP_SPINCOUNT,
    OPENMP_WAIT_VARS,
    AllocatorPlan,
    SchedulerMemory,
    child_environment,
    find_allocator,
    loaded_allocator,
    openmp_wait_env,
    plan_allocator,
)


def _installed(monkeypatch, *names: str) -> None:
    monkeypatch.setattr(allocator, "find_allocator", lambda name: f"/opt/lib/{name}.so" if name in names else None)


def test_auto_prefers_jemalloc_then_tcmalloc_then_glibc(monkeypatch):
    _installed(monkeypatch, "jemalloc", "tcmalloc")
    plan = plan_allocator("auto", {})
    assert (plan.allocator, plan.library) == ("jemalloc", "/opt/lib/jemalloc.so")
    assert plan.env == {
        "LD_PRELOAD": "/opt/lib/jemalloc.so",
        "MALLOC_CONF": allocator.JEMALLOC_CONF,
        ONEDNN_CACHE_VAR: str(ONEDNN_CACHE_CAPACITY),
        IDEEP_CACHE_VAR: str(IDEEP_CACHE_CAPACITY),
    }
    _installed(monkeypatch, "tcmalloc")
    plan = plan_allocator("auto", {})
    assert plan.allocator == "tcmalloc" and "MALLOC_CONF" not in plan.env
    _installed(monkeypatch)
    plan = plan_allocator("auto", {})
    assert plan.allocator == "glibc" and "LD_PRELOAD" not in plan.env
    assert "libjemalloc2" in plan.note  # the fallback says how to get the better one


def test_operator_settings_win_and_preloads_are_kept(monkeypatch):
    _installed(monkeypatch, "jemalloc")
    env = {"LD_PRELOAD": "/x/libfoo.so", "MALLOC_CONF": "narenas:2", ONEDNN_CACHE_VAR: "64", IDEEP_CACHE_VAR: "32"}
    plan = plan_allocator("auto", env)
    assert plan.env == {"LD_PRELOAD": "/opt/lib/jemalloc.so /x/libfoo.so"}


def test_off_changes_nothing_and_glibc_preloads_nothing(monkeypatch):
    _installed(monkeypatch, "jemalloc")
    assert plan_allocator("off", {}) == AllocatorPlan("off", "off")
    plan = plan_allocator("glibc", {})
    assert plan.allocator == "glibc"
    assert plan.env == {ONEDNN_CACHE_VAR: str(ONEDNN_CACHE_CAPACITY), IDEEP_CACHE_VAR: str(IDEEP_CACHE_CAPACITY)}


def test_an_allocator_asked_for_by_name_must_be_installed(monkeypatch):
    monkeypatch.setattr("sglang.srt.server_args.find_allocator", lambda name: None)
    with pytest.raises(ConfigError, match="--cpu-allocator tcmalloc: the library is not installed"):
        ServerArgs(cpu_allocator="tcmalloc")
    with pytest.raises(ConfigError, match="--cpu-allocator must be one of"):
        ServerArgs(cpu_allocator="mimalloc")
    ServerArgs(cpu_allocator="glibc")


def test_pool_size_is_a_flag_and_an_environment_variable():
    from sglang.cli import parse_serve_args

    assert parse_serve_args([], environ={}).cpu_pool_mb == allocator.DEFAULT_POOL_MB
    assert parse_serve_args(["--cpu-pool-mb", "0"], environ={}).cpu_pool_mb == 0
    assert parse_serve_args([], environ={"SGLANG_CPU_POOL_MB": "512"}).cpu_pool_mb == 512
    with pytest.raises(ConfigError, match="--cpu-pool-mb must be >= 0"):
        parse_serve_args(["--cpu-pool-mb", "-1"], environ={})


def test_child_environment_is_restored():
    os.environ["SGLANG_TEST_KEEP"] = "1"
    with child_environment({"SGLANG_TEST_KEEP": "2", "SGLANG_TEST_NEW": "3"}):
        assert os.environ["SGLANG_TEST_KEEP"] == "2" and os.environ["SGLANG_TEST_NEW"] == "3"
    assert os.environ.pop("SGLANG_TEST_KEEP") == "1" and "SGLANG_TEST_NEW" not in os.environ


def _report(plan: AllocatorPlan, conn) -> None:
    memory = SchedulerMemory(plan)
    conn.send((loaded_allocator(), memory.info(), memory.warning))


def _in_child(target, *args, env=None, timeout: float = 60.0):
    """Run `target(*args, conn)` in a spawned process (with `env` added to its environment); its answer."""
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, writer))
    with child_environment(env or {}):
        proc.start()
    try:
        assert reader.poll(timeout)
        return reader.recv()
    finally:
        proc.join(10)


def _spawn_with(plan: AllocatorPlan):
    return _in_child(_report, plan, env=plan.env)


@pytest.mark.slow
def test_jemalloc_is_installed_and_preloaded_into_the_child():
    # The Makefile installs libjemalloc2 (apt); the server's default depends on it being there.
    assert find_allocator("jemalloc") is not None, "libjemalloc2 is missing: run make install as root"
    plan = plan_allocator("auto", {})
    loaded, info, warning = _spawn_with(plan)
    assert loaded == "jemalloc" and warning is None
    assert info == {
        "cpu_allocator": "jemalloc",
        "cpu_allocator_library": plan.library,
        "malloc_trim_after_tokens": None,
        "idle_release_s": allocator.IDLE_RELEASE_S,
        "pool_cap_mb": allocator.DEFAULT_POOL_MB,
        "onednn_primitive_cache_capacity": ONEDNN_CACHE_CAPACITY,
        "ideep_cache_capacity": IDEEP_CACHE_CAPACITY,
    }
    assert loaded_allocator() is None  # the launching process itself stays on glibc


@pytest.mark.slow
def test_glibc_fallback_trims_and_a_failed_preload_is_reported():
    loaded, info, warning = _spawn_with(plan_allocator("glibc", {}))
    assert loaded is None and warning is None
    assert info["cpu_allocator"] == "glibc" and info["malloc_trim_after_tokens"] == allocator.GLIBC_TRIM_AFTER_TOKENS
    assert info["idle_release_s"] == allocator.IDLE_RELEASE_S and info["pool_cap_mb"] is None
    broken = AllocatorPlan(
        "jemalloc", "jemalloc", "/nonexistent/libjemalloc.so.2", {"LD_PRELOAD": "/nonexistent/libjemalloc.so.2"}
    )
    loaded, info, warning = _spawn_with(broken)
    assert loaded is None and info["cpu_allocator"] == "glibc" and "could not be preloaded" in warning
    assert info["cpu_allocator_library"] is None


def _churn(trim: bool, conn) -> None:
    """Activation-like buffers of ever-new sizes (up to ~30 MB, under glibc's largest mmap threshold),
    with each batch's small result outliving the batch, as mixed-size batches allocate them."""
    import collections
    import ctypes
    import random

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    memory = SchedulerMemory(AllocatorPlan("glibc", "glibc"))
    rng = random.Random(0)

    def rss_mb() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))

    before, results = rss_mb(), collections.deque()
    for _ in range(40):
        tokens = rng.randint(50, 5000)
        activations = [libc.malloc(tokens * width * 4) for width in (384, 1536, 1152)]
        for buf, width in zip(activations, (384, 1536, 1152)):
            libc.memset(buf, 1, tokens * width * 4)  # touched, as a forward pass does
        results.append(libc.malloc(tokens * 384 * 4))
        if len(results) > 4:
            libc.free(results.popleft())
        for buf in activations:
            libc.free(buf)
        if trim:
            memory.after_batch(tokens)
    conn.send(rss_mb() - before)


@pytest.mark.slow
def test_glibc_keeps_freed_activation_memory_unless_trimmed():
    kept, trimmed = _in_child(_churn, False), _in_child(_churn, True)
    assert kept > 40, kept  # what the issue saw: glibc keeps the pages of freed buffers
    assert trimmed < 10 and trimmed < kept / 4, (trimmed, kept)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def _free_mixed_buffers() -> None:
    """Touch and free buffers of 12 sizes (2-24 MB each, 156 MB): one batch's activations."""
    import numpy as np

    buffers = [np.ones(k * 250_000) for k in range(1, 13)]
    del buffers


def _pool(plan: AllocatorPlan, conn) -> None:
    """Freed buffers of many sizes: what jemalloc keeps while busy, and what release() gives back."""
    import numpy as np

    memory = SchedulerMemory(plan, pool_mb=256)
    steps = {"start": _rss_mb()}
    _free_mixed_buffers()
    memory.after_batch(5_000)
    steps["busy"] = _rss_mb()  # under the cap: kept for the next batch
    steps["idle_release_s"] = memory.idle_release_s()
    steps["releases_busy"] = memory.releases
    memory.release()  # what the loop does after IDLE_RELEASE_S without work
    steps["idle"] = _rss_mb()
    steps["after_release"] = memory.idle_release_s()
    big = [np.ones(10_000_000) for _ in range(8)]  # 640 MB: over the cap (256 MB in the test)
    del big
    memory.after_batch(5_000)
    steps["over_cap"] = _rss_mb()
    steps["releases"] = memory.releases
    no_pool = SchedulerMemory(plan, pool_mb=0)  # --cpu-pool-mb 0: freed pages go back after every batch
    _free_mixed_buffers()
    no_pool.after_batch(5_000)
    steps["no_pool"] = _rss_mb()
    steps["no_pool_releases"] = no_pool.releases
    conn.send(steps)


@pytest.mark.slow
def test_jemalloc_keeps_a_pool_while_busy_and_gives_it_back_when_idle_or_over_its_cap():
    plan = plan_allocator("jemalloc", {})
    steps = _in_child(_pool, plan, env=plan.env)
    assert steps["busy"] - steps["start"] > 120, steps  # the freed 156 MB stayed mapped: no faults next time
    assert steps["idle_release_s"] == allocator.IDLE_RELEASE_S and steps["releases_busy"] == 0, steps
    assert steps["idle"] - steps["start"] < 30, steps  # given back
    assert steps["after_release"] is None, steps  # nothing held: the loop waits without a deadline
    assert steps["over_cap"] - steps["start"] < 30 and steps["releases"] == 2, steps  # the cap bounds the pool
    assert steps["no_pool"] - steps["start"] < 30 and steps["no_pool_releases"] == 1, steps


@pytest.mark.slow
def test_glibc_gives_memory_back_after_small_batches_once_idle():
    memory = SchedulerMemory(AllocatorPlan("glibc", "glibc"))
    memory.after_batch(allocator.GLIBC_TRIM_AFTER_TOKENS)  # a large batch: trimmed at once
    assert memory.releases == 1 and memory.idle_release_s() is None
    memory.after_batch(10)  # a small one: trimmed when the scheduler next sits idle
    assert memory.releases == 1 and memory.idle_release_s() == allocator.IDLE_RELEASE_S
    memory.release()
    assert memory.releases == 2 and memory.idle_release_s() is None


def _openmp_vars(conn) -> None:
    conn.send({var: os.environ.get(var) for var in OPENMP_WAIT_VARS})


def test_scheduler_gets_openmp_spin_count_unless_the_operator_set_a_wait_policy(monkeypatch):
    for var in OPENMP_WAIT_VARS:
        monkeypatch.delenv(var, raising=False)
    plan = plan_allocator("glibc", {})
    env = scheduler_environment(plan)
    assert env["GOMP_SPINCOUNT"] == str(OPENMP_SPINCOUNT) and env[ONEDNN_CACHE_VAR] == str(ONEDNN_CACHE_CAPACITY)
    assert _in_child(_openmp_vars, env=env) == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": str(OPENMP_SPINCOUNT)}
    assert "GOMP_SPINCOUNT" not in os.environ  # only the child got it
    assert scheduler_environment(plan_allocator("off", {})) == {"GOMP_SPINCOUNT": str(OPENMP_SPINCOUNT)}

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the operator's policy: no spin count of ours
    env = scheduler_environment(plan)
    assert "GOMP_SPINCOUNT" not in env
    assert _in_child(_openmp_vars, env=env) == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None}

    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")  # the operator's spin count wins
    assert _in_child(_openmp_vars, env=scheduler_environment(plan)) == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "0"}
    assert openmp_wait_env({"OMP_WAIT_POLICY": "PASSIVE"}) == {} and openmp_wait_env({}) == {
        "GOMP_SPINCOUNT": str(OPENMP_SPINCOUNT)
    }
