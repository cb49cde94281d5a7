"""Multi-vector (ColBERT) requests on /v1/embeddings and /v1/rerank: which per-token output a
request gets, and the MaxSim score of a query against documents.

A ColBERT checkpoint (HF_ColBERT, PyLate) answers /v1/embeddings with one vector per token by
default; a model with an extra multi-vector head (bge-m3's colbert_linear.pt) answers with pooled
vectors unless the request sets `multi_vector: true`. `input_type` (frontend/input_types.py)
picks ColBERT's query or document form (markers, query expansion, punctuation skiplist) as well
as the model's prompt of that name.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sglang.srt.configs.model_info import Capability, ModelInfo, OutputKind
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.input_types import check_input_type, token_side


def multi_vector_output(
    model_info: ModelInfo, served: str, requested: Optional[bool], input_type: Optional[str], dimensions
) -> Optional[str]:
    """The per-token kind (TOKENS_QUERY / TOKENS_DOCUMENT) this request gets, None for pooled."""
    only_multi = model_info.embeddings_output is OutputKind.MULTI_VECTOR
    wanted = only_multi if requested is None else requested
    if not wanted:
        if only_multi:
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"Model '{served}' is a multi-vector (ColBERT) model and has no pooled vector; "
                "omit multi_vector or set it to true.",
                param="multi_vector",
            )
        return None
    if Capability.MULTI_VECTOR not in model_info.capabilities:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"Model '{served}' has no multi-vector head (a ColBERT checkpoint or bge-m3's colbert_linear.pt); "
            "POST /embed_all returns every token's hidden state.",
            param="multi_vector",
        )
    if dimensions is not None:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, "dimensions does not apply to multi-vector output.", param="dimensions"
        )
    check_input_type(input_type, model_info)
    return token_side(input_type)


# Options of /v1/embeddings that per-token rows do not take (they are rendered as the model gives them).
_OUTPUT_OPTIONS = {
    "normalize": lambda v: v is not None,
    "embed_dtype": lambda v: v not in (None, "float32"),
    "endianness": lambda v: v not in (None, "little", "native"),
    "embedding_types": lambda v: v is not None,
}
# And, when the checkpoint sets ColBERT's query / document lengths, the truncation it always applies.
_LENGTH_OPTIONS = {
    "truncate_prompt_tokens": lambda v: v is not None,
    "truncation_side": lambda v: v is not None,
    "truncate": lambda v: v is not None,
    "truncation_direction": lambda v: v is not None,
    "add_special_tokens": lambda v: v is False,
}


def check_multi_vector_options(request, model_info: ModelInfo) -> None:
    """400 naming a request option a multi-vector answer would not honour (rather than ignoring it)."""
    checks = dict(_OUTPUT_OPTIONS)
    cfg = model_info.colbert
    if cfg is not None and (cfg.query_length is not None or cfg.document_length is not None):
        checks.update(_LENGTH_OPTIONS)
    for name, is_set in checks.items():
        if is_set(getattr(request, name, None)):
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"`{name}` does not apply to multi-vector (ColBERT) output: per-token vectors come as the "
                "checkpoint makes them (its own query / document lengths, float32, little-endian).",
                param=name,
            )


def maxsim(query: np.ndarray, document: np.ndarray, reduction: str) -> float:
    """ColBERT's late interaction: each query vector's best dot product over the document's
    vectors, summed (ColBERT, PyLate) or averaged (bge-m3) over the query's vectors."""
    if query.shape[0] == 0 or document.shape[0] == 0:
        return 0.0
    best = (query.astype(np.float64) @ document.astype(np.float64).T).max(axis=1)
    return float(best.mean() if reduction == "mean" else best.sum())
