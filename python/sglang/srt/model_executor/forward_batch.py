"""ForwardBatch: one batch of packed sequences, handed explicitly to every layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

import numpy as np
import torch


class BatchAttention(Protocol):
    """The attention backend a batch runs on, as the batch and its layers call it
    (layers/attention/base.AttentionBackend implements it). Named here rather than imported: the
    backends' methods take a ForwardBatch, so the two modules would import each other."""

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None: ...

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: Any,
        forward_batch: ForwardBatch,
        position_bias: Any = None,
    ) -> torch.Tensor: ...


@dataclass
class ForwardBatch:
    """Sequences packed end to end without padding; `cu_seqlens` marks where each one starts.

    Built once per batch; attention backends hang their per-batch metadata on `attn_metadata`.
    """

    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64, 0-based within each sequence; [3, T] M-RoPE for image batches
    seq_lens: torch.Tensor  # [B] int32
    cu_seqlens: torch.Tensor  # [B + 1] int32
    seq_ids: torch.Tensor  # [T] int64, which sequence each token belongs to
    seq_lens_cpu: list[int]
    max_seqlen: int
    token_type_ids: Optional[torch.Tensor] = None  # [T] int64
    # Keys per sequence when some tokens may not be attended (ColBERT query expansion: the [MASK]
    # tokens appended to a query are queries, never keys); None: every token is a key.
    key_lens: Optional[torch.Tensor] = None  # [B] int32
    key_lens_cpu: Optional[list[int]] = None
    attn_backend: Optional[BatchAttention] = None
    attn_metadata: Any = None
    # Images (Qwen2-VL), set by model_executor/multimodal_batch.py for batches that hold any:
    pixel_values: Optional[torch.Tensor] = None  # [patches, C * T * P * P], every image of the batch
    image_grid_thw: Optional[np.ndarray] = None  # host int64 [images, 3]: (t, h, w) patches per image
    image_token_index: Optional[torch.Tensor] = None  # [merged patches] int64: the packed rows they fill

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @classmethod
    def from_token_lists(
        cls,
        token_lists: Sequence[np.ndarray],
        device: torch.device | str,
        token_type_lists: Optional[Sequence[Optional[np.ndarray]]] = None,
        attn_backend: Optional[BatchAttention] = None,
        key_lens: Optional[Sequence[Optional[int]]] = None,
    ) -> "ForwardBatch":
        lens = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=len(token_lists))
        if lens.size == 0 or lens.min() < 1:
            raise ValueError("every sequence in a batch needs at least one token")
        total = int(lens.sum())
        cu = np.zeros(lens.size + 1, dtype=np.int64)
        np.cumsum(lens, out=cu[1:])
        ids = np.concatenate(token_lists).astype(np.int64, copy=False)
        seq_ids = np.repeat(np.arange(lens.size, dtype=np.int64), lens)
        positions = np.arange(total, dtype=np.int64) - cu[:-1][seq_ids]
        types = None
        if token_type_lists is not None and any(t is not None for t in token_type_lists):
            types = np.concatenate(
                [t if t is not None else np.zeros(n, np.int64) for t, n in zip(token_type_lists, lens)]
            ).astype(np.int64, copy=False)

        def to_dev(a: np.ndarray, dtype=None) -> torch.Tensor:
            t = torch.from_numpy(a)
            if dtype is not None:
                t = t.to(dtype)
            return t.to(device, non_blocking=True)

        batch = cls(
            input_ids=to_dev(ids),
            positions=to_dev(positions),
            seq_lens=to_dev(lens, torch.int32),
            cu_seqlens=to_dev(cu, torch.int32),
            seq_ids=to_dev(seq_ids),
            seq_lens_cpu=lens.tolist(),
            max_seqlen=int(lens.max()),
            token_type_ids=to_dev(types) if types is not None else None,
            attn_backend=attn_backend,
        )
        if key_lens is not None and any(k is not None and k < n for k, n in zip(key_lens, batch.seq_lens_cpu)):
            keys = [n if k is None else max(1, min(int(k), n)) for k, n in zip(key_lens, batch.seq_lens_cpu)]
            batch.key_lens_cpu = keys
            batch.key_lens = to_dev(np.asarray(keys, dtype=np.int32))
        if attn_backend is not None:
            attn_backend.init_forward_metadata(batch)
        return batch
