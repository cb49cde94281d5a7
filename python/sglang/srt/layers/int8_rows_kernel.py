"""The per-token steps around the int8 matmul in C (csrc/int8_rows.c), one call and one pass each.

In torch ops, quantizing a row block and bringing the matmul's output back to float take about a
dozen calls per layer: microseconds each, which a short request pays at every layer (24 times
in all-MiniLM-L6-v2), and several passes over large batches. The C versions do the same
arithmetic in one pass per step, and the dequantize pass can also quantize its finished rows for
the next int8 layer (`dequant_quantize_rows`), which then skips its own quantize pass. Built and
cached per machine like the attention kernel; with no compiler, `load_int8_rows_kernel` says why
and the torch ops run instead (layers/int8_linear.py).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Optional

import torch

from sglang.srt.layers.attention.cpu_kernel_loader import build_kernel

SOURCE = Path(__file__).with_name("csrc") / "int8_rows.c"
HEADERS = (SOURCE.with_name("vec16.h"),)


class Int8RowsKernel:
    """ctypes bindings of sgl_int8_quantize_rows / sgl_int8_dequant_rows (both release the GIL)."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        ptr, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        self._quantize = lib.sgl_int8_quantize_rows
        self._quantize.argtypes = [ptr, i64, ptr, i64, i64, i32, i32, ptr, ptr, ptr, i32]
        self._quantize.restype = None
        self._dequant = lib.sgl_int8_dequant_rows
        self._dequant.argtypes = [ptr, i64, i64, i64, ptr, ptr, ptr, ptr, ptr, i64, ptr, ptr, ctypes.c_float]
        self._dequant.argtypes += [i32, i32, i32, ptr, i32, i32, ptr, ptr, ptr, i32, i32]
        self._dequant.restype = i32
        self.path = path

    def quantize_rows(
        self, x: torch.Tensor, smooth: torch.Tensor, levels: int, low: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: float32 [M, K] with dense rows; smooth: float32 [K] -> (t [M, K] int8 bits, span [M, 1], min [M, 1])."""
        m, k = x.shape
        if x.dtype != torch.float32 or x.stride(1) != 1 or smooth.shape != (k,) or not smooth.is_contiguous():
            raise ValueError(f"quantize_rows takes float32 rows and {k} smoothing factors")
        t = torch.empty((m, k), dtype=torch.int8 if low < 0 else torch.uint8)
        span, lo = torch.empty((2, m, 1), dtype=torch.float32)
        self._quantize(
            x.data_ptr(),
            x.stride(0),
            smooth.data_ptr(),
            m,
            k,
            levels,
            low,
            t.data_ptr(),
            span.data_ptr(),
            lo.data_ptr(),
            torch.get_num_threads(),
        )
        return t, span, lo

    def dequant_rows(
        self,
        out: torch.Tensor,
        span: torch.Tensor,
        lo: torch.Tensor,
        row_sums: torch.Tensor,
        bias: Optional[torch.Tensor],
        levels: int,
        low: int,
        gelu: bool = False,
        residual: Optional[torch.Tensor] = None,
        norm: Optional[tuple[torch.Tensor, Optional[torch.Tensor], float]] = None,
    ) -> torch.Tensor:
        """In place: out = out * span + (min - low * span / levels) * row_sums + bias (+ residual),
        then LayerNorm if `norm` (float32 weight [N], bias [N] or None, eps) is given, then GELU if asked."""
        self._dequant_pass(out, span, lo, row_sums, bias, levels, low, gelu, residual, norm, None, True)
        return out

    def dequant_quantize_rows(
        self,
        out: torch.Tensor,
        span: torch.Tensor,
        lo: torch.Tensor,
        row_sums: torch.Tensor,
        bias: Optional[torch.Tensor],
        levels: int,
        low: int,
        next_smooth: torch.Tensor,
        next_levels: int,
        next_low: int,
        keep_float: bool,
        gelu: bool = False,
        residual: Optional[torch.Tensor] = None,
        norm: Optional[tuple[torch.Tensor, Optional[torch.Tensor], float]] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`dequant_rows`, then each finished row quantized as `quantize_rows(row, next_smooth,
        next_levels, next_low)` would (the same integers) while it is in L1: the next int8 layer's
        input without a pass of its own. With keep_float False `out` is left undefined (not written
        back: nothing else reads it)."""
        m, n = out.shape
        if next_smooth.dtype != torch.float32 or next_smooth.shape != (n,) or not next_smooth.is_contiguous():
            raise ValueError(f"the next layer's smoothing factors must be contiguous float32 [{n}]")
        t = torch.empty((m, n), dtype=torch.int8 if next_low < 0 else torch.uint8)
        q_span, q_lo = torch.empty((2, m, 1), dtype=torch.float32)
        quant = (next_smooth, next_levels, next_low, t, q_span, q_lo)
        self._dequant_pass(out, span, lo, row_sums, bias, levels, low, gelu, residual, norm, quant, keep_float)
        return t, q_span, q_lo

    def _dequant_pass(self, out, span, lo, row_sums, bias, levels, low, gelu, residual, norm, quant, keep_float):
        m, n = out.shape
        if out.dtype != torch.float32 or out.stride(1) != 1 or row_sums.shape != (n,) or span.numel() != m:
            raise ValueError("dequant_rows takes the matmul's float32 [M, N] output and its rows' statistics")
        if residual is not None and (
            residual.dtype != torch.float32 or residual.shape != (m, n) or residual.stride(1) != 1
        ):
            raise ValueError(f"the residual must be float32 [{m}, {n}] with dense rows")
        if norm is not None and any(
            t is not None and (t.dtype != torch.float32 or t.shape != (n,) or not t.is_contiguous()) for t in norm[:2]
        ):
            raise ValueError(f"the LayerNorm's weight and bias must be contiguous float32 [{n}]")
        norm_w, norm_b, eps = norm if norm is not None else (None, None, 0.0)
        q_smooth, q_levels, q_low, t, q_span, q_lo = quant if quant is not None else (None, 0, 0, None, None, None)
        failed = self._dequant(
            out.data_ptr(),
            out.stride(0),
            m,
            n,
            span.data_ptr(),
            lo.data_ptr(),
            row_sums.data_ptr(),
            bias.data_ptr() if bias is not None else None,
            residual.data_ptr() if residual is not None else None,
            residual.stride(0) if residual is not None else 0,
            norm_w.data_ptr() if norm_w is not None else None,
            norm_b.data_ptr() if norm_b is not None else None,
            eps,
            levels,
            low,
            int(gelu),
            q_smooth.data_ptr() if q_smooth is not None else None,
            q_levels,
            q_low,
            t.data_ptr() if t is not None else None,
            q_span.data_ptr() if q_span is not None else None,
            q_lo.data_ptr() if q_lo is not None else None,
            int(keep_float),
            torch.get_num_threads(),
        )
        if failed:
            raise MemoryError(f"the int8 row kernel could not allocate a scratch row of {n} floats")


def load_int8_rows_kernel() -> tuple[Optional[Int8RowsKernel], str]:
    """(kernel, "") or (None, why not)."""
    built = build_kernel((SOURCE,), HEADERS, what="the int8 row kernel")
    if built.path is None:
        return None, built.reason
    try:
        return Int8RowsKernel(built.path), ""
    except (OSError, AttributeError) as e:
        return None, f"loading {built.path} failed ({e})"
