"""Memory set-up of the scheduler process: which malloc it runs on, and how much oneDNN may cache.

Why (docs/cpu.md, "Memory"): on CPU nearly every batch has a token count of its own, so it
allocates activation buffers of new sizes, megabytes to hundreds of megabytes each. glibc's malloc
serves them from its heap once its mmap threshold has adapted upward after the first large free,
and keeps the pages they leave behind: under mixed-size traffic the scheduler grew from 350 MB to
3 GB in seven minutes, almost all of it free memory that glibc never returned. Besides, oneDNN
caches one matmul primitive per shape (about 0.6 MB each on AVX2, 1,024 of them by default: four
per token count for a BERT-style model), which alone can hold 600 MB.

So the launcher starts the scheduler on jemalloc (else tcmalloc) when the library is installed.
jemalloc keeps the pages of freed buffers as a pool while the scheduler is busy (reused without
page faults, bounded in size) and gives them back once it is idle. Without either library the
scheduler stays on glibc and calls `malloc_trim` after every batch of some size and when idle. In
all cases oneDNN's cache is capped. `--cpu-allocator off` leaves all of it alone (the behaviour
before).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Optional

from sglang.srt.utils.jemalloc_ctl import JemallocControl

logger = logging.getLogger(__name__)

ALLOCATOR_CHOICES = ("auto", "jemalloc", "tcmalloc", "glibc", "off")
# allocator -> (shared objects tried in order, the Debian/Ubuntu package that ships one)
PRELOADED_ALLOCATORS = {
    "jemalloc": "libjemalloc2",
    "tcmalloc": "libtcmalloc-minimal4",
}
_SONAMES = {
    "jemalloc": ("libjemalloc.so.2",),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
}

# jemalloc: no page return on a timer (dirty_decay_ms:-1). Every page given back is faulted in again
# when a later batch's activations touch it: with jemalloc's 10-s decay the scheduler spent ~10% more
# CPU per token than on glibc, all of it in the kernel. Instead the scheduler gives the pool back
# itself (SchedulerMemory): after IDLE_RELEASE_S without work, or at once when it passes
# --cpu-pool-mb under unbroken load. No oversize arena: jemalloc puts allocations over 8 MiB in an
# arena that unmaps them at once on free, so every large activation buffer would be page-faulted
# afresh in every batch (measured: 0.63x).
JEMALLOC_CONF = "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1"
# Idle this long (no request waiting or running) and the freed pages go back to the system.
IDLE_RELEASE_S = 2.0
# jemalloc's pool of freed pages is given back at once, busy or not, when it holds more than this
# (--cpu-pool-mb).
DEFAULT_POOL_MB = 128
# oneDNN's primitive cache: entries (one per matmul shape) kept per process; oneDNN's default is 1,024.
ONEDNN_CACHE_VAR = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
ONEDNN_CACHE_CAPACITY = 256
# ideep's cache in front of it (torch's mkldnn linear ops): one entry per matmul shape too, 1,024 by
# default, and its entries keep their primitives alive whatever oneDNN's cap says. A decoder's four
# matmuls per token count filled it only after 256 distinct batch sizes, ~1.1 MB each (+280 MB).
IDEEP_CACHE_VAR = "LRU_CACHE_CAPACITY"
IDEEP_CACHE_CAPACITY = 256
KERNEL_CACHE_CAPS = {ONEDNN_CACHE_VAR: ONEDNN_CACHE_CAPACITY, IDEEP_CACHE_VAR: IDEEP_CACHE_CAPACITY}
# glibc fallback: after a batch of at least this many tokens, return the heap's free pages.
GLIBC_TRIM_AFTER_TOKENS = 256


def library_dirs() -> list[str]:
    """Where the dynamic loader, conda and venvs keep shared libraries."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [os.path.join(sys.prefix, "lib"), os.path.join(sys.base_prefix, "lib")]
    for root in ("/usr/local/lib", "/usr/lib", "/lib"):
        if multiarch:
            dirs.append(os.path.join(root, multiarch))
        dirs.append(root)
    dirs += ["/usr/lib64", "/lib64"]
    return list(dict.fromkeys(dirs))


def find_allocator(name: str) -> Optional[str]:
    """The absolute path of jemalloc's or tcmalloc's shared library, or None when not installed."""
    for directory in library_dirs():
        for soname in _SONAMES[name]:
            path = os.path.join(directory, soname)
            if os.path.isfile(path):
                return path
    return None


@dataclass(frozen=True)
class AllocatorPlan:
    """What the launcher does for the scheduler process, decided before spawning it."""

    requested: str  # --cpu-allocator
    allocator: str  # jemalloc / tcmalloc / glibc / off
    library: Optional[str] = None  # the preloaded shared object
    env: dict[str, str] = field(default_factory=dict)  # added to the scheduler's environment
    note: str = ""  # why a fallback was taken


def plan_allocator(requested: str, environ: Mapping[str, str] = os.environ) -> AllocatorPlan:
    """Choose the scheduler's allocator. Variables the operator set (MALLOC_CONF, the oneDNN cap) win."""
    if requested not in ALLOCATOR_CHOICES:
        raise ValueError(f"unknown allocator {requested!r}")
    if requested == "off":
        return AllocatorPlan(requested, "off")
    env = {var: str(n) for var, n in KERNEL_CACHE_CAPS.items() if var not in environ}
    candidates = {"auto": ("jemalloc", "tcmalloc"), "glibc": ()}.get(requested, (requested,))
    for name in candidates:
        path = find_allocator(name)
        if path is None:
            continue
        env["LD_PRELOAD"] = " ".join(p for p in (path, environ.get("LD_PRELOAD", "")) if p)
        if name == "jemalloc" and "MALLOC_CONF" not in environ:
            env["MALLOC_CONF"] = JEMALLOC_CONF
        return AllocatorPlan(requested, name, path, env)
    if requested != "auto" and requested != "glibc":  # ServerArgs refuses this before we get here
        raise ValueError(f"{requested} is not installed")
    note = (
        ""
        if requested == "glibc"
        else (
            "neither jemalloc nor tcmalloc is installed (apt-get install libjemalloc2), so glibc malloc "
            "with malloc_trim after large batches"
        )
    )
    return AllocatorPlan(requested, "glibc", env=env, note=note)


# OpenMP (libgomp, torch's CPU threads): how long a worker spins at a barrier before it sleeps. libgomp's
# own default is 300,000 spins; 10,000 measured the same texts/s on a quiet 2-core machine with 4-25%
# less scheduler CPU per text (int8's single short request 0.06-0.5 ms slower, float32's unchanged),
# and 1.3-1.7x less CPU per forward pass on a loaded one, where a spinning worker holds the core its
# peer waits for (docs/cpu.md "Threads"). Fully passive waiting (OMP_WAIT_POLICY=PASSIVE) doubled a
# single short request's latency, so it is not the default.
OPENMP_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
OPENMP_SPINCOUNT = 10_000


def openmp_wait_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The scheduler's OpenMP spin count, unless the operator set either wait variable (theirs wins)."""
    if any(var in environ for var in OPENMP_WAIT_VARS):
        return {}
    return {"GOMP_SPINCOUNT": str(OPENMP_SPINCOUNT)}


@contextlib.contextmanager
def child_environment(extra: Mapping[str, str]) -> Iterator[None]:
    """Add `extra` to os.environ while a child process is spawned (it inherits it), then restore."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def loaded_allocator() -> Optional[str]:
    """ "jemalloc" or "tcmalloc" when that library is mapped into this process; None otherwise."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return None
    for name, sonames in _SONAMES.items():
        if any(soname.split(".so")[0] + ".so" in maps for soname in sonames):
            return name
    return None


def glibc_malloc_trim() -> Optional[ctypes._CFuncPtr]:
    """glibc's `malloc_trim` (give free heap pages back to the system), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None


def _env_int(var: str) -> Optional[int]:
    """A cache cap as this process got it from its environment; None when unset or not a number."""
    value = os.environ.get(var, "")
    return int(value) if value.isdigit() else None


class SchedulerMemory:
    """The plan as it turned out inside the scheduler process, and when freed memory goes back.

    Built first thing in the scheduler process. It checks which allocator really got loaded (the
    loader ignores a preload it cannot use, with a message on stderr) and reports it all. The
    scheduler loop calls after_batch() after every batch and release() once it has been idle for
    idle_release_s() seconds.
    """

    def __init__(self, plan: AllocatorPlan, pool_mb: int = DEFAULT_POOL_MB) -> None:
        self.plan = plan
        self.pool_cap_bytes = pool_mb << 20
        loaded = loaded_allocator()
        self.allocator = "off" if plan.allocator == "off" else (loaded or "glibc")
        self.warning: Optional[str] = None
        if plan.allocator in PRELOADED_ALLOCATORS and loaded != plan.allocator:
            self.warning = (
                f"{plan.library} could not be preloaded (see the loader's message above); "
                "the scheduler runs on glibc malloc with malloc_trim after large batches"
            )
        self._trim = glibc_malloc_trim() if self.allocator == "glibc" else None
        self._jemalloc = JemallocControl.open(plan.library) if self.allocator == "jemalloc" and plan.library else None
        self._give_back: Optional[Callable[[], object]] = (
            self._jemalloc.purge if self._jemalloc else (lambda: self._trim(0)) if self._trim else None
        )
        self._holding = False  # freed memory may be held since the last release
        self.releases = 0  # times the pool went back: idle, over the cap, or a glibc trim

    def after_batch(self, num_tokens: int) -> None:
        """glibc: trim after a large batch. jemalloc: give the pool back if it passed its cap."""
        if self._give_back is None:
            return
        self._holding = True
        if self._trim is not None:
            if num_tokens >= GLIBC_TRIM_AFTER_TOKENS:
                self.release()
        elif self._jemalloc is not None:
            dirty = self._jemalloc.dirty_bytes()
            if dirty is not None and dirty > self.pool_cap_bytes:
                self.release()

    def idle_release_s(self) -> Optional[float]:
        """How long the scheduler may sit idle before release(); None when nothing is held."""
        return IDLE_RELEASE_S if self._holding else None

    def release(self) -> None:
        """Give the freed memory back to the system now."""
        if self._give_back is not None:
            self._give_back()
            self.releases += 1
        self._holding = False

    def info(self) -> dict:
        """The `memory` entry of /model_info."""
        cap, ideep_cap = (_env_int(var) for var in (ONEDNN_CACHE_VAR, IDEEP_CACHE_VAR))
        return {
            "cpu_allocator": self.allocator,
            "cpu_allocator_library": self.plan.library if self.allocator == self.plan.allocator else None,
            "malloc_trim_after_tokens": GLIBC_TRIM_AFTER_TOKENS if self._trim is not None else None,
            "idle_release_s": IDLE_RELEASE_S if self._give_back is not None else None,
            "pool_cap_mb": self.pool_cap_bytes >> 20 if self._jemalloc is not None else None,
            "onednn_primitive_cache_capacity": cap,
            "ideep_cache_capacity": ideep_cap,
        }

    def log(self) -> None:
        if self.warning:
            logger.warning(self.warning)
        if self.plan.note:
            logger.info("memory: %s", self.plan.note)
        info = self.info()
        library = info["cpu_allocator_library"]
        cap, ideep_cap = info["onednn_primitive_cache_capacity"], info["ideep_cache_capacity"]
        logger.info(
            "memory: allocator=%s%s, oneDNN primitive cache=%s, ideep cache=%s",
            info["cpu_allocator"],
            f" ({library})" if library else "",
            cap if cap is not None else "oneDNN's default",
            ideep_cap if ideep_cap is not None else "ideep's default",
        )
