"""Linear layers whose parameters know how to load their checkpoint shards.

Checkpoints store q/k/v (and gate/up) separately; we fuse them into one matmul. Each parameter
carries a `weight_loader(param, loaded, shard_id)` so the model loader never needs to know the layout.

On CPU the matmul goes to oneDNN (`mkldnn._linear_pointwise`, the kernel torch's own inductor
uses) rather than `F.linear`'s BLAS call: on the AVX-512 AMD machines we measured it is ~25% faster
in float32 and bfloat16 alike, and it can apply GELU in the same pass (benchmark/NOTES.md).
`prepack_cpu_linears` reorders each weight into oneDNN's blocked layout once at load time, so no
call pays that reorder again: ~40% off the matmuls of a short request, ~8% off large batches.
With `--quantization int8`, `quantize_cpu_linears` gives each layer an int8 copy of its weight
instead (layers/int8_linear.py) and the layer runs that.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.layers.int8_linear import (
    Int8Support,
    Int8Weight,
    QuantizedRows,
    can_feed,
    int8_linear,
    int8_linear_then,
)
from sglang.srt.model_loader.weight_utils import default_weight_loader


def _onednn_op(name: str):
    if not torch.backends.mkldnn.is_available():
        return None
    return getattr(torch.ops.mkldnn, name, None)


def onednn_linear_dtypes() -> tuple:
    """The dtypes oneDNN's CPU inner product takes on this CPU: bfloat16 needs AVX-512 (or AMX);
    on an AVX2-only CPU oneDNN cannot even build a bf16 primitive, so bf16 goes to F.linear."""
    bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return (torch.float32, torch.bfloat16) if bf16 is not None and bf16() else (torch.float32,)


_ONEDNN_LINEAR = _onednn_op("_linear_pointwise")
_ONEDNN_REORDER = _onednn_op("_reorder_linear_weight")
_ONEDNN_LINEAR_BINARY = getattr(_ONEDNN_LINEAR, "binary", None)
_ONEDNN_DTYPES = onednn_linear_dtypes() if _ONEDNN_LINEAR is not None else ()


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    gelu: bool = False,
    residual: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """x @ weight.T + bias, then exact (erf) GELU or + residual when asked, fused on CPU.

    `weight` may be a plain [out, in] tensor or one prepacked by `prepack_cpu_linears`. The
    residual add runs in oneDNN's epilogue (a binary post-op): no separate pass over the output,
    which on two threads cost 6% of the float32 forward in CPU time (benchmark/NOTES.md).
    """
    if _ONEDNN_LINEAR is not None and x.device.type == "cpu" and x.dtype in _ONEDNN_DTYPES and x.dtype == weight.dtype:
        if gelu:
            out = _ONEDNN_LINEAR(x, weight, bias, "gelu", [], "none")
        elif residual is not None and _ONEDNN_LINEAR_BINARY is not None and residual.is_contiguous():
            return _ONEDNN_LINEAR_BINARY(x, residual.to(x.dtype), weight, bias, "add")
        else:
            out = _ONEDNN_LINEAR(x, weight, bias, "none", [], "")
    else:
        out = F.linear(x, weight, bias)
        if gelu:
            out = F.gelu(out)
    return out if residual is None else out + residual


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.weight.weight_loader = default_weight_loader
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False)
            self.bias.weight_loader = default_weight_loader
        else:
            self.register_parameter("bias", None)
        # oneDNN's blocked copy of `weight` (CPU inference, after loading); see prepack_cpu_linears
        self.packed_weight: Optional[torch.Tensor] = None
        # or its int8 copy (--quantization int8); see quantize_cpu_linears
        self.int8_weight: Optional[Int8Weight] = None

    def _matmul_weight(self) -> torch.Tensor:
        return self.weight if self.packed_weight is None else self.packed_weight

    def forward(self, x: torch.Tensor | QuantizedRows) -> torch.Tensor:
        if self.int8_weight is not None:
            return int8_linear(x, self.int8_weight)
        return linear(x, self._matmul_weight(), self.bias)

    def forward_gelu(
        self, x: torch.Tensor | QuantizedRows, then: Optional["Linear"] = None
    ) -> torch.Tensor | QuantizedRows:
        """GELU(linear(x)) in one pass where the backend can fuse it. With `then` (the layer that
        alone reads the result) and both layers in int8, the result comes back as `then`'s
        QuantizedRows, quantized in the same pass and never written as float."""
        if self.int8_weight is not None:
            feed = self._feeds(x, then)
            if feed is not None:
                return int8_linear_then(x, self.int8_weight, feed, keep_float=False, gelu=True)[1]
            return int8_linear(x, self.int8_weight, gelu=True)
        return linear(x, self._matmul_weight(), self.bias, gelu=True)

    def forward_add(self, x: torch.Tensor | QuantizedRows, residual: torch.Tensor) -> torch.Tensor:
        """linear(x) + residual in one pass where the backend can fuse it."""
        if self.int8_weight is not None:
            return int8_linear(x, self.int8_weight, residual=residual)
        return linear(x, self._matmul_weight(), self.bias, residual=residual)

    def forward_add_norm(
        self, x: torch.Tensor | QuantizedRows, residual: torch.Tensor, norm: nn.Module
    ) -> torch.Tensor:
        """norm(linear(x) + residual) for a LayerNorm `norm` (weight, bias, eps): in int8 with the
        row kernel, all in its dequantize pass; otherwise the fused add, then the norm."""
        if self.int8_weight is not None and self.int8_weight.support.rows_kernel is not None:
            return int8_linear(x, self.int8_weight, residual=residual, norm=(norm.weight, norm.bias, norm.eps))
        return norm(self.forward_add(x, residual))

    def forward_add_norm_then(
        self, x: torch.Tensor | QuantizedRows, residual: torch.Tensor, norm: nn.Module, then: "Linear"
    ) -> tuple[torch.Tensor, Optional[QuantizedRows]]:
        """(forward_add_norm(x, residual, norm), the same rows as `then`'s QuantizedRows or None):
        with both layers in int8 the next layer's input is quantized in this layer's dequantize
        pass, while each row is in L1, instead of by a pass of its own over the float output."""
        feed = self._feeds(x, then) if self.int8_weight is not None else None
        if feed is None:
            return self.forward_add_norm(x, residual, norm), None
        out, rows = int8_linear_then(
            x, self.int8_weight, feed, keep_float=True, residual=residual, norm=(norm.weight, norm.bias, norm.eps)
        )
        return out, rows

    def _feeds(self, x: torch.Tensor | QuantizedRows, then: Optional["Linear"]) -> Optional[Int8Weight]:
        """`then`'s int8 weight when this layer's dequantize pass can quantize x's result for it
        (both int8 with the row kernel, float32 rows: a bfloat16 model keeps its own rounding)."""
        if then is None or then.int8_weight is None or not can_feed(self.int8_weight, then.int8_weight):
            return None
        if isinstance(x, torch.Tensor) and (x.dim() != 2 or x.dtype != torch.float32):
            return None
        return then.int8_weight

    def prepack(self, release_plain: bool) -> bool:
        """Reorder the weight into oneDNN's layout once. With `release_plain` the plain copy's
        memory is given back (the parameter keeps its dtype, with no elements): the model then
        runs inference only, which is all a served model does."""
        w = self.weight
        if _ONEDNN_REORDER is None or _ONEDNN_LINEAR is None or w.device.type != "cpu" or w.dtype not in _ONEDNN_DTYPES:
            return False
        self.packed_weight = _ONEDNN_REORDER(w.detach())
        if release_plain:
            _release(w)
        return True

    def quantize_int8(self, support: Int8Support, input_absmax: Optional[torch.Tensor], release_plain: bool) -> None:
        """Run this layer in int8 from now on (per-channel weights, per-token activations),
        smoothed by the observed input range where there is one."""
        self.int8_weight = Int8Weight.quantize(self.weight, self.bias, support, input_absmax)
        self.packed_weight = None
        if release_plain:
            _release(self.weight)
            if self.bias is not None:  # the int8 weight holds a float32 copy
                _release(self.bias)


def _release(param: torch.Tensor) -> None:
    """Give a parameter's memory back, keeping its dtype (inference no longer reads it)."""
    param.data = torch.empty(0, dtype=param.dtype)


class MergedLinear(Linear):
    """Several checkpoint matrices stacked along the output dimension.

    `shard_sizes` maps a shard id (e.g. "q", "k", "v" or 0, 1) to its number of output rows, in
    the order they are stacked.
    """

    def __init__(self, in_features: int, shard_sizes: dict, bias: bool = True) -> None:
        super().__init__(in_features, sum(shard_sizes.values()), bias)
        self.shard_offsets: dict = {}
        offset = 0
        for shard_id, size in shard_sizes.items():
            self.shard_offsets[shard_id] = (offset, size)
            offset += size
        self.weight.weight_loader = self._load_shard
        if self.bias is not None:
            self.bias.weight_loader = self._load_shard

    def _load_shard(self, param: torch.Tensor, loaded: torch.Tensor, shard_id=None) -> None:
        if shard_id is None:  # already fused in the checkpoint
            default_weight_loader(param, loaded)
            return
        offset, size = self.shard_offsets[shard_id]
        default_weight_loader(param.narrow(0, offset, size), loaded)

    def split(self, out: torch.Tensor) -> Sequence[torch.Tensor]:
        return out.split([size for _, size in self.shard_offsets.values()], dim=-1)


class QKVLinear(MergedLinear):
    def __init__(
        self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: Optional[int] = None, bias: bool = True
    ) -> None:
        num_kv_heads = num_kv_heads or num_heads
        super().__init__(
            hidden,
            {"q": num_heads * head_dim, "k": num_kv_heads * head_dim, "v": num_kv_heads * head_dim},
            bias,
        )


def _sole_holder(model: nn.Module):
    """A test: is this parameter's memory held by one parameter only? (Tied embeddings are not.)"""
    holders = Counter(p.data_ptr() for _, p in model.named_parameters(remove_duplicate=False) if p.numel())
    return lambda param: holders[param.data_ptr()] == 1


def prepack_cpu_linears(model: nn.Module) -> int:
    """Prepack every `Linear` of a loaded CPU model for oneDNN; returns how many were packed.

    A weight that another module also holds (tied embeddings) is packed but its plain copy kept.
    Layers already running in int8 are left alone.
    """
    sole = _sole_holder(model)
    packed = 0
    for module in model.modules():
        if isinstance(module, Linear) and module.packed_weight is None and module.int8_weight is None:
            packed += module.prepack(release_plain=sole(module.weight))
    return packed


def quantize_cpu_linears(model: nn.Module, support: Int8Support, input_absmax: Optional[dict] = None) -> int:
    """Give every floating-point `Linear` of a loaded CPU model an int8 weight; returns how many.

    `input_absmax` maps layers to their observed max |x| per input channel (layers/quantization.py).
    Only the project's `Linear` layers (the backbone's projections and MLPs) change; the small heads
    (sentence-transformers Dense, classifiers, sparse heads) are torch `nn.Linear`s and keep float.
    """
    sole = _sole_holder(model)
    ranges = input_absmax or {}
    done = 0
    for module in model.modules():
        if (
            isinstance(module, Linear)
            and module.int8_weight is None
            and module.weight.is_floating_point()
            and module.weight.numel()
        ):
            module.quantize_int8(support, ranges.get(module), release_plain=sole(module.weight))
            done += 1
    return done
