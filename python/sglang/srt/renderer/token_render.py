"""One input's per-token rows (ColBERT vectors or hidden states) out of a batch, in the detokenizer.

Their vectors are rendered by vector_render.render_vectors (float: `[[0.1, ...], [...]]`, one
array per token; base64: the row-major [n, dim] matrix, which the client reshapes with the model's
`multi_vector_dim` or the count of `token_ids`); the token ids each vector belongs to become a
JSON array beside the payload.
"""

from __future__ import annotations

import numpy as np
import orjson

from sglang.srt.wire.io_struct import BatchEmbeddingOutput


def token_row(out: BatchEmbeddingOutput, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Row i's vectors [n, dim] and token ids [n]."""
    lo, hi = int(out.token_offsets[i]), int(out.token_offsets[i + 1])
    vlo, vhi = int(out.token_value_offsets[i]), int(out.token_value_offsets[i + 1])
    ids = out.token_ids[lo:hi]
    values = out.token_values[vlo:vhi]
    return values.reshape(len(ids), -1) if len(ids) else values.reshape(0, 0), ids


def render_token_ids(ids: np.ndarray) -> bytes:
    return orjson.dumps(np.ascontiguousarray(ids, dtype=np.int32), option=orjson.OPT_SERIALIZE_NUMPY)
