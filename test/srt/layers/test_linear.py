"""Linear layers on CPU: oneDNN's prepacked weights give the same numbers as F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.layers.linear import Linear, QKVLinear, onednn_linear_dtypes, prepack_cpu_linears

needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"),
    reason="this torch build has no oneDNN",
)


def _filled(layer: Linear, seed: int) -> Linear:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.1)
        if layer.bias is not None:
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))
    return layer


def _reference(x: torch.Tensor, weight: torch.Tensor, bias, gelu: bool) -> torch.Tensor:
    out = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
    return F.gelu(out) if gelu else out


@needs_onednn
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rows", [1, 7, 300])
@pytest.mark.parametrize("gelu", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_prepacked_matches_plain_linear(dtype, tol, rows, gelu, bias):
    layer = _filled(Linear(96, 200, bias=bias), seed=rows).to(dtype)
    plain_weight = layer.weight.detach().clone()
    x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(1)).to(dtype)
    expected = _reference(x, plain_weight, layer.bias, gelu)
    before = (layer.forward_gelu(x) if gelu else layer(x)).float()

    packs = dtype in onednn_linear_dtypes()  # bf16 needs AVX-512 or AMX; AVX2 CPUs keep F.linear
    assert layer.prepack(release_plain=True) == packs
    after = (layer.forward_gelu(x) if gelu else layer(x)).float()

    scale = expected.abs().max().item()
    assert (after - expected).abs().max().item() <= tol * scale
    assert (after - before).abs().max().item() <= tol * scale
    if packs:
        assert layer.weight.numel() == 0 and layer.weight.dtype == dtype  # the plain copy's memory is given back
    else:
        assert layer.packed_weight is None and torch.equal(layer.weight, plain_weight)


@needs_onednn
def test_bfloat16_uses_onednn_only_where_the_cpu_has_bf16_support():
    supported = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert (torch.bfloat16 in onednn_linear_dtypes()) == supported
    assert torch.float32 in onednn_linear_dtypes()


@needs_onednn
def test_prepack_keeps_tied_weights_and_skips_other_dtypes():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.head = Linear(16, 50, bias=False)
            self.head.weight = self.embed.weight  # tied, as in models whose LM head reuses the embedding
            self.qkv = _filled(QKVLinear(16, 4, 2), seed=3)
            self.fp16 = Linear(16, 8).to(torch.float16)  # oneDNN's CPU linear takes fp32 / bf16 only

    model = Tied()
    tied_before = model.embed.weight.detach().clone()
    x = torch.randn(5, 16)
    qkv_expected = model.qkv(x)

    assert prepack_cpu_linears(model) == 2  # head and qkv; the float16 layer stays plain
    assert torch.equal(model.embed.weight, tied_before)  # still usable by the embedding
    assert model.head.packed_weight is not None and model.head.weight.numel() == 50 * 16
    assert model.qkv.weight.numel() == 0
    assert model.fp16.packed_weight is None and model.fp16.weight.numel() == 8 * 16
    q, k, v = model.qkv.split(model.qkv(x))
    eq, ek, ev = model.qkv.split(qkv_expected)
    for got, want in ((q, eq), (k, ek), (v, ev)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert prepack_cpu_linears(model) == 0  # packing twice is harmless


def test_prepack_refuses_non_cpu_and_unsupported_dtypes():
    layer = _filled(Linear(8, 4), seed=4).to(torch.float64)  # torch.empty may hold NaNs
    assert not layer.prepack(release_plain=True)
    assert layer.packed_weight is None and layer.weight.numel() == 32
    x = torch.randn(3, 8, dtype=torch.float64)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("prepacked", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_add_is_linear_plus_the_residual(dtype, tol, prepacked, bias):
    """BERT's dense -> + residual: oneDNN adds it in the matmul's epilogue (prepacked or not,
    float32 and, where oneDNN has it, bfloat16); elsewhere a plain add."""
    layer = _filled(Linear(96, 200, bias=bias), seed=5).to(dtype)
    expected_weight = layer.weight.detach().clone()
    x = torch.randn(33, 96, generator=torch.Generator().manual_seed(2)).to(dtype)
    residual = torch.randn(33, 200, generator=torch.Generator().manual_seed(4)).to(dtype)
    if prepacked:
        layer.prepack(release_plain=True)
    got = layer.forward_add(x, residual).float()
    expected = _reference(x, expected_weight, layer.bias, False) + residual.float()
    assert got.dtype == torch.float32 and got.shape == (33, 200)
    assert (got - expected).abs().max().item() <= tol * expected.abs().max().item()
    if dtype == torch.float32:  # the fused add is the separate add's arithmetic
        assert torch.allclose(got, (layer(x) + residual).float(), atol=1e-6, rtol=0)
