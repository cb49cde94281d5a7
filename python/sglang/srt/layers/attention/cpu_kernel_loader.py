"""Builds the C varlen-attention kernel for this CPU once, caches it, and calls it through ctypes.

The kernel is a few small C11 files (csrc/), so a system C compiler builds it in a couple of
seconds; no torch headers, no build step at install time. The shared object is cached under
$SGLANG_KERNEL_CACHE (default ~/.cache/sglang-embed/kernels) keyed by the sources, the flags and the
CPU's model and feature flags, so `-march=native` code never runs on another CPU model, and a
cached library loads where no compiler is installed (an image built with one, run without).
Anything that goes wrong (no compiler, a failed build, an unloadable library) returns None with
the reason, and the caller keeps torch's attention.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from sglang.srt.layers.attention.portable_kernels import Level, compile_levels, find_prebuilt, levels_for, prebuilt_dir

logger = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
SOURCES = (CSRC / "varlen_attention.c", CSRC / "varlen_attention_bf16.c")
HEADERS = (CSRC / "varlen_common.h", CSRC.parent.parent / "csrc" / "vec16.h")
DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1}
BASE_FLAGS = ["-O3", "-std=c11", "-ffp-contract=fast", "-fPIC", "-shared", "-fopenmp"]
# -march=native first; some compilers (Clang on Arm) spell it -mcpu=native, and a portable build
# still beats torch's kernel.
ARCH_FLAG_CHOICES = (["-march=native"], ["-mcpu=native"], [])
# Builds for a lower ISA than this CPU's, to measure what another machine would run (an AVX2 one on
# an AVX-512 machine, with ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA doing the same for torch):
# one of portable_kernels' level names (x86-64-v3 is AVX2 + FMA), or "native" (the default).
ISA_ENV = "SGLANG_KERNEL_ISA"
BUILD_TIMEOUT_S = 120
# Columns a position-bias table needs past its last relative offset: the kernel reads whole
# vectors of 16 keys (VL in varlen_common.h).
BIAS_SLACK = 16


def cache_dir() -> Path:
    explicit = os.environ.get("SGLANG_KERNEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sglang-embed" / "kernels"


def find_compiler() -> Optional[str]:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features", "CPU part"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() + platform.machine()


def forced_level() -> Optional[Level]:
    """The portable level $SGLANG_KERNEL_ISA names, or None for -march=native (unset or "native")."""
    isa = os.environ.get(ISA_ENV, "native").strip() or "native"
    if isa == "native":
        return None
    for level in levels_for():
        if level.name == isa:
            return level
    names = ", ".join(["native", *(lv.name for lv in levels_for())])
    raise ValueError(f"{ISA_ENV}={isa!r} is not a CPU level this machine builds for; choose one of: {names}")


@dataclass
class BuildResult:
    path: Optional[Path]
    reason: str = ""  # why there is no library, for the log and for a ConfigError


def build_kernel(
    sources: tuple[Path, ...] = SOURCES, headers: tuple[Path, ...] = HEADERS, what: str = "the CPU attention kernel"
) -> BuildResult:
    """The cached library for this machine, compiling it first if needed (`what` names it in messages;
    the int8 layers' row kernel is built the same way)."""
    code = b"\0".join(f.read_bytes() for f in (*sources, *headers))
    try:
        level = forced_level()
    except ValueError as e:
        return BuildResult(None, str(e))
    arch_choices = ARCH_FLAG_CHOICES if level is None else (list(level.flags),)
    key = hashlib.sha256(
        b"\0".join(
            [
                code,
                " ".join(BASE_FLAGS).encode(),
                # a forced level gets its own library; the native build's key is what it always was
                *([] if level is None else [" ".join(level.flags).encode()]),
                _cpu_signature().encode(),
                platform.machine().encode(),
            ]
        )
    ).hexdigest()[:16]
    target = cache_dir() / f"{sources[0].stem}-{key}.so"
    if target.exists():
        return BuildResult(target)
    cc = find_compiler()
    if cc is None:
        # An image built with a compiler and run without one: its portable builds (portable_kernels.py).
        prebuilt = find_prebuilt(sources[0].stem, code, BASE_FLAGS, None if level is None else level.needs)
        if prebuilt is not None:
            return BuildResult(prebuilt)
        return BuildResult(None, "no C compiler found (set CC, or install gcc or clang)")
    errors = []
    for arch in arch_choices:
        # Build beside the target and rename: concurrent builders never see a half-written file.
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        except OSError as e:  # missing and uncreatable, or there but read-only
            return BuildResult(None, f"kernel cache {target.parent} is not writable ({e})")
        os.close(fd)
        cmd = [cc, *BASE_FLAGS, *arch, *(str(f) for f in sources), "-o", tmp]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            errors.append(f"{' '.join(cmd)}: {e}")
            os.unlink(tmp)
            continue
        if done.returncode == 0:
            os.replace(tmp, target)
            logger.info("built %s: %s", what, target)
            return BuildResult(target)
        os.unlink(tmp)
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        errors.append(f"{' '.join(arch) or 'portable'}: {tail}")
    return BuildResult(None, f"compiling {what} failed: " + "; ".join(errors))


class VarlenAttentionKernel:
    """ctypes binding of sgl_varlen_attention; the call releases the GIL while it runs."""

    def __init__(self, path: Path) -> None:
        # torch is imported above, so the library's libgomp.so.1 resolves to torch's own runtime.
        self.path = path
        self._fn = ctypes.CDLL(str(path)).sgl_varlen_attention
        i64, i32 = ctypes.c_int64, ctypes.c_int
        self._fn.argtypes = (
            [ctypes.c_void_p] * 4
            + [i32, ctypes.c_void_p]
            + [i32] * 4
            + [i64] * 4
            + [ctypes.c_float, i32, i32, i32, i64, i32, i32]
            + [ctypes.c_void_p, i64, i64, ctypes.c_void_p]
        )
        self._fn.restype = i32

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        cu_seqlens: torch.Tensor,
        *,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float,
        causal: bool,
        window: Optional[int],
        block_rows: int = 64,
        scratch_budget: int = 1 << 20,
        max_seq_len: int = 0,
        num_threads: Optional[int] = None,
        bias: Optional[torch.Tensor] = None,
        bias_center: int = 0,
        key_lens: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """out[T, H*D] = attention of q[T, H*D] over k, v[T, Hk*D]; rows of each must be dense.

        Sequences longer than `max_seq_len` (when > 0) are skipped: their rows of `out` are left
        as they were, for the caller to fill. `bias` (float32 [H, W]) adds bias[h, bias_center +
        j - i] to the score of query i and key j (see PositionBias); `key_lens` (int32 [B]) limits
        sequence b's keys to its first key_lens[b] tokens."""
        for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
            if x.device.type != "cpu" or x.dtype != q.dtype or x.dim() != 2 or x.stride(1) != 1:
                raise ValueError(
                    f"{name} must be a CPU [tokens, heads*head_dim] tensor with dense rows "
                    f"and q's dtype; got {x.dtype} {tuple(x.shape)} stride {x.stride()}"
                )
        if q.dtype not in DTYPE_CODES:
            raise ValueError(f"the CPU attention kernel handles float32 and bfloat16, not {q.dtype}")
        if (
            cu_seqlens.dtype != torch.int32
            or cu_seqlens.device.type != "cpu"
            or not cu_seqlens.is_contiguous()
            or cu_seqlens.numel() < 1
        ):
            raise ValueError("cu_seqlens must be a non-empty contiguous int32 CPU tensor (ForwardBatch.cu_seqlens)")
        # The C side trusts these: every row it touches must exist.
        tokens = q.shape[0]
        if num_heads < 1 or num_kv_heads < 1 or head_dim < 1 or num_heads % num_kv_heads:
            raise ValueError(f"bad head layout: {num_heads} heads, {num_kv_heads} kv heads, head_dim {head_dim}")
        if (
            q.shape[1] != num_heads * head_dim
            or out.shape != q.shape
            or k.shape != (tokens, num_kv_heads * head_dim)
            or v.shape != k.shape
        ):
            raise ValueError(
                f"shapes do not match {num_heads} x {head_dim} query and {num_kv_heads} kv heads: "
                f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, out {tuple(out.shape)}"
            )
        lowest, highest = torch.aminmax(cu_seqlens)
        if int(lowest) < 0 or int(highest) > tokens:
            raise ValueError(f"cu_seqlens must lie within [0, {tokens}]")
        bias_ptr, bias_stride = self._check_bias(bias, bias_center, num_heads, cu_seqlens)
        key_ptr = 0
        if key_lens is not None:
            if (
                key_lens.dtype != torch.int32
                or key_lens.device.type != "cpu"
                or not key_lens.is_contiguous()
                or key_lens.numel() != cu_seqlens.numel() - 1
            ):
                raise ValueError("key_lens must be a contiguous int32 CPU tensor with one entry per sequence")
            key_ptr = key_lens.data_ptr()
        rc = self._fn(
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            out.data_ptr(),
            DTYPE_CODES[q.dtype],
            cu_seqlens.data_ptr(),
            cu_seqlens.numel() - 1,
            num_heads,
            num_kv_heads,
            head_dim,
            q.stride(0),
            k.stride(0),
            v.stride(0),
            out.stride(0),
            scale,
            int(causal),
            window or 0,
            block_rows,
            scratch_budget,
            max_seq_len,
            num_threads or torch.get_num_threads(),
            bias_ptr,
            bias_stride,
            bias_center,
            key_ptr,
        )
        if rc != 0:
            raise MemoryError("the CPU attention kernel could not allocate its scratch memory")
        return out

    @staticmethod
    def _check_bias(
        bias: Optional[torch.Tensor], center: int, num_heads: int, cu_seqlens: torch.Tensor
    ) -> tuple[int, int]:
        """(pointer, row stride) of a position-bias table the C side may index without checks."""
        if bias is None:
            return 0, 0
        if bias.dtype != torch.float32 or bias.device.type != "cpu" or bias.dim() != 2 or not bias.is_contiguous():
            raise ValueError("bias must be a contiguous float32 CPU tensor [num_heads, width]")
        longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max()) if cu_seqlens.numel() > 1 else 0
        # Offsets j - i run from -(longest - 1) to longest - 1, plus a vector's slack past the end.
        if bias.shape[0] != num_heads or center < longest - 1 or bias.shape[1] < center + longest + BIAS_SLACK:
            raise ValueError(
                f"bias {tuple(bias.shape)} with center {center} does not cover {num_heads} heads and "
                f"sequences of {longest} tokens"
            )
        return bias.data_ptr(), bias.stride(0)


def load_kernel() -> tuple[Optional[VarlenAttentionKernel], str]:
    """(kernel, "") or (None, why not)."""
    built = build_kernel()
    if built.path is None:
        return None, built.reason
    try:
        return VarlenAttentionKernel(built.path), ""
    except OSError as e:
        return None, f"loading {built.path} failed ({e})"


KernelSources = tuple[tuple[Path, ...], tuple[Path, ...]]  # (C sources, headers) of one kernel


def prebuild(directory: Optional[Path] = None, kernels: Sequence[KernelSources] = ((SOURCES, HEADERS),)) -> list[Path]:
    """Compile each kernel ((sources, headers)) at every portable level into `directory` (default:
    $SGLANG_KERNEL_PREBUILT, else the package's prebuilt/ folder), for images that run without a
    compiler. Raises when a kernel builds at no level."""
    directory = directory or prebuilt_dir()
    cc = find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    out: list[Path] = []
    for sources, headers in kernels:
        code = b"\0".join(f.read_bytes() for f in (*sources, *headers))
        built, failed = compile_levels(cc, BASE_FLAGS, sources, code, directory, BUILD_TIMEOUT_S)
        for why in failed:
            logger.warning("portable build of %s not made for %s", sources[0].name, why)
        if not built:
            raise RuntimeError(f"no portable build of {sources[0].name} succeeded: " + "; ".join(failed))
        out.extend(built)
    return out
