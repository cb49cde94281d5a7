"""POST /v1/rerank: score (query, document) pairs with a cross-encoder, best first.

Each pair is tokenized as the model's tokenizer joins two texts (InputTokenizer.tokenize_pairs)
and runs as one input; its single logit becomes `relevance_score = sigmoid(logit)`, the score
sentence-transformers' CrossEncoder and TEI's /rerank report for one-label models. The response
follows Cohere / Jina: `results` sorted by score (ties keep request order), each with the
document's `index` and, unless `return_documents` is false, its text. Multi-vector (ColBERT)
models rank by MaxSim instead (serving_maxsim.py), other dense embedding models by cosine
similarity (serving_cosine_rerank.py). LLM rerankers (Qwen3-Reranker) are one-logit
cross-encoders here: the tokenizer side wraps each pair in their prompt (with the request's
`instruction`), and their logit is logit("yes") - logit("no"), so the sigmoid is the model card's
softmax over the two.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sglang.srt.configs.model_info import Capability
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.embed_sides import scores_by_cosine
from sglang.srt.frontend.openai.rerank_results import check_documents_and_top_n, rank_results, rerank_body
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.serving_cosine_rerank import ServingCosineRerank
from sglang.srt.frontend.openai.serving_maxsim import ServingMaxSimRerank
from sglang.srt.frontend.openai.task_protocol import RerankRequest
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_RAW, EmbeddingReqInput


def rank(logits: np.ndarray, documents: list[str], top_n: Optional[int], return_documents: bool) -> list[dict]:
    """Order by logit (sigmoid saturates to 1.0 for large ones), report sigmoid(logit)."""
    scores = 1.0 / (1.0 + np.exp(-logits))
    return rank_results(scores.tolist(), documents, top_n, return_documents, order_by=logits.tolist())


class OpenAIServingRerank(OpenAIServingBase[RerankRequest]):
    endpoint = "/v1/rerank"

    def __init__(self, tokenizer_manager, served_model_name: str) -> None:
        super().__init__(tokenizer_manager, served_model_name)
        info = tokenizer_manager.model_info
        # Multi-vector (ColBERT) models rank by MaxSim instead of a cross-encoder's logit.
        self.maxsim = (
            ServingMaxSimRerank(tokenizer_manager, served_model_name)
            if Capability.MULTI_VECTOR in info.capabilities
            else None
        )
        # Other dense embedding models rank by the cosine of the query's and each document's vectors.
        self.cosine = (
            ServingCosineRerank(tokenizer_manager, served_model_name)
            if self.maxsim is None and scores_by_cosine(info)
            else None
        )

    async def handle(self, request: RerankRequest, rid: Optional[str] = None):
        if self.maxsim is not None:
            return await self.maxsim.handle(request, rid)
        if self.cosine is not None:
            return await self.cosine.handle(request, rid)
        return await super().handle(request, rid)

    def validate(self, request: RerankRequest) -> None:
        super().validate(request)
        self.require_classifier()
        if Capability.RERANK not in self.tm.model_info.capabilities:
            labels = self.tm.model_info.labels or ()
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"Model '{self.served_model_name}' has {len(labels)} labels; /v1/rerank needs a "
                "cross-encoder with a single relevance logit (use /v1/classify).",
                param="model",
            )
        check_documents_and_top_n(request.documents, request.top_n)

    def convert(self, request: RerankRequest) -> EmbeddingReqInput:
        pairs = [(request.query, doc) for doc in request.documents]
        return EmbeddingReqInput(text_pairs=pairs, encoding_format=FORMAT_RAW, instruction=request.instruction)

    def render(self, request: RerankRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        logits = result.first_values()
        results = rank(logits, request.documents, request.top_n, request.return_documents)
        return rerank_body(rid, self.served_model_name, results, sum(result.prompt_tokens))
