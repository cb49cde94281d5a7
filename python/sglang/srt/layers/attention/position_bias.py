"""PositionBias: an additive attention-score bias that depends only on where a key sits relative
to its query (MPNet's bucketed relative positions).

Such a bias is the same for every sequence of a batch and every layer, so a model builds it once
per batch as a small table: column `center + (j - i)` of head h's row holds the bias of key j for
query i. The CPU kernel indexes the table directly; SDPA gets a dense [heads, L, L] expansion per
sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from sglang.srt.layers.attention.cpu_kernel_loader import BIAS_SLACK


@dataclass(frozen=True)
class PositionBias:
    table: torch.Tensor  # float32 [heads, 2 * max_len - 1 + BIAS_SLACK]
    center: int  # column of relative offset 0

    @classmethod
    def build(cls, max_len: int, bias_of: Callable[[torch.Tensor], torch.Tensor], device) -> "PositionBias":
        """A table covering offsets -(max_len - 1) .. max_len - 1 (and the kernel's slack past them);
        `bias_of` maps int64 offsets [W] (key - query) to per-head biases [W, heads]."""
        center = max(max_len, 1) - 1
        offsets = torch.arange(-center, center + 1 + BIAS_SLACK, dtype=torch.long, device=device)
        table = bias_of(offsets).to(torch.float32).t().contiguous()
        return cls(table, center)

    def dense(self, length: int) -> torch.Tensor:
        """float32 [heads, length, length]: the bias of every (query, key) pair of a sequence."""
        pos = torch.arange(length, device=self.table.device)
        columns = self.center + pos[None, :] - pos[:, None]  # [query, key]
        return self.table[:, columns]
