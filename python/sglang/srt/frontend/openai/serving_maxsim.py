"""/v1/rerank for multi-vector (ColBERT) models: relevance = MaxSim of the query's vectors against
each document's (frontend/openai/multi_vector.maxsim).

The query is encoded in ColBERT's query form and the documents in its document form, as two
requests to the engine that run side by side; the score is summed over the query's vectors for
ColBERT checkpoints and averaged for bge-m3 (FlagEmbedding's colbert_score), and reported as is
(not squashed into (0, 1)). The response is the cross-encoder route's (serving_rerank.rank's
ordering, Cohere / Jina shape).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.embed_sides import gather_or_cancel, merge_results
from sglang.srt.frontend.openai.multi_vector import maxsim
from sglang.srt.frontend.openai.rerank_results import check_documents_and_top_n, rank_results, rerank_body
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.task_protocol import RerankRequest
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_RAW, EmbeddingReqInput
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_QUERY


def check_vector_rerank(request: RerankRequest, how: str) -> None:
    """What a rerank body must satisfy when the model ranks by its vectors (`how`: MaxSim, cosine)
    rather than by a prompt: no `instruction`, some documents, a `top_n` that is not negative."""
    if request.instruction is not None:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"instruction applies only to LLM rerankers with a prompt (Qwen3-Reranker), not to {how}.",
            param="instruction",
        )
    check_documents_and_top_n(request.documents, request.top_n)


class ServingMaxSimRerank(OpenAIServingBase[RerankRequest]):
    endpoint = "/v1/rerank"

    def validate(self, request: RerankRequest) -> None:
        super().validate(request)
        check_vector_rerank(request, "MaxSim")

    async def handle(self, request: RerankRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        self.validate(request)
        self.check_batch_size(len(request.documents) + 1)
        query_req = EmbeddingReqInput(text=[request.query], encoding_format=FORMAT_RAW, token_output=TOKENS_QUERY)
        docs_req = EmbeddingReqInput(
            text=list(request.documents), encoding_format=FORMAT_RAW, token_output=TOKENS_DOCUMENT
        )
        query, docs = await gather_or_cancel(self.tm.embed(query_req), self.tm.embed(docs_req))
        q = query.arrays()[0]  # [tokens, dim]
        reduction = self.tm.model_info.colbert.maxsim
        scores = [maxsim(q, d, reduction) for d in docs.arrays()]
        merged = merge_results([query, docs])
        results = rank_results(scores, request.documents, request.top_n, request.return_documents)
        return rerank_body(rid, self.served_model_name, results, sum(merged.prompt_tokens)), merged
