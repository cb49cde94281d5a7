"""A CPU stand-in for the part of FlashInfer 0.5's API that our backend uses, for CI without a GPU.

It computes attention naively but keeps the contract we rely on, as read from FlashInfer's source,
and fails loudly where the real library would misbehave:
- FA2 head dims must be multiples of 64;
- `window_left` bounds keys on the left only (key >= query - window_left);
- a custom mask is bit-packed per sequence (little-endian) by a kernel that reads the indptr, so
  mask and indptr must sit on the same device; a non-graph wrapper keeps its last mask forever;
- in CUDA-graph mode plan() copies into the fixed buffers given at construction (fixed batch size,
  total rows bounded by the first plan) and run() reads those buffers when it runs (replays).
"""

from __future__ import annotations

import math
import sys
import types
from typing import Optional

import torch


def _pack_segments(mask: torch.Tensor, bit_indptr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    packed, byte_indptr = [], [0]
    weights = torch.tensor([1 << i for i in range(8)], dtype=torch.int32)
    for b in range(len(bit_indptr) - 1):
        seg = mask[int(bit_indptr[b]) : int(bit_indptr[b + 1])].to("cpu", torch.int32)
        seg = torch.nn.functional.pad(seg, (0, (-seg.numel()) % 8))
        packed.append((seg.view(-1, 8) * weights).sum(1).to(torch.uint8))
        byte_indptr.append(byte_indptr[-1] + packed[-1].numel())
    return torch.cat(packed), torch.tensor(byte_indptr, dtype=torch.int32)


class BatchPrefillWithRaggedKVCacheWrapper:
    def __init__(
        self,
        float_workspace_buffer: torch.Tensor,
        kv_layout: str = "NHD",
        use_cuda_graph: bool = False,
        qo_indptr_buf: Optional[torch.Tensor] = None,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        custom_mask_buf: Optional[torch.Tensor] = None,
        mask_indptr_buf: Optional[torch.Tensor] = None,
        backend: str = "auto",
        jit_args=None,
        jit_kwargs=None,
    ) -> None:
        assert kv_layout == "NHD"
        self.float_workspace = float_workspace_buffer
        self.int_workspace = torch.empty(8, dtype=torch.uint8)
        self.use_cuda_graph = use_cuda_graph
        if use_cuda_graph:
            if not (torch.is_tensor(qo_indptr_buf) and torch.is_tensor(kv_indptr_buf)):
                raise ValueError("qo_indptr_buf / kv_indptr_buf should be tensors in cuda graph mode")
            self.fixed_batch_size = len(qo_indptr_buf) - 1
        self.qo_indptr, self.kv_indptr = qo_indptr_buf, kv_indptr_buf
        self.custom_mask, self.mask_indptr = custom_mask_buf, mask_indptr_buf
        self.max_total_rows: Optional[int] = None
        self.backend = backend
        self.plan_calls = 0

    def reset_workspace_buffer(self, float_workspace_buffer: torch.Tensor, int_workspace_buffer: torch.Tensor) -> None:
        self.float_workspace, self.int_workspace = float_workspace_buffer, int_workspace_buffer

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        num_qo_heads,
        num_kv_heads,
        head_dim_qk,
        head_dim_vo=None,
        custom_mask=None,
        packed_custom_mask=None,
        causal=False,
        pos_encoding_mode="NONE",
        use_fp16_qk_reduction=False,
        window_left=-1,
        logits_soft_cap=None,
        sm_scale=None,
        rope_scale=None,
        rope_theta=None,
        q_data_type="float16",
        kv_data_type=None,
        non_blocking=True,
        **unused,
    ) -> None:
        if head_dim_qk % 64 or (head_dim_vo or head_dim_qk) % 64:
            raise ValueError(f"FA2 prefill head_dim must be a multiple of 64, got {head_dim_qk}")
        assert num_qo_heads % num_kv_heads == 0
        assert packed_custom_mask is None, "our backend hands FlashInfer unpacked masks"
        qo_cpu, kv_cpu = qo_indptr.to("cpu"), kv_indptr.to("cpu")
        assert torch.equal(qo_cpu, kv_cpu), "self-attention: kv_indptr == qo_indptr"
        batch_size, total = len(qo_cpu) - 1, int(qo_cpu[-1])
        packed = mask_indptr = None
        if custom_mask is not None:
            if custom_mask.device != qo_indptr.device:
                raise RuntimeError("segment_packbits reads the indptr on the mask's device")
            lens = (qo_cpu[1:] - qo_cpu[:-1]).long()
            bit_indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lens * lens, 0)])
            assert custom_mask.numel() == int(bit_indptr[-1])
            packed, mask_indptr = _pack_segments(custom_mask, bit_indptr)
        if self.use_cuda_graph:
            if self.max_total_rows is None:
                self.max_total_rows = total
            elif total > self.max_total_rows:
                raise ValueError("total rows cannot exceed those of the first plan in cuda graph mode")
            if batch_size != self.fixed_batch_size:
                raise ValueError(f"batch size {batch_size} != fixed {self.fixed_batch_size} in cuda graph mode")
            self.qo_indptr.copy_(qo_indptr)
            self.kv_indptr.copy_(kv_indptr)
            if packed is not None:
                if not (torch.is_tensor(self.custom_mask) and torch.is_tensor(self.mask_indptr)):
                    raise ValueError("custom_mask_buf / mask_indptr_buf are needed for masks in cuda graph mode")
                self.custom_mask[: len(packed)] = packed.to(self.custom_mask.device)
                self.mask_indptr.copy_(mask_indptr)
        else:
            self.qo_indptr, self.kv_indptr = qo_cpu.clone(), kv_cpu.clone()
            if packed is not None:  # never reset to None: FlashInfer keeps a planned mask too
                self.custom_mask, self.mask_indptr = packed, mask_indptr
        self.causal, self.window_left, self.sm_scale = causal, window_left, sm_scale
        self.dtype = q_data_type
        self.heads = (num_qo_heads, num_kv_heads, head_dim_qk)
        self.plan_calls += 1

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        hq, hk, d = self.heads
        assert q.dtype == self.dtype and k.dtype == self.dtype, "q/k dtype differs from the planned one"
        assert q.shape[1:] == (hq, d) and k.shape[1:] == (hk, d) and v.shape[1:] == (hk, d)
        indptr = self.qo_indptr.to("cpu").tolist()
        assert q.shape[0] == indptr[-1] == k.shape[0], "q rows must equal qo_indptr[-1]"
        use_mask = self.custom_mask is not None
        scale = self.sm_scale if self.sm_scale is not None else 1.0 / math.sqrt(d)
        out = torch.zeros_like(q)
        for b in range(len(indptr) - 1):
            s, e = indptr[b], indptr[b + 1]
            n = e - s
            if n == 0:
                continue
            qb = q[s:e].float().transpose(0, 1)
            kb = k[s:e].float().transpose(0, 1).repeat_interleave(hq // hk, 0)
            vb = v[s:e].float().transpose(0, 1).repeat_interleave(hq // hk, 0)
            i = torch.arange(n)[:, None]
            j = torch.arange(n)[None, :]
            allowed = torch.ones(n, n, dtype=torch.bool)
            if use_mask:
                offset = int(self.mask_indptr[b])
                bits = self.custom_mask[offset : offset + (n * n + 7) // 8].to("cpu", torch.int32)
                unpacked = (bits[:, None] >> torch.arange(8)) & 1
                allowed &= unpacked.reshape(-1)[: n * n].view(n, n).bool()
            elif self.causal:
                allowed &= j <= i
            if self.window_left >= 0:
                allowed &= j >= i - self.window_left
            scores = (qb @ kb.transpose(1, 2)) * scale
            scores = scores.masked_fill(~allowed, float("-inf"))
            out[s:e] = (scores.softmax(-1) @ vb).transpose(0, 1).to(q.dtype)
        return out


def install(monkeypatch) -> types.ModuleType:
    """Make `import flashinfer` find this stand-in (and re-import our backend against it)."""
    module = types.ModuleType("flashinfer")
    module.BatchPrefillWithRaggedKVCacheWrapper = BatchPrefillWithRaggedKVCacheWrapper
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    monkeypatch.delitem(sys.modules, "sglang.srt.layers.attention.flashinfer_backend", raising=False)
    return module
