"""Multi-vector (ColBERT) requests on /v1/embeddings and /v1/rerank: which per-token output a
request gets, and the MaxSim score of a query against documents.

A ColBERT checkpoint (HF_ColBERT, PyLate) answers /v1/embeddings with one vector per token by
default; a model with an extra multi-vector head (bge-m3's colbert_linear.pt) answers with pooled
vectors unless the request sets `multi_vector: true`. `input_type` picks ColBERT's query or
document form (markers, query expansion, punctuation skiplist); Cohere's `search_query` /
`search_document` spellings are accepted too.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sglang.srt.configs.model_info import ModelInfo, OutputKind
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.layers.token_outputs import TOKENS_DOCUMENT, TOKENS_QUERY

INPUT_TYPES = {
    "query": TOKENS_QUERY,
    "search_query": TOKENS_QUERY,
    "document": TOKENS_DOCUMENT,
    "passage": TOKENS_DOCUMENT,
    "search_document": TOKENS_DOCUMENT,
}


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
    if model_info.colbert is None:
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
    if input_type is None:
        return TOKENS_DOCUMENT
    kind = INPUT_TYPES.get(input_type)
    if kind is None:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"input_type '{input_type}' is not one of: {', '.join(INPUT_TYPES)}.",
            param="input_type",
        )
    return kind


def maxsim(query: np.ndarray, document: np.ndarray, reduction: str) -> float:
    """ColBERT's late interaction: each query vector's best dot product over the document's
    vectors, summed (ColBERT, PyLate) or averaged (bge-m3) over the query's vectors."""
    if query.shape[0] == 0 or document.shape[0] == 0:
        return 0.0
    best = (query.astype(np.float64) @ document.astype(np.float64).T).max(axis=1)
    return float(best.mean() if reduction == "mean" else best.sum())
