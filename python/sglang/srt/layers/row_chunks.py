"""Row-chunked execution of token-wise work on CPU, to bound what one batch pins."""

from __future__ import annotations

from typing import Callable, Optional, Union

import torch

# Most tokens one call of token-wise work sees at a time on CPU. The projections around attention
# (fused q/k/v, per-head norms, RoPE and their temporaries) and a gated MLP's [gate | up] output are
# the largest tensors of a decoder's forward: for Qwen3-0.6B's layer shape one batch of 16,384
# tokens peaked 1.4 GB above the weights in one pass, ~0.9 GB in chunks of 4,096 rows, and
# matmuls of 4,096 rows run as fast per token as longer ones (benchmark/bench_row_chunks.py).
# GPUs keep one pass: their memory is budgeted up front, and a CUDA graph wants one kernel per shape.
ROW_CHUNK = 4096

Rows = Union[torch.Tensor, tuple[torch.Tensor, ...]]


def in_row_chunks(fn: Callable[..., Rows], *inputs: torch.Tensor, rows: Optional[int] = None) -> Rows:
    """fn(*inputs) for an fn that treats each row (token) on its own and returns one tensor or a
    tuple of tensors with a row per input row; the inputs are row-aligned. On CPU it runs over at
    most `rows` rows at a time (default ROW_CHUNK, read at each call) and each chunk's result is
    written into outputs allocated once: the same numbers, with fn's intermediate tensors bounded
    by `rows` and no second copy of the outputs for a concatenation."""
    rows = rows or ROW_CHUNK
    total = inputs[0].shape[0]
    if total <= rows or inputs[0].device.type != "cpu":
        return fn(*inputs)
    outputs: tuple[torch.Tensor, ...] = ()
    single = False
    for start in range(0, total, rows):
        part = fn(*(x[start : start + rows] for x in inputs))
        single = isinstance(part, torch.Tensor)
        parts = (part,) if single else tuple(part)
        if not outputs:
            outputs = tuple(p.new_empty((total, *p.shape[1:])) for p in parts)
        for out, p in zip(outputs, parts):
            out[start : start + p.shape[0]] = p
    return outputs[0] if single else outputs
