"""The builds of the project's C kernels a test should run: the native one, and on an x86-64 CPU
with AVX-512 also the AVX2 one (SGLANG_KERNEL_ISA=x86-64-v3, 8-float vectors in csrc/vec16.h),
which is what an AVX2-only machine runs."""

from __future__ import annotations

import os
from typing import Callable, TypeVar

from sglang.srt.layers.attention.cpu_kernel_loader import ISA_ENV
from sglang.srt.layers.attention.portable_kernels import cpu_flags

K = TypeVar("K")

ISAS = ["native"] + (["x86-64-v3"] if {"avx512f", "avx2", "fma"} <= cpu_flags() else [])


def load_for_isa(load: Callable[[], tuple[K, str]], isa: str) -> tuple[K, str]:
    """`load()` (a kernel loader: (kernel or None, why)) with $SGLANG_KERNEL_ISA set to `isa`, the
    variable restored afterwards."""
    saved = os.environ.get(ISA_ENV)
    os.environ[ISA_ENV] = isa
    try:
        return load()
    finally:
        if saved is None:
            del os.environ[ISA_ENV]
        else:
            os.environ[ISA_ENV] = saved
