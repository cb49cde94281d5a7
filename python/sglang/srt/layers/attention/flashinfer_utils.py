"""Pure helpers of the FlashInfer backend: which plans a batch needs, masks, workspace sizes.

Kept apart from `flashinfer_backend.py` so they import (and are tested) without flashinfer or a GPU.
The facts about FlashInfer 0.5 they encode were read from its source:
- the FA2 prefill kernels are correct only for head dims that are multiples of 64, so smaller heads
  (MiniLM's 32) are zero-padded: zeros add nothing to q.k, and the padded output columns are dropped;
- `window_left` only bounds keys on the left (key >= query - window_left); a bidirectional window
  (|query - key| < w, EmbeddingGemma) needs a custom mask;
- a custom mask is planned per batch (bit-packed per sequence by FlashInfer), so masked layers get
  their own wrapper: a wrapper once planned with a mask keeps using it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence

import numpy as np
import torch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.layer import AttentionLayer

HEAD_DIM_MULTIPLE = 64
DEFAULT_FLOAT_WORKSPACE_BYTES = 128 * 1024 * 1024
INT_WORKSPACE_BYTES = 8 * 1024 * 1024  # what FlashInfer's wrappers allocate for their plan data
_CTA_TILE_Q_CHOICES = (16, 64, 128)  # the query tile heights FA2's planner picks from


def padded_head_dim(head_dim: int) -> int:
    return -(-head_dim // HEAD_DIM_MULTIPLE) * HEAD_DIM_MULTIPLE


class AttnShape(NamedTuple):
    """What distinguishes one attention layer from another for planning purposes."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    causal: bool
    sliding_window: Optional[int]  # our convention: |query - key| < window (causal: query - key)
    scaling: float

    @classmethod
    def of(cls, layer: "AttentionLayer") -> "AttnShape":
        return cls(
            layer.num_heads,
            layer.num_kv_heads,
            layer.head_dim,
            bool(layer.causal),
            layer.sliding_window,
            float(layer.scaling),
        )


@dataclass(frozen=True)
class PlanSpec:
    """One FlashInfer plan: every layer mapping to the same spec shares a planned wrapper."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int  # as planned: padded to a multiple of 64
    causal: bool
    window_left: int  # -1: no window
    mask_window: int  # > 0: bidirectional window applied through a custom mask
    sm_scale: float


def plan_spec(shape: AttnShape, max_seqlen: Optional[int]) -> PlanSpec:
    """The plan a layer needs for a batch whose longest sequence is `max_seqlen`.

    `max_seqlen=None` means "any batch" (CUDA graphs): a bidirectional window then always uses its
    mask. A causal window always uses `window_left`, which is free, so a batch never switches the
    kernel a layer compiled for.
    """
    window_left, mask_window = -1, 0
    w = shape.sliding_window
    if w is not None:
        if w < 1:
            raise ValueError(f"sliding window must be at least 1, got {w}")
        if shape.causal:
            window_left = w - 1
        elif max_seqlen is None or max_seqlen > w:
            mask_window = w
    return PlanSpec(
        shape.num_heads,
        shape.num_kv_heads,
        padded_head_dim(shape.head_dim),
        shape.causal,
        window_left,
        mask_window,
        shape.scaling,
    )


def cu_seqlens_cpu(seq_lens: Sequence[int]) -> torch.Tensor:
    """int32 [B + 1] prefix sums on the host: FlashInfer plans from host copies of its indptrs."""
    cu = np.zeros(len(seq_lens) + 1, dtype=np.int32)
    if len(seq_lens):
        cu[1:] = np.cumsum(np.asarray(seq_lens, dtype=np.int64))
    return torch.from_numpy(cu)


def window_mask(seq_lens: Sequence[int], window: int, device: torch.device | str) -> torch.Tensor:
    """Flat bool mask, sequence by sequence, each [L, L] row-major (query-major) with
    True where |query - key| < window: FlashInfer's custom-mask layout for a ragged batch."""
    lmax = max(seq_lens, default=0)
    if lmax == 0:
        return torch.zeros(0, dtype=torch.bool, device=device)
    ar = torch.arange(lmax, device=device)
    band = (ar[:, None] - ar[None, :]).abs() < window
    return torch.cat([band[:n, :n].reshape(-1) for n in seq_lens])


def float_workspace_bytes(specs: Sequence[PlanSpec], buckets: Sequence[tuple[int, int]], num_sms: int) -> int:
    """Bytes of FlashInfer's float workspace that every plan of these specs fits in.

    FA2 writes split-KV partial outputs there: num_qo_heads * grid * tile * (head_dim + 1) floats,
    where the grid is at most 2 * num_sms / num_kv_heads CTAs when the planner chooses to split, and
    in CUDA-graph mode (always split) up to ceil(tokens * group / tile) + seqs - 1 tiles per bucket.
    """
    need = DEFAULT_FLOAT_WORKSPACE_BYTES
    for spec in specs:
        group = spec.num_qo_heads // spec.num_kv_heads
        split_grid = max(1, 2 * num_sms // spec.num_kv_heads)
        per_row = spec.num_qo_heads * (spec.head_dim + 1) * 4
        for tile in _CTA_TILE_Q_CHOICES:
            need = max(need, per_row * split_grid * tile)
            for tokens, seqs in buckets:
                grid = max(split_grid, -(-tokens * group // tile) + seqs - 1)
                need = max(need, per_row * grid * tile)
    return need + (1 << 20)  # alignment slack
