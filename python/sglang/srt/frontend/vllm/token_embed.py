"""vLLM's `token_embed` pooling task: one vector per token, as vLLM's token-embedding head makes it.

The rows are the hidden states /embed_all serves (the detokenizer sends them raw, float32), then,
per row as vLLM does: the first `dimensions` values kept, L2-normalized unless `normalize: false`.
`float` answers `[[f32, ...], ...]` per input; `base64` the row-major bytes of the whole
[tokens, dim] matrix in `embed_dtype` and `endianness`, as vLLM flattens a tensor.
"""

from __future__ import annotations

import base64
import sys
from typing import Optional

import numpy as np
import orjson

from sglang.srt.renderer.detokenizer_manager import vector_bytes
from sglang.srt.wire.io_struct import FORMAT_BASE64

NORM_EPS = 1e-12  # torch.nn.functional.normalize's floor on the norm


def token_rows(raw: bytes, token_ids: Optional[bytes], width: Optional[int]) -> np.ndarray:
    """The [tokens, hidden] float32 matrix of one input's raw per-token payload."""
    flat = np.frombuffer(raw, dtype="<f4")
    count = len(orjson.loads(token_ids)) if token_ids is not None else None
    if count:
        return flat.reshape(count, -1)
    if width:
        return flat.reshape(-1, width)
    return flat.reshape(0, 0)


def shape_rows(rows: np.ndarray, dimensions: Optional[int], normalize: bool) -> np.ndarray:
    if dimensions is not None:
        rows = rows[:, :dimensions]
    rows = rows.astype(np.float32)
    if normalize and rows.size:
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        rows = rows / np.maximum(norms, NORM_EPS)
    return rows


def render_rows(rows: np.ndarray, encoding_format: str, embed_dtype: Optional[str], endianness: Optional[str]) -> bytes:
    if encoding_format == FORMAT_BASE64:
        order = sys.byteorder if endianness in (None, "native") else endianness
        data = vector_bytes(rows.reshape(-1), embed_dtype or "float32", order)
        return b'"' + base64.b64encode(data) + b'"'
    if rows.size == 0:
        return b"[]"
    return orjson.dumps(np.ascontiguousarray(rows, dtype="<f4"), option=orjson.OPT_SERIALIZE_NUMPY)
