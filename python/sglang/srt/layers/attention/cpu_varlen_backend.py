"""CPU attention through the compiled varlen kernel (cpu_kernel_loader): one call per layer.

The whole batch's packed q/k/v go to the kernel with the sequences' offsets; no padding, no
gathers, no per-sequence Python loop. The kernel covers what embedding models use on CPU:
float32 and bfloat16, multi-head and grouped-query attention, bidirectional or causal, with or
without a sliding window, any head size. It wins where sequences are short, which is where
embedding traffic lives; beyond a few hundred tokens torch's SDPA (GEMM-based flash attention)
is faster, so sequences longer than `max_kernel_len` go to it, as unpadded views, in the same
layer. benchmark/bench_attention_cpu.py compares the two; benchmark/NOTES.md keeps the numbers.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.base import AttentionBackend
from sglang.srt.layers.attention.cpu_kernel_loader import DTYPE_CODES, VarlenAttentionKernel
from sglang.srt.layers.attention.torch_native_backend import AttnGroup, TorchNativeAttnBackend

if TYPE_CHECKING:
    from sglang.srt.layers.attention.layer import AttentionLayer
    from sglang.srt.model_executor.forward_batch import ForwardBatch

# Query rows per work item: a 512-token sequence still spreads over 8 threads per head, while a
# typical 20-100-token one stays one item per head (its keys are staged once).
BLOCK_ROWS = 64
SUPPORTED_DTYPES = tuple(DTYPE_CODES)
# Longest sequence the kernel takes, per dtype: where it and SDPA cross over on the 2-core
# avx512_bf16 machine (head_dim 32-128; benchmark/NOTES.md). bf16 dot products keep it ahead
# longer than float32 FMAs do.
MAX_KERNEL_LEN = {torch.float32: 256, torch.bfloat16: 512}


class CpuVarlenAttnBackend(AttentionBackend):
    name = "cpu_varlen"
    supports_position_bias = True
    supports_key_lens = True

    def __init__(self, kernel: VarlenAttentionKernel, max_kernel_len: int = 0) -> None:
        self.kernel = kernel
        self.max_kernel_len = max_kernel_len  # 0: every sequence goes to the kernel
        self.sdpa = TorchNativeAttnBackend()

    @classmethod
    def for_dtype(cls, kernel: VarlenAttentionKernel, dtype: torch.dtype) -> "CpuVarlenAttnBackend":
        return cls(kernel, MAX_KERNEL_LEN.get(dtype, 0))

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        """The kernel reads the batch's own cu_seqlens; only sequences over the limit need a plan."""
        limit, lens = self.max_kernel_len, forward_batch.seq_lens_cpu
        keys = forward_batch.key_lens_cpu or lens
        long_groups = []
        if limit and max(lens, default=0) > limit:
            for start, n, kn in zip(itertools.accumulate(lens, initial=0), lens, keys):
                if n > limit:
                    key_valid = (torch.arange(n) < kn)[None] if kn < n else None
                    long_groups.append(AttnGroup(1, n, (start, start + n), key_valid=key_valid))
        forward_batch.attn_metadata = long_groups

    @staticmethod
    def _dense_rows(x: torch.Tensor) -> torch.Tensor:
        return x if x.stride(-1) == 1 else x.contiguous()

    def forward(
        self, q, k, v, layer: "AttentionLayer", forward_batch: "ForwardBatch", position_bias=None
    ) -> torch.Tensor:
        long_groups: list[AttnGroup] = forward_batch.attn_metadata
        q, k, v = self._dense_rows(q), self._dense_rows(k), self._dense_rows(v)
        out = torch.empty(q.shape, dtype=q.dtype)
        self.kernel(
            q,
            k,
            v,
            out,
            forward_batch.cu_seqlens,
            num_heads=layer.num_heads,
            num_kv_heads=layer.num_kv_heads,
            head_dim=layer.head_dim,
            scale=layer.scaling,
            causal=layer.causal,
            window=layer.sliding_window,
            block_rows=BLOCK_ROWS,
            max_seq_len=self.max_kernel_len,
            bias=None if position_bias is None else position_bias.table,
            bias_center=0 if position_bias is None else position_bias.center,
            key_lens=forward_batch.key_lens,
        )
        if long_groups:
            self.sdpa.run_groups(q, k, v, layer, long_groups, out, position_bias)
        return out
