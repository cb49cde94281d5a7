"""int8 linear layers on CPU: per-channel int8 weights, per-token dynamic int8 activations.

The matmul is oneDNN's int8 inner product as torch exposes it for its x86 inductor backend
(`onednn::qlinear_prepack` / `onednn::qlinear_pointwise`): int8 weights in oneDNN's blocked
layout, int8 or uint8 activations, int32 accumulation, float32 out with the per-channel weight
scales applied. That op takes one activation scale and zero point for the whole matrix; we
quantize each row (token) with its own: a token's result must not depend on the other texts in
its batch, and one token's outliers must not coarsen every other token. So the op runs with
scale 1 and zero point 0, and each row's scale and offset are applied to its output:

    x ~= (t - low) * range / levels + min        (t: the stored integers, per row min and range)
    x @ W.T ~= range * (t @ Wq.T * w_scale / levels) + (min - low * range / levels) * W.sum(1)

Asymmetric rows (min..max rather than -max..max) matter after GELU, whose outputs are nearly all
positive. Before that, SmoothQuant's per-input-channel factors (calibrated on sample text at load
time, layers/quantization.py) move the few channels of huge activations that BERT-style models
carry into the weights: x / s and W * s give the same product, with a flatter x.

Activations are always uint8: VNNI's `vpdpbusd` and AMX's `tdpbusd` multiply uint8 by int8
natively. (int8 activations looked natural, but oneDNN served them from its reference kernel on an
AVX-512 VNNI EPYC: 0.2 GOPS against 790 for uint8, 4,000x slower.) Without VNNI (AVX2, AVX-512
without VNNI) oneDNN multiplies the pairs with `vpmaddubsw`, whose int16 pair sums saturate beyond
127 x 127 x 2: activations then keep 7 bits (0..127), exact there. With VNNI or AMX they get 8
(0..255). `int8_support()` decides by running the op on values that saturate without VNNI: the
choice follows what this CPU and this oneDNN build do, not a flag list.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import torch

if TYPE_CHECKING:
    from sglang.srt.layers.int8_rows_kernel import Int8RowsKernel


def _onednn_int8_op(name: str):
    ops = getattr(torch.ops, "onednn", None)
    return getattr(ops, name, None) if ops is not None and torch.backends.mkldnn.is_available() else None


_PREPACK = _onednn_int8_op("qlinear_prepack")
_QLINEAR = _onednn_int8_op("qlinear_pointwise")
SMOOTH_ALPHA = 0.5  # SmoothQuant's migration strength; 0.5 measured best on all-MiniLM-L6-v2 (0.3-0.8 tried)


@dataclass(frozen=True)
class Int8Support:
    """Whether oneDNN's int8 linear runs in this process, and how activations are stored."""

    available: bool
    reason: str = ""  # why not, when not available
    levels: int = 0  # 255: uint8 0..255 (VNNI / AMX); 127: uint8 0..127 (7 bits, int16 sums saturate)
    low: int = 0  # the smallest stored value (0; the arithmetic also holds for int8's -128)
    # the C row kernel (int8_rows_kernel.py) when it builds; else the same steps in torch ops
    rows_kernel: Optional["Int8RowsKernel"] = field(default=None, compare=False, repr=False)

    @property
    def act_bits(self) -> int:
        return 8 if self.levels == 255 else 7


def _exact(x: torch.Tensor) -> bool:
    """Does the op compute x @ w.T exactly for the extreme values x holds?"""
    k = x.shape[1]
    w = torch.where(torch.arange(k) % 3 == 0, -127, 127).to(torch.int8).repeat(8, 1)
    out = _QLINEAR(
        x,
        1.0,
        0,
        _PREPACK(w, None),
        torch.ones(8),
        torch.zeros(8, dtype=torch.long),
        None,
        1.0,
        0,
        torch.float32,
        "none",
        [],
        "",
    )
    return torch.equal(out, x.float() @ w.float().T)


@functools.lru_cache(maxsize=None)
def int8_support() -> Int8Support:
    """Probe once per process (a few microseconds of compute)."""
    if _PREPACK is None or _QLINEAR is None:
        return Int8Support(
            False, f"this torch build ({torch.__version__}) has no oneDNN int8 linear (onednn::qlinear_pointwise)"
        )
    k = 64
    full = torch.where(torch.arange(k) % 2 == 0, 255, 0).to(torch.uint8).repeat(4, 1)
    full[0] = 255  # 255 x 127 pairs: int16 sums saturate without VNNI
    try:
        if _exact(full):
            return Int8Support(True, levels=255, low=0)
        if _exact(torch.where(full > 0, 127, 0).to(torch.uint8)):
            return Int8Support(True, levels=127, low=0)
    except (RuntimeError, NotImplementedError) as e:
        return Int8Support(False, f"oneDNN's int8 linear does not run on this CPU ({str(e).splitlines()[0]})")
    return Int8Support(False, "oneDNN's int8 linear gives inexact results on this CPU")


@dataclass
class Int8Weight:
    """One linear layer in int8: oneDNN's packed weight and what brings the output back to float."""

    packed: torch.Tensor  # int8 [out, in], oneDNN blocked layout
    scales: torch.Tensor  # float32 [out]: each row's weight scale / levels (the op applies it)
    zero_points: torch.Tensor  # int64 [out], zeros: weights are symmetric
    row_sums: torch.Tensor  # float32 [out]: the dequantized weight's row sums (for the rows' offsets)
    bias: Optional[torch.Tensor]  # float32 [out]
    smooth: torch.Tensor  # float32 [in]: 1 / SmoothQuant factor, applied to x (ones: not smoothed)
    smoothed: bool
    support: Int8Support

    @property
    def out_features(self) -> int:
        return self.scales.shape[0]

    @classmethod
    def quantize(
        cls,
        weight: torch.Tensor,
        bias: Optional[torch.Tensor],
        support: Int8Support,
        input_absmax: Optional[torch.Tensor] = None,
    ) -> "Int8Weight":
        """Symmetric per output channel (scale max|w_row| / 127), after smoothing by
        s = max|x|^a / max|w|^(1-a) per input channel when the input's range was observed."""
        w = weight.detach().float()
        smooth = torch.ones(w.shape[1])
        if input_absmax is not None:
            alpha = SMOOTH_ALPHA
            s = input_absmax.float().clamp_min(1e-5).pow(alpha) / w.abs().amax(dim=0).clamp_min(1e-5).pow(1 - alpha)
            s = s.clamp_min(1e-5)
            w = w * s
            smooth = s.reciprocal().contiguous()
        scales = (w.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
        q = torch.round(w / scales[:, None]).clamp_(-127, 127).to(torch.int8)
        return cls(
            packed=_PREPACK(q, None),
            scales=(scales / support.levels).contiguous(),
            zero_points=torch.zeros(w.shape[0], dtype=torch.long),
            row_sums=(q.float().sum(dim=1) * scales).contiguous(),
            bias=None if bias is None else bias.detach().float().contiguous(),
            smooth=smooth,
            smoothed=input_absmax is not None,
            support=support,
        )


def quantize_rows(x: torch.Tensor, support: Int8Support) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token asymmetric quantization of float32 x [M, K]: (t int8/uint8, range [M, 1], min [M, 1]).

    Few passes over x (at K=1536 they cost as much as the matmul saves) and few torch calls (each
    costs microseconds, which a short request pays at every layer): two vectorized row reductions,
    one fused multiply-add, one conversion to int8. Conversion to uint8 is several times slower
    in torch, and 0..127 has the same bits in both types, so the 7-bit form is made as int8 too.
    """
    lo = x.amin(dim=1, keepdim=True)
    span = x.amax(dim=1, keepdim=True).sub_(lo).clamp_min_(1e-12)
    step_inv = span.reciprocal().mul_(support.levels)
    if support.low == 0:  # t = floor((x - min) * levels / range + 0.5): all in 0.5..levels + 0.5, truncation rounds
        shift = torch.addcmul(_HALF, lo, step_inv, value=-1)
        t = torch.addcmul(shift, x, step_inv)
        return (t.to(torch.int8).view(torch.uint8) if support.levels <= 127 else t.to(torch.uint8)), span, lo
    shift = torch.addcmul(_LOW_8BIT, lo, step_inv, value=-1)
    return torch.addcmul(shift, x, step_inv).round_().to(torch.int8), span, lo


_HALF = torch.tensor(0.5)
_LOW_8BIT = torch.tensor(-128.0)


@dataclass(frozen=True)
class QuantizedRows:
    """One int8 layer's input, already quantized for it by the previous int8 layer's dequantize pass
    (`int8_linear_then`): the integers and row statistics that layer's own quantize step would
    make of the float rows, so it skips that pass over them (and, after GELU, the float rows are
    never written at all). Only the layer it was made for takes it."""

    t: torch.Tensor  # [M, K] uint8 (int8's bits when low < 0)
    span: torch.Tensor  # float32 [M, 1]
    lo: torch.Tensor  # float32 [M, 1]
    weight: Int8Weight  # the layer these rows are for (its smoothing, levels and low)

    @property
    def shape(self) -> torch.Size:
        return self.t.shape

    @property
    def device(self) -> torch.device:
        return self.t.device

    def __getitem__(self, rows: slice) -> "QuantizedRows":
        """A block of rows (layers/row_chunks.in_row_chunks slices its inputs)."""
        if not isinstance(rows, slice):
            raise TypeError("QuantizedRows are sliced by rows only")
        return QuantizedRows(self.t[rows], self.span[rows], self.lo[rows], self.weight)


def _quantized_input(
    x: torch.Tensor | QuantizedRows, weight: Int8Weight
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if isinstance(x, QuantizedRows):
        if x.weight is not weight:
            raise ValueError("these rows were quantized for another int8 layer (other smoothing factors)")
        return x.t, x.span, x.lo
    support, kernel = weight.support, weight.support.rows_kernel
    x2 = x if x.dim() == 2 and x.dtype == torch.float32 else x.reshape(-1, x.shape[-1]).float()
    if kernel is not None:
        return kernel.quantize_rows(
            x2 if x2.stride(1) == 1 else x2.contiguous(), weight.smooth, support.levels, support.low
        )
    return quantize_rows(x2 * weight.smooth if weight.smoothed else x2, support)


def _float_rows(residual: Optional[torch.Tensor], n: int) -> Optional[torch.Tensor]:
    if residual is None:
        return None
    res2 = residual.reshape(-1, n)
    return res2 if res2.dtype == torch.float32 and res2.stride(1) == 1 else res2.float().contiguous()


def _norm32(norm: Optional[tuple]) -> Optional[tuple]:
    if norm is None:
        return None
    return tuple(None if t is None else t.float().contiguous() for t in norm[:2]) + (float(norm[2]),)


def int8_linear(
    x: torch.Tensor | QuantizedRows,
    weight: Int8Weight,
    gelu: bool = False,
    residual: Optional[torch.Tensor] = None,
    norm: Optional[tuple[torch.Tensor, Optional[torch.Tensor], float]] = None,
) -> torch.Tensor:
    """x @ W.T + b (then exact GELU, or + residual, then LayerNorm(weight, bias, eps) when `norm`)
    in int8; x's dtype in and out (float32 for QuantizedRows), float32 around the matmul. The row
    kernel adds the residual and normalizes in its dequantize pass (two passes over the output fewer)."""
    support, kernel = weight.support, weight.support.rows_kernel
    t, span, lo = _quantized_input(x, weight)
    out = _QLINEAR(
        t, 1.0, 0, weight.packed, weight.scales, weight.zero_points, None, 1.0, 0, torch.float32, "none", [], ""
    )
    res2 = _float_rows(residual, weight.out_features)
    if kernel is not None:  # GELU and the residual in the same pass
        kernel.dequant_rows(
            out, span, lo, weight.row_sums, weight.bias, support.levels, support.low, gelu, res2, _norm32(norm)
        )
    else:
        out = torch.addcmul(weight.bias, out, span, out=out) if weight.bias is not None else out.mul_(span)
        offset = lo if support.low == 0 else torch.addcmul(lo, span, _LOW_8BIT, value=-1.0 / support.levels)
        out.addr_(offset.view(-1), weight.row_sums)
        if res2 is not None:
            out.add_(res2)
        if norm is not None:
            w, b, eps = norm
            out = torch.nn.functional.layer_norm(
                out, (out.shape[-1],), w.float(), None if b is None else b.float(), eps
            )
        if gelu:
            out = torch.nn.functional.gelu(out)
    if isinstance(x, QuantizedRows):
        return out
    if out.dtype != x.dtype or x.dim() != 2:
        out = out.to(x.dtype).reshape(*x.shape[:-1], weight.out_features)
    return out


def can_feed(weight: Int8Weight, then: Int8Weight) -> bool:
    """Can `weight`'s dequantize pass quantize its output for `then` (`int8_linear_then`)?"""
    return (
        weight.support.rows_kernel is not None
        and then.support.rows_kernel is not None
        and then.smooth.shape[0] == weight.out_features
    )


def int8_linear_then(
    x: torch.Tensor | QuantizedRows,
    weight: Int8Weight,
    then: Int8Weight,
    keep_float: bool,
    gelu: bool = False,
    residual: Optional[torch.Tensor] = None,
    norm: Optional[tuple[torch.Tensor, Optional[torch.Tensor], float]] = None,
) -> tuple[Optional[torch.Tensor], QuantizedRows]:
    """`int8_linear` on 2-D float32 rows (or QuantizedRows), its output also quantized for the next
    int8 layer `then` in the same dequantize pass (`can_feed` must hold): (the float output, or None
    unless keep_float, and `then`'s input). Same numbers as `int8_linear` followed by `then`'s own
    quantize step: the same arithmetic on the same float rows."""
    if not can_feed(weight, then):
        raise ValueError("the next layer's quantization runs in the row kernel's dequantize pass only")
    if isinstance(x, torch.Tensor) and (x.dim() != 2 or x.dtype != torch.float32):
        raise ValueError("int8_linear_then takes 2-D float32 rows")
    support, nxt = weight.support, then.support
    t, span, lo = _quantized_input(x, weight)
    out = _QLINEAR(
        t, 1.0, 0, weight.packed, weight.scales, weight.zero_points, None, 1.0, 0, torch.float32, "none", [], ""
    )
    q = support.rows_kernel.dequant_quantize_rows(
        out,
        span,
        lo,
        weight.row_sums,
        weight.bias,
        support.levels,
        support.low,
        then.smooth,
        nxt.levels,
        nxt.low,
        keep_float,
        gelu,
        _float_rows(residual, weight.out_features),
        _norm32(norm),
    )
    return (out if keep_float else None), QuantizedRows(*q, then)
