"""Pool packed per-token hidden states into one vector per sequence."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch


class Pooler(nn.Module):
    """cls / mean / lasttoken / max pooling driven by the batch's packed lengths, in float32."""

    def __init__(self, method: str, normalize: bool) -> None:
        super().__init__()
        if method not in ("cls", "mean", "lasttoken", "max"):
            raise ValueError(f"unknown pooling method '{method}'")
        self.method = method
        self.normalize = normalize

    def pool(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        starts = fb.cu_seqlens[:-1].long()
        if self.method == "cls":
            return hidden.index_select(0, starts).float()
        if self.method == "lasttoken":
            return hidden.index_select(0, fb.cu_seqlens[1:].long() - 1).float()
        h = hidden.float()
        out = h.new_zeros(fb.batch_size, h.shape[-1])
        if self.method == "mean":
            out.index_add_(0, fb.seq_ids, h)
            return out / fb.seq_lens.to(out.dtype).unsqueeze(1)
        out.fill_(float("-inf"))
        return out.index_reduce_(0, fb.seq_ids, h, "amax", include_self=True)

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        pooled = self.pool(hidden, fb)
        return F.normalize(pooled, p=2, dim=-1) if self.normalize else pooled
