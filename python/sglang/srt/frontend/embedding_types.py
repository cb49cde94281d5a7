"""Quantized and compact vectors (Cohere's `embedding_types`), computed as sentence-transformers'
`quantize_embeddings` computes them.

- `float`: the vector; `base64`: its little-endian float32 bytes, base64-encoded.
- `binary` / `ubinary`: one bit per dimension, set when the value is > 0, packed 8 to a byte with
  the first dimension in the top bit (the last byte zero-padded); `ubinary` is the bytes 0..255,
  `binary` the same minus 128 (int8).
- `int8` / `uint8`: each dimension cut into 256 equal steps between a minimum and a maximum, then
  `uint8 = clip(floor((x - min) / step), 0, 255)` and `int8 = uint8 - 128`. The ranges are the
  calibration: for a request of two or more inputs they are each dimension's minimum and maximum
  over that request's vectors, exactly what `quantize_embeddings(vectors, precision)` does. One
  input has no spread to measure (sentence-transformers refuses it), so a single vector is scaled
  between its own smallest and largest value in every dimension, i.e. `quantize_embeddings` with
  `ranges = [[min(v)] * dim, [max(v)] * dim]`.
  Batch-derived ranges make int8 values of different requests incomparable: quantize a corpus in
  one request (or compare int8 vectors only within one response).
"""

from __future__ import annotations

import base64
from typing import Iterable, Optional, Union

import numpy as np

from sglang.srt.errors import EmbeddingError, ErrorKind

EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary", "base64")


def check_embedding_types(types: Optional[Iterable[str]], param: str = "embedding_types") -> Optional[list[str]]:
    """The requested types in order without repeats (None when not asked); 400 naming a bad one."""
    if types is None:
        return None
    out = list(dict.fromkeys(types))
    if not out:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, f"{param} cannot be empty.", param=param)
    for t in out:
        if t not in EMBEDDING_TYPES:
            names = ", ".join(f"'{x}'" for x in EMBEDDING_TYPES)
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST, f"{param} value {t!r} is not supported; use {names}.", param=param
            )
    return out


def calibration_ranges(vectors: np.ndarray) -> np.ndarray:
    """[2, dim] per-dimension (min, max): over the request's vectors, or one vector's own range."""
    if vectors.shape[0] >= 2:
        return np.stack([vectors.min(axis=0), vectors.max(axis=0)]).astype(np.float32)
    v = vectors[0]
    return np.stack([np.full_like(v, v.min()), np.full_like(v, v.max())]).astype(np.float32)


def quantize(vectors: np.ndarray, precision: str) -> np.ndarray:
    """float32 [n, dim] -> int8 / uint8 [n, dim] or packed binary / ubinary [n, ceil(dim / 8)]."""
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1)
        return (packed.astype(np.int16) - 128).astype(np.int8) if precision == "binary" else packed
    ranges = calibration_ranges(vectors)
    starts = ranges[0]
    steps = (ranges[1] - ranges[0]) / 255
    steps = np.where(steps == 0, np.float32(1), steps)
    q = np.clip(np.floor((vectors - starts) / steps), 0, 255).astype(np.uint8)
    return (q.astype(np.int16) - 128).astype(np.int8) if precision == "int8" else q


def by_type(vectors: np.ndarray, types: list[str]) -> dict[str, Union[np.ndarray, list[str]]]:
    """Cohere's `embeddings` object: one [n, ...] array (or list of base64 strings) per requested
    type, one row per input; serialize with orjson.OPT_SERIALIZE_NUMPY (float32 values then print
    as their shortest float32 form, as /v1/embeddings does)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    out: dict[str, Union[np.ndarray, list[str]]] = {}
    for t in types:
        if t == "float":
            out[t] = vectors
        elif t == "base64":
            out[t] = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
        else:
            out[t] = quantize(vectors, t)
    return out
