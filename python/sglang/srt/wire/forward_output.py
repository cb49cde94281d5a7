"""The rows one forward pass makes, in one type: what ModelRunner.run_requests (every ForwardFn)
returns, and the columns BatchEmbeddingOutput inherits, so each field is declared once and travels
to the renderer as the runner filled it; the scheduler adds only its own columns (rids, queue
times, error codes, output specs, trace contexts).

It lives here, under the message types, because BatchEmbeddingOutput (wire/io_struct.py) extends
it; model_executor/forward_io.py names it for the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

import numpy as np


@dataclass
class ForwardOutput:
    """One batch's rows: a pooled float32 row per input (vectors or logits; width 0 for a
    sparse-only model or a batch answered without a forward), plus the packed sparse and per-token
    rows when some input asked for them (None otherwise)."""

    embeddings: np.ndarray  # float32 [B, dim]
    # Sparse rows: row i owns entries sparse_offsets[i]:sparse_offsets[i + 1] of the concatenated
    # token ids and weights; only Task.SPARSE rows are rendered from them.
    sparse_indices: Optional[np.ndarray] = None  # int32 [N]
    sparse_values: Optional[np.ndarray] = None  # float32 [N]
    sparse_offsets: Optional[np.ndarray] = None  # int64 [B + 1]
    # Per-token rows (ColBERT vectors, hidden states), packed the same way: row i has
    # token_ids[token_offsets[i]:token_offsets[i + 1]] and that many vectors, flattened end to end,
    # in token_values[token_value_offsets[i]:token_value_offsets[i + 1]].
    token_values: Optional[np.ndarray] = None  # float32 [E]
    token_ids: Optional[np.ndarray] = None  # int32 [N]
    token_offsets: Optional[np.ndarray] = None  # int64 [B + 1]
    token_value_offsets: Optional[np.ndarray] = None  # int64 [B + 1]

    def __post_init__(self) -> None:
        # One float32 C-contiguous [B, dim] matrix whoever made it (a no-op for the runner's rows
        # and for decoded frames), so readers need no conversion of their own.
        self.embeddings = np.ascontiguousarray(self.embeddings, dtype=np.float32)
        if self.embeddings.ndim != 2:
            raise ValueError(f"pooled rows must be [batch, dim], got shape {self.embeddings.shape}")

    def columns(self) -> dict[str, Any]:
        """This type's fields by name (the arrays themselves, not copies), for a subclass's constructor."""
        return {f.name: getattr(self, f.name) for f in fields(ForwardOutput)}
