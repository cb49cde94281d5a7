"""Matryoshka rules: which `dimensions` a request may ask for (one check for the HTTP API and
Engine.encode alike), and how a vector is cut and normalized (`shape_rows`: the renderer's, and
ModelRunner.embed's for tests and benchmarks).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind


def validate_dimensions(dimensions: Optional[int], model_info: ModelInfo, model_name: str) -> None:
    """Raise an INVALID_REQUEST EmbeddingError unless `dimensions` is None or a width this model can return.

    The model's full width is always accepted (tools send it to every model); a declared
    `matryoshka_dimensions` list is the only other widths allowed, even with `is_matryoshka: true`;
    `is_matryoshka` without a list allows any width from 1 to the full one.
    """
    if dimensions is None:
        return
    if isinstance(dimensions, bool) or not isinstance(dimensions, int):
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, f"dimensions must be an integer, not {dimensions!r}.", param="dimensions"
        )
    if dimensions < 1:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, f"dimensions must be at least 1, got {dimensions}.", param="dimensions"
        )
    width = model_info.embedding_dim
    if dimensions == width:
        return
    if not model_info.is_matryoshka:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"Model '{model_name}' does not support matryoshka representation, "
            "changing output dimensions will lead to poor results.",
            param="dimensions",
        )
    if dimensions > width:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"dimensions {dimensions} is greater than the model's embedding size {width}.",
            param="dimensions",
        )
    allowed = model_info.matryoshka_dimensions
    if allowed and dimensions not in allowed:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"Model '{model_name}' only supports matryoshka dimensions {list(allowed)}; "
            f"dimensions {dimensions} would lead to poor results.",
            param="dimensions",
        )


NORM_EPS = 1e-12  # torch.nn.functional.normalize's floor on the norm: a zero row stays zero


def shape_rows(rows: np.ndarray, dimensions: Optional[int], normalize: bool) -> np.ndarray:
    """float32 rows [..., dim]: the first `dimensions` values of each (None: all), then each
    L2-normalized when `normalize` (a cut of a normalized vector is normalized again, as
    sentence-transformers' truncate_dim with normalize_embeddings does)."""
    rows = np.asarray(rows, dtype=np.float32)
    if dimensions is not None and dimensions < rows.shape[-1]:
        rows = rows[..., :dimensions]
    if normalize and rows.size:
        norms = np.linalg.norm(rows, axis=-1, keepdims=True)
        rows = rows / np.maximum(norms, np.float32(NORM_EPS))
    return rows
