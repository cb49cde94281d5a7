"""/v1/rerank's body checks and answer, in Cohere's / Jina's shape, for every way the route scores documents: a
cross-encoder's logit (serving_rerank.py), MaxSim (serving_maxsim.py) or cosine
(serving_cosine_rerank.py).
"""

from __future__ import annotations

import uuid
from typing import Optional, Sequence

import orjson

from sglang.srt.errors import EmbeddingError, ErrorKind


def check_documents_and_top_n(documents: Sequence[str], top_n: Optional[int]) -> None:
    """What every /v1/rerank scorer needs of the body: some documents, a `top_n` that is not negative
    (0 is vLLM's "all of them", its default)."""
    if not documents:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, "documents cannot be empty.", param="documents")
    if top_n is not None and top_n < 0:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, f"top_n must be 0 (all documents) or more, got {top_n}.", param="top_n"
        )


def rank_results(
    scores: Sequence[float],
    documents: list[str],
    top_n: Optional[int],
    return_documents: bool,
    order_by: Optional[Sequence[float]] = None,
) -> list[dict]:
    """`results`: the documents best first by `order_by` (default: the scores; a cross-encoder
    orders by logit because the sigmoid it reports rounds large logits to the same 1.0), ties in
    request order, the first `top_n` (None or 0: all); each with its index, `relevance_score` and, with
    `return_documents`, its text."""
    keys = scores if order_by is None else order_by
    order = sorted(range(len(documents)), key=lambda i: -keys[i])  # stable: ties keep request order
    if top_n:
        order = order[:top_n]
    results = []
    for i in order:
        item = {"index": i, "relevance_score": float(scores[i])}
        if return_documents:
            item["document"] = {"text": documents[i]}
        results.append(item)
    return results


def rerank_body(rid: Optional[str], model: str, results: list[dict], prompt_tokens: int) -> bytes:
    """The whole response: an id (`rerank-` and the request id), the model, results and usage."""
    return orjson.dumps(
        {
            "id": f"rerank-{rid or uuid.uuid4().hex}",
            "model": model,
            "results": results,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )
