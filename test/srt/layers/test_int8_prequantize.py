"""The next int8 layer's quantize step inside the previous layer's dequantize pass (QuantizedRows):
the same integers and row statistics as quantizing the float rows separately, the same outputs
through Linear, and the quantize kernel's vector form against the torch ops at every row width."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from sglang.srt.layers.int8_linear import Int8Support, QuantizedRows, int8_support, quantize_rows
from sglang.srt.layers.int8_rows_kernel import load_int8_rows_kernel
from sglang.srt.layers.linear import Linear
from test.helpers.kernel_isa import ISAS, load_for_isa

SUPPORT = int8_support()
pytestmark = pytest.mark.skipif(not SUPPORT.available, reason=f"no int8 here: {SUPPORT.reason}")
FORMATS = [
    Int8Support(True, levels=255, low=0),
    Int8Support(True, levels=127, low=0),
    Int8Support(True, levels=255, low=-128),
]


@pytest.fixture(scope="module", params=ISAS)
def kernel(request):
    k, why = load_for_isa(load_int8_rows_kernel, request.param)
    assert k is not None, why
    return k


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("k", [7, 50, 64, 96, 384, 1536])  # below one vector, tails, whole blocks of 4
def test_quantize_kernel_matches_the_torch_ops_at_every_width(kernel, k):
    x = torch.randn(40, k, generator=_gen(k)) * 3 + 0.2
    x[5, k // 2] = 60.0
    smooth = torch.rand(k, generator=_gen(k + 1)) + 0.5
    for support in FORMATS[:2]:
        t1, span1, lo1 = kernel.quantize_rows(x, smooth, support.levels, support.low)
        t2, span2, lo2 = quantize_rows(x * smooth, support)
        assert torch.equal(span1, span2) and torch.equal(lo1, lo2)
        assert (t1.int() - t2.int()).abs().max() <= 1 and (t1 != t2).float().mean() < 2e-3  # ties may round apart
        assert t1.int().min() == support.low and t1.int().max() == support.low + support.levels


def _dequant_inputs(m: int, n: int, seed: int):
    g = _gen(seed)
    out = torch.randn(m, n, generator=g) * 40
    span, lo = torch.rand(m, 1, generator=g) + 0.5, torch.randn(m, 1, generator=g)
    return out, span, lo, torch.randn(n, generator=g) * 0.1, torch.randn(n, generator=g)


@pytest.mark.parametrize("n", [50, 64, 1536])
@pytest.mark.parametrize("step", ["bias", "gelu", "residual+norm"])
@pytest.mark.parametrize("keep_float", [True, False])
def test_dequant_pass_quantizes_like_a_separate_quantize(kernel, n, step, keep_float):
    out, span, lo, row_sums, bias = _dequant_inputs(33, n, n)
    residual = torch.randn(33, n, generator=_gen(1)) if step == "residual+norm" else None
    norm = (
        (torch.rand(n, generator=_gen(2)) + 0.5, torch.randn(n, generator=_gen(3)), 1e-12)
        if residual is not None
        else None
    )
    gelu = step == "gelu"
    smooth = torch.rand(n, generator=_gen(4)) + 0.5
    for fmt in FORMATS:
        floats = kernel.dequant_rows(out.clone(), span, lo, row_sums, bias, 127, 0, gelu, residual, norm)
        fused_out = out.clone()
        t, q_span, q_lo = kernel.dequant_quantize_rows(
            fused_out, span, lo, row_sums, bias, 127, 0, smooth, fmt.levels, fmt.low, keep_float, gelu, residual, norm
        )
        t2, span2, lo2 = kernel.quantize_rows(floats, smooth, fmt.levels, fmt.low)
        assert t.dtype == t2.dtype and torch.equal(t, t2) and torch.equal(q_span, span2) and torch.equal(q_lo, lo2)
        if keep_float:
            assert torch.equal(fused_out, floats)


def test_dequant_pass_rejects_smoothing_of_another_width(kernel):
    out, span, lo, row_sums, bias = _dequant_inputs(4, 8, 0)
    with pytest.raises(ValueError, match="smoothing"):
        kernel.dequant_quantize_rows(out, span, lo, row_sums, bias, 127, 0, torch.ones(7), 127, 0, True)


def _layers(support: Int8Support, hidden: int = 96, inner: int = 160):
    """dense (hidden -> inner) feeding dense2 (inner -> hidden), int8 with observed ranges."""
    g = _gen(11)
    x = torch.randn(37, hidden, generator=g) + 0.3
    x[3, 5] = 40.0
    first, second = Linear(hidden, inner), Linear(inner, hidden)
    for layer in (first, second):
        for p in layer.parameters():
            p.data.normal_(0, 0.1, generator=g)
    h = first.forward_gelu(x)
    first.quantize_int8(support, x.abs().amax(0), release_plain=False)
    second.quantize_int8(support, h.abs().amax(0), release_plain=False)
    return x, first, second


def test_gelu_output_goes_to_the_next_layer_as_quantized_rows(kernel):
    x, first, second = _layers(dataclasses.replace(SUPPORT, rows_kernel=kernel))
    residual = torch.randn(37, 96, generator=_gen(5))
    norm = nn.LayerNorm(96)
    rows = first.forward_gelu(x, then=second)
    assert isinstance(rows, QuantizedRows) and rows.shape == (37, 160) and rows.weight is second.int8_weight
    floats = first.forward_gelu(x)
    assert torch.equal(second(rows), second(floats))
    assert torch.equal(second.forward_add_norm(rows, residual, norm), second.forward_add_norm(floats, residual, norm))
    assert torch.equal(second(rows[4:9]), second(floats[4:9]))  # row blocks (layers/row_chunks)
    with pytest.raises(ValueError, match="another int8 layer"):
        first(QuantizedRows(rows.t[:, :96], rows.span, rows.lo, second.int8_weight))
    with pytest.raises(TypeError):
        rows[3]


def test_layernorm_output_comes_back_in_float_and_quantized(kernel):
    support = dataclasses.replace(SUPPORT, rows_kernel=kernel)
    x, first, second = _layers(support, hidden=96, inner=96)
    residual = torch.randn(37, 96, generator=_gen(6))
    norm = nn.LayerNorm(96)
    out, rows = first.forward_add_norm_then(x, residual, norm, then=second)
    assert torch.equal(out, first.forward_add_norm(x, residual, norm))
    assert isinstance(rows, QuantizedRows) and torch.equal(second(rows), second(out))


def test_without_the_row_kernel_or_int8_the_result_stays_float():
    x, first, second = _layers(dataclasses.replace(SUPPORT, rows_kernel=None))
    out = first.forward_gelu(x, then=second)
    assert isinstance(out, torch.Tensor) and torch.equal(out, first.forward_gelu(x))
    float_first, float_second = Linear(96, 96), Linear(96, 96)
    for p in [*float_first.parameters(), *float_second.parameters()]:
        p.data.normal_(0, 0.1)
    res, rows = float_first.forward_add_norm_then(x, x, nn.LayerNorm(96), then=float_second)
    assert rows is None and isinstance(res, torch.Tensor)
    assert isinstance(float_first.forward_gelu(x, then=float_second), torch.Tensor)
