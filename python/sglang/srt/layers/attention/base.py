"""The attention-backend interface: metadata once per batch, attention once per layer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Optional, Sequence

import torch

if TYPE_CHECKING:
    from sglang.srt.layers.attention.layer import AttentionLayer
    from sglang.srt.layers.attention.position_bias import PositionBias
    from sglang.srt.model_executor.forward_batch import ForwardBatch


class AttentionBackend(ABC):
    """Runs attention over packed sequences described by a ForwardBatch.

    q is [T, num_heads * head_dim]; k and v are [T, num_kv_heads * head_dim]; the result has q's
    shape. Every sequence attends only to itself (bidirectionally, or causally for decoders).
    """

    name: str = "base"
    # Extras some models need (the backends that lack one are never chosen for such a model or
    # batch): an additive relative-position score bias (`position_bias`, MPNet), and per-sequence
    # key counts (`ForwardBatch.key_lens`, ColBERT's query expansion).
    supports_position_bias: bool = False
    supports_key_lens: bool = False

    @abstractmethod
    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        """Build whatever every layer of this batch shares, and store it on forward_batch."""

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "AttentionLayer",
        forward_batch: "ForwardBatch",
        position_bias: Optional["PositionBias"] = None,
    ) -> torch.Tensor:
        """Attention for one layer (plus `position_bias` on the scores, for backends that
        support it)."""

    def bind_layers(self, layers: Sequence["AttentionLayer"]) -> None:
        """Learn every attention shape the model uses, once after loading (before any forward).

        Backends that prepare per-shape state ahead of time (FlashInfer plans, CUDA-graph wrappers)
        need this; the default keeps nothing.
        """

    # ----- CUDA-graph hooks (backends that support capture override these) -----
    supports_cuda_graph: bool = False

    def init_cuda_graph_state(self, buckets: Sequence[tuple[int, int]]) -> None:
        """Allocate fixed-address state for graphs of (num_tokens, num_seqs) each; before capture."""
        raise NotImplementedError(f"{self.name} attention does not support CUDA graphs")

    def init_forward_metadata_capture_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        """Plan the static batch of one bucket before its graph is captured (sets attn_metadata)."""
        raise NotImplementedError(f"{self.name} attention does not support CUDA graphs")

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        """Re-plan that static batch for the sequence layout just copied into it, before replay."""
        raise NotImplementedError(f"{self.name} attention does not support CUDA graphs")
