"""What the scheduler hands the model runner per batch, and what it gets back.

`ForwardInput` names the fields of one tokenized input that the runner reads; the scheduler's
message (wire/io_struct.TokenizedEmbeddingReqInput) has them, so the executor needs nothing
from the scheduler's folder. Every forward returns a `ForwardOutput` (wire/forward_output.py): the
scheduler's BatchEmbeddingOutput extends that type and takes its columns as they are.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from sglang.srt.wire.forward_output import ForwardOutput


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


# One batch of inputs -> its rows, in input order (ModelRunner.run_requests, or a fake in tests).
ForwardFn = Callable[[Sequence[ForwardInput]], ForwardOutput]
