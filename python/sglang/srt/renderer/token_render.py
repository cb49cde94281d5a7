"""Render one per-token row (ColBERT vectors or hidden states) into its wire form, in the detokenizer.

- FORMAT_FLOAT: `[[0.1, ...], [...]]`, one array per token (TEI's /embed_all, the multi-vector
  `embedding` of /v1/embeddings);
- FORMAT_BASE64: the row's [n, dim] float32 matrix, row-major, little-endian, base64 (the client
  reshapes it with the model's `multi_vector_dim`, or the count of `token_ids`);
- FORMAT_RAW: those bytes as they are (the in-process Engine).
The token ids each vector belongs to become a JSON array beside the payload.
"""

from __future__ import annotations

import base64

import numpy as np
import orjson

from sglang.srt.wire.io_struct import FORMAT_BASE64, FORMAT_RAW, BatchEmbeddingOutput


def token_row(out: BatchEmbeddingOutput, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Row i's vectors [n, dim] and token ids [n]."""
    lo, hi = int(out.token_offsets[i]), int(out.token_offsets[i + 1])
    vlo, vhi = int(out.token_value_offsets[i]), int(out.token_value_offsets[i + 1])
    ids = out.token_ids[lo:hi]
    values = out.token_values[vlo:vhi]
    return values.reshape(len(ids), -1) if len(ids) else values.reshape(0, 0), ids


def render_token_row(vectors: np.ndarray, fmt: str) -> bytes:
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    if fmt == FORMAT_BASE64:
        return b'"' + base64.b64encode(vectors.tobytes()) + b'"'
    if fmt == FORMAT_RAW:
        return vectors.tobytes()
    if vectors.size == 0:
        return b"[]"
    return orjson.dumps(vectors, option=orjson.OPT_SERIALIZE_NUMPY)


def render_token_ids(ids: np.ndarray) -> bytes:
    return orjson.dumps(np.ascontiguousarray(ids, dtype=np.int32), option=orjson.OPT_SERIALIZE_NUMPY)
