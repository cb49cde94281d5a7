"""Row-chunked token-wise blocks and the in-place gated activation: same numbers, bounded tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.srt.layers.activation import act_and_mul, silu_and_mul
from sglang.srt.layers.row_chunks import in_row_chunks


def test_in_row_chunks_runs_fn_on_bounded_slices_and_joins_them_in_order():
    x = torch.randn(23, 8)
    w = torch.randn(8, 5)
    seen = []

    def block(rows: torch.Tensor) -> torch.Tensor:
        seen.append(rows.shape[0])
        return F.gelu(rows @ w)

    out = in_row_chunks(block, x, rows=10)
    assert seen == [10, 10, 3]
    assert torch.allclose(out, F.gelu(x @ w), atol=1e-6)


def test_in_row_chunks_slices_every_input_alike_and_fills_every_output():
    x, scale = torch.randn(9, 4), torch.randn(9, 1)
    strided = torch.randn(9, 12)[:, 4:8]  # a view, as q/k/v are of the fused projection

    def block(rows, s, view):
        assert rows.shape[0] == s.shape[0] == view.shape[0] <= 4
        return rows * s, view + 1

    scaled, shifted = in_row_chunks(block, x, scale, strided, rows=4)
    assert torch.equal(scaled, x * scale) and torch.equal(shifted, strided + 1)


def test_in_row_chunks_is_one_call_up_to_the_limit():
    seen = []
    x = torch.zeros(10, 4)
    assert in_row_chunks(lambda rows: seen.append(rows.shape[0]) or rows, x, rows=10) is x
    assert seen == [10]


def test_gated_activation_in_place_matches_the_plain_product():
    x = torch.randn(7, 12)
    gate, up = x.chunk(2, dim=-1)
    with torch.inference_mode():
        assert torch.equal(silu_and_mul(x), F.silu(gate) * up)
        assert torch.equal(act_and_mul(x, torch.tanh), torch.tanh(gate) * up)
        assert torch.equal(x, torch.cat([gate, up], dim=-1))  # the input is left as it was


def test_gated_activation_keeps_autograd_working():
    x = torch.randn(3, 8, requires_grad=True)
    silu_and_mul(x).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
