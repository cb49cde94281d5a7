"""/v1/rerank (and /rerank with a `documents` body) on a dense embedding model: documents ranked by
the cosine of their vector with the query's, as vLLM ranks for embedding models.

The query and the documents are embedded as /v1/embeddings would embed them (the model's default
prompt, if it has one) in two requests side by side (frontend/embed_sides.py). The query is never
cut: longer than the context it is a 400 naming `query`, as vLLM answers, while the documents follow
--allow-auto-truncate. `relevance_score` is the cosine itself, in [-1, 1]; the response is the
cross-encoder route's (Cohere / Jina shape, best first, ties in request order).
"""

from __future__ import annotations

from typing import Callable, Optional

from sglang.srt.frontend.embed_options import set_prompt
from sglang.srt.frontend.embed_sides import Side, SideEmbedder
from sglang.srt.frontend.openai.rerank_results import rank_results, rerank_body
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.serving_maxsim import check_vector_rerank
from sglang.srt.frontend.openai.task_protocol import RerankRequest
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import EmbeddingReqInput


class ServingCosineRerank(OpenAIServingBase[RerankRequest]):
    endpoint = "/v1/rerank"

    def __init__(self, tokenizer_manager, served_model_name: str) -> None:
        super().__init__(tokenizer_manager, served_model_name)
        self.sides = SideEmbedder(tokenizer_manager)

    def validate(self, request: RerankRequest) -> None:
        super().validate(request)
        check_vector_rerank(request, "cosine similarity")

    def embed_options(self, req: EmbeddingReqInput) -> None:
        set_prompt(req, self.tm.model_info)

    async def scores(
        self, query: str, documents: list[str], setup: Optional[Callable[[EmbeddingReqInput], None]] = None
    ) -> tuple[list[float], EmbeddingResult]:
        """The cosine of each document with the query (`setup`: each side's request options; by
        default the model's default prompt). TEI's /rerank calls it with its own options."""
        self.check_batch_size(len(documents) + 1)
        scores, result = await self.sides.cosines(
            Side([query], "query", "query", truncate=False),
            Side(list(documents), "document", "documents"),
            setup or self.embed_options,
        )
        return scores.tolist(), result

    async def handle(self, request: RerankRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        self.validate(request)
        scores, result = await self.scores(request.query, request.documents)
        results = rank_results(scores, request.documents, request.top_n, request.return_documents)
        return rerank_body(rid, self.served_model_name, results, sum(result.prompt_tokens)), result
