"""int8 linear layers: the probe, the arithmetic (both activation formats), the C row kernel
against the torch ops, and how Linear / quantize_cpu_linears / prepack_cpu_linears combine."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sglang.srt.layers.int8_linear as int8_linear_mod
from sglang.srt.layers.int8_linear import Int8Support, Int8Weight, int8_linear, int8_support, quantize_rows
from sglang.srt.layers.int8_rows_kernel import load_int8_rows_kernel
from sglang.srt.layers.linear import Linear, QKVLinear, prepack_cpu_linears, quantize_cpu_linears
from test.helpers.kernel_isa import ISAS, load_for_isa

SUPPORT = int8_support()
pytestmark = pytest.mark.skipif(not SUPPORT.available, reason=f"no int8 here: {SUPPORT.reason}")


@pytest.fixture(scope="module", params=ISAS)
def kernel(request):
    k, why = load_for_isa(load_int8_rows_kernel, request.param)
    assert k is not None, why  # the test machines have a C compiler (the attention kernel needs one too)
    return k


def _data(rows: int = 37, k: int = 96, n: int = 50, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=gen) + 0.3
    x[3, 5] = 40.0  # one huge activation, as BERT's residual stream has
    return x, torch.randn(n, k, generator=gen) * 0.1, torch.randn(n, generator=gen)


def _cos(a, b):
    return F.cosine_similarity(a, b, dim=-1).min().item()


def test_probe_matches_what_the_op_computes():
    """The activation format the probe picked is computed exactly by oneDNN on this CPU."""
    w = torch.randint(-127, 128, (16, 64), dtype=torch.int8)
    t = torch.randint(0, SUPPORT.levels + 1, (8, 64), dtype=torch.uint8)
    out = int8_linear_mod._QLINEAR(
        t,
        1.0,
        0,
        int8_linear_mod._PREPACK(w, None),
        torch.ones(16),
        torch.zeros(16, dtype=torch.long),
        None,
        1.0,
        0,
        torch.float32,
        "none",
        [],
        "",
    )
    assert torch.equal(out, t.float() @ w.float().T)
    assert SUPPORT.low == 0 and SUPPORT.act_bits == {255: 8, 127: 7}[SUPPORT.levels]


@pytest.mark.parametrize("glue", ["c", "torch"])
@pytest.mark.parametrize("smoothed", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("gelu", [False, True])
def test_int8_linear_close_to_float(kernel, glue, smoothed, bias, gelu):
    x, w, b = _data()
    support = dataclasses.replace(SUPPORT, rows_kernel=kernel if glue == "c" else None)
    weight = Int8Weight.quantize(w, b if bias else None, support, x.abs().amax(0) if smoothed else None)
    ref = F.linear(x, w, b if bias else None)
    ref = F.gelu(ref) if gelu else ref
    assert _cos(int8_linear(x, weight, gelu=gelu), ref) >= 0.999


def test_8bit_activation_arithmetic_with_an_exact_matmul(monkeypatch, kernel):
    """The VNNI/AMX format (uint8 0..255) on any CPU: oneDNN replaced by an exact float matmul."""
    x, w, b = _data()
    eight = Int8Support(True, levels=255, low=0)
    for glue in (kernel, None):
        weight = Int8Weight.quantize(w, b, dataclasses.replace(eight, rows_kernel=glue), x.abs().amax(0))
        ws = (w / weight.smooth).abs().amax(1) / 127
        q = torch.round(w / weight.smooth / ws[:, None]).clamp(-127, 127)
        monkeypatch.setattr(int8_linear_mod, "_QLINEAR", lambda t, *a, sc=weight.scales: (t.float() @ q.T) * sc)
        got = int8_linear(x, weight)
        assert _cos(got, F.linear(x, w, b)) >= 0.9995  # 8 bits: tighter than the 7-bit format


def test_c_kernel_quantizes_like_the_torch_ops(kernel):
    x, _, _ = _data(rows=300, k=384)
    smooth = torch.rand(384) + 0.5
    for support in (SUPPORT, Int8Support(True, levels=255, low=0), Int8Support(True, levels=127, low=0)):
        t1, span1, lo1 = kernel.quantize_rows(x, smooth, support.levels, support.low)
        t2, span2, lo2 = quantize_rows(x * smooth, support)
        assert t1.dtype == t2.dtype and torch.equal(span1, span2) and torch.equal(lo1, lo2)
        assert (t1.int() - t2.int()).abs().max() <= 1 and (t1 != t2).float().mean() < 1e-3  # ties may round apart
        assert t1.int().min() >= support.low and t1.int().max() <= support.low + support.levels


def test_rows_are_independent_of_their_batch(kernel):
    x, w, b = _data(rows=64)
    weight = Int8Weight.quantize(w, b, dataclasses.replace(SUPPORT, rows_kernel=kernel), x.abs().amax(0))
    batched = int8_linear(x, weight)
    for i in (0, 3, 63):
        assert torch.allclose(int8_linear(x[i : i + 1], weight), batched[i : i + 1], rtol=0, atol=1e-5)


def test_bfloat16_activations_in_and_out(kernel):
    x, w, b = _data()
    weight = Int8Weight.quantize(w, b, dataclasses.replace(SUPPORT, rows_kernel=kernel))
    out = int8_linear(x.bfloat16().reshape(1, *x.shape), weight)
    assert out.dtype == torch.bfloat16 and out.shape == (1, x.shape[0], w.shape[0])
    assert _cos(out[0].float(), F.linear(x, w, b)) >= 0.995


def test_quantize_cpu_linears_takes_project_linears_only_and_prepack_skips_them():
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = QKVLinear(16, 4, 2)
            self.out = Linear(8, 16, bias=False)
            self.head = nn.Linear(16, 3)  # sentence-transformers Dense / classifier heads keep float

    model = Model()
    for p in model.parameters():
        nn.init.normal_(p.data)
    x = torch.randn(5, 16)
    ref = model.qkv(x)
    assert quantize_cpu_linears(model, SUPPORT, {model.qkv: x.abs().amax(0)}) == 2
    assert model.qkv.int8_weight.smoothed and not model.out.int8_weight.smoothed
    assert model.qkv.weight.numel() == 0 and model.qkv.bias.numel() == 0  # plain copies given back
    assert prepack_cpu_linears(model) == 0 and model.qkv.packed_weight is None
    assert _cos(model.qkv(x), ref) >= 0.999
    assert quantize_cpu_linears(model, SUPPORT) == 0  # already done


@pytest.mark.parametrize("n", [16, 50, 1536])  # whole vectors, a tail, a BERT MLP width
def test_c_kernel_gelu_is_torchs_exact_gelu(kernel, n):
    """The GELU fused into dequant_rows against torch's erf GELU, over negatives, zero and large values."""
    gen = torch.Generator().manual_seed(n)
    out = torch.randn(33, n, generator=gen) * 4
    out[0, : min(n, 6)] = torch.tensor([0.0, -0.0, 12.0, -12.0, 90.0, -90.0])[: min(n, 6)]
    span, lo = torch.rand(33, 1, generator=gen) + 0.5, torch.randn(33, 1, generator=gen)
    row_sums, bias = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    plain = kernel.dequant_rows(out.clone(), span, lo, row_sums, bias, 255, 0)
    fused = kernel.dequant_rows(out.clone(), span, lo, row_sums, bias, 255, 0, gelu=True)
    ref = F.gelu(plain.double()).float()
    assert torch.allclose(fused, ref, rtol=1e-5, atol=2e-6), (fused - ref).abs().max()


@pytest.mark.parametrize("glue", ["c", "torch"])
@pytest.mark.parametrize("bias", [True, False])
def test_residual_is_added_in_the_dequantize_pass(kernel, glue, bias):
    """forward_add: int8_linear(x) + residual, the C pass (or the torch ops) adding it, equal to
    adding it afterwards; a residual view with a row stride of its own is read as such."""
    x, w, b = _data()
    support = dataclasses.replace(SUPPORT, rows_kernel=kernel if glue == "c" else None)
    weight = Int8Weight.quantize(w, b if bias else None, support, x.abs().amax(0))
    wide = torch.randn(x.shape[0], 80, generator=torch.Generator().manual_seed(3))
    residual = wide[:, 10:60]  # rows 80 floats apart
    fused = int8_linear(x, weight, residual=residual)
    assert torch.allclose(fused, int8_linear(x, weight) + residual, atol=1e-5, rtol=0)
    ref = F.linear(x, w, b if bias else None) + residual
    assert _cos(fused, ref) >= 0.999
    layer = Linear(96, 50, bias=bias)
    layer.int8_weight = weight
    assert torch.equal(layer.forward_add(x, residual), fused)


def test_c_kernel_rejects_a_residual_of_another_shape(kernel):
    out = torch.zeros(4, 8)
    span, lo = torch.ones(4, 1), torch.zeros(4, 1)
    with pytest.raises(ValueError, match="residual"):
        kernel.dequant_rows(out, span, lo, torch.zeros(8), None, 127, 0, residual=torch.zeros(4, 7))


@pytest.mark.parametrize("norm_bias", [True, False])
def test_layernorm_in_the_dequantize_pass(kernel, norm_bias):
    """forward_add_norm (BERT's dense -> + residual -> LayerNorm): the row kernel's one pass equals
    torch's LayerNorm over the separately added output, and the torch-ops glue does the same."""
    x, w, b = _data(n=384)
    residual = torch.randn(x.shape[0], 384, generator=torch.Generator().manual_seed(7)) * 3
    norm = nn.LayerNorm(384, eps=1e-12, bias=norm_bias)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(384) + 0.5)
        if norm_bias:
            norm.bias.copy_(torch.randn(384))
    for glue in (kernel, None):
        weight = Int8Weight.quantize(w, b, dataclasses.replace(SUPPORT, rows_kernel=glue), x.abs().amax(0))
        layer = Linear(96, 384)
        layer.int8_weight = weight
        got = layer.forward_add_norm(x, residual, norm)
        expected = norm(int8_linear(x, weight) + residual)
        assert torch.allclose(got, expected, atol=2e-5, rtol=0)
        assert _cos(got, norm(F.linear(x, w, b) + residual)) >= 0.999


def test_c_kernel_rejects_a_layernorm_of_another_width(kernel):
    out = torch.zeros(4, 8)
    span, lo = torch.ones(4, 1), torch.zeros(4, 1)
    with pytest.raises(ValueError, match="LayerNorm"):
        kernel.dequant_rows(out, span, lo, torch.zeros(8), None, 127, 0, norm=(torch.ones(7), None, 1e-5))
