"""CPU attention through the compiled varlen kernel (cpu_kernel_loader): one call per layer.

The whole batch's packed q/k/v go to the kernel with the sequences' offsets; no padding, no
gathers, no per-sequence Python loop. The kernel covers what embedding models use on CPU:
float32 and bfloat16, multi-head and grouped-query attention, bidirectional or causal, with or
without a sliding window, any head size. benchmark/bench_attention_cpu.py compares it with torch's
SDPA (TorchNativeAttnBackend); benchmark/NOTES.md keeps the numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.base import AttentionBackend
from sglang.srt.layers.attention.cpu_kernel_loader import DTYPE_CODES, VarlenAttentionKernel

if TYPE_CHECKING:
    from sglang.srt.layers.attention.layer import AttentionLayer
    from sglang.srt.model_executor.forward_batch import ForwardBatch

# Query rows per work item: a 512-token sequence still spreads over 8 threads per head, while a
# typical 20-100-token one stays one item per head (its keys are staged once).
BLOCK_ROWS = 64
SUPPORTED_DTYPES = tuple(DTYPE_CODES)


class CpuVarlenAttnBackend(AttentionBackend):
    name = "cpu_varlen"

    def __init__(self, kernel: VarlenAttentionKernel) -> None:
        self.kernel = kernel

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        lens = forward_batch.seq_lens_cpu
        cu = [0] * (len(lens) + 1)
        for i, n in enumerate(lens):
            cu[i + 1] = cu[i] + n
        forward_batch.attn_metadata = torch.tensor(cu, dtype=torch.int64)

    @staticmethod
    def _dense_rows(x: torch.Tensor) -> torch.Tensor:
        return x if x.stride(-1) == 1 else x.contiguous()

    def forward(self, q, k, v, layer: "AttentionLayer", forward_batch: "ForwardBatch") -> torch.Tensor:
        q, k, v = self._dense_rows(q), self._dense_rows(k), self._dense_rows(v)
        out = torch.empty(q.shape, dtype=q.dtype)
        return self.kernel(
            q, k, v, out, forward_batch.attn_metadata,
            num_heads=layer.num_heads, num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim,
            scale=layer.scaling, causal=layer.causal, window=layer.sliding_window, block_rows=BLOCK_ROWS,
        )
