"""What the scheduler hands the model runner per batch, and what it gets back.

`ForwardInput` names the fields of one tokenized input that the runner reads; the scheduler's
message (wire/io_struct.TokenizedEmbeddingReqInput) has them, so the executor needs nothing
from the scheduler's folder. `ForwardOutput` never crosses a socket: the scheduler copies it into its
BatchEmbeddingOutput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence, Union

import numpy as np


class ForwardInput(Protocol):
    rid: str
    input_ids: np.ndarray  # int32 [n]
    token_type_ids: Optional[np.ndarray]  # int32 [n], BERT-style pairs
    # Images (Qwen2-VL), None for text-only inputs:
    pixel_values: Optional[np.ndarray]  # float32 [patches, C * T * P * P]
    image_grid_thw: Optional[np.ndarray]  # int64 [images, 3]
    mrope_positions: Optional[np.ndarray]  # int64 [3, n]
    # Per-token output (layers/token_outputs.py: "hidden", "query", "document"), None: pooled only;
    # and, for ColBERT query expansion, how many leading tokens are keys (None: all).
    token_output: Optional[str]
    key_len: Optional[int]

    @property
    def num_tokens(self) -> int: ...

    @property
    def is_sparse(self) -> bool:
        """The input's OutputSpec task is sparse weights ({token_id: weight}), not a dense vector."""
        ...


@dataclass
class ForwardOutput:
    """What ModelRunner.run_requests returns for a batch that has sparse rows (a plain float32
    [B, dim] array otherwise)."""

    embeddings: np.ndarray  # float32 [B, dim]: vectors or logits; [B, 0] for a sparse-only model
    sparse_indices: Optional[np.ndarray] = None  # int32 [N]: every sparse row's token ids, concatenated
    sparse_values: Optional[np.ndarray] = None  # float32 [N]: their weights
    sparse_offsets: Optional[np.ndarray] = None  # int64 [B + 1]: row i owns entries offsets[i]:offsets[i + 1]
    # Per-token rows (TokenTensors): float32 values flattened end to end, the token id of each
    # vector, and per-row offsets in tokens and in values. None: no input asked for tokens.
    token_values: Optional[np.ndarray] = None  # float32 [E]
    token_ids: Optional[np.ndarray] = None  # int32 [N]
    token_offsets: Optional[np.ndarray] = None  # int64 [B + 1]
    token_value_offsets: Optional[np.ndarray] = None  # int64 [B + 1]


# One batch of inputs -> float32 [B, dim], or a ForwardOutput when some input asked for sparse
# weights (ModelRunner.run_requests, or a fake in tests).
ForwardFn = Callable[[Sequence[ForwardInput]], Union[np.ndarray, ForwardOutput]]
