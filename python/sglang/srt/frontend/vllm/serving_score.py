"""POST /score and /v1/score as vLLM answers them.

A dense embedding model scores each pair by the cosine of the two texts' vectors (each text
embedded once, as /v1/embeddings would: one left text is scored against every right one); a
one-label cross-encoder (or LLM reranker) by sigmoid(logit) of the joined pair, as /v1/rerank
scores it. Pairing follows vLLM: 1:1, 1:N or N:N (frontend/similarity.py). Without
`truncate_prompt_tokens` the left side is never cut (over the context: 400), as vLLM refuses it;
the right side follows --allow-auto-truncate. The answer is vLLM's ScoreResponse:
`{"id", "object": "list", "created", "model", "data": [{"index", "object": "score", "score"}], "usage"}`.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import orjson

from sglang.srt.configs.model_info import Capability
from sglang.srt.frontend.embed_options import invalid, refuse_unsupported, set_prompt, set_truncation_vllm
from sglang.srt.frontend.embed_sides import Side, SideEmbedder, scores_by_cosine
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.similarity import score_sides
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.frontend.vllm.protocol import ScoreRequest
from sglang.srt.wire.io_struct import FORMAT_RAW, EmbeddingReqInput

# vLLM's score fields that change the answer and that this server does not implement.
SCORE_UNSUPPORTED = {
    "use_activation": "a cross-encoder's score is sigmoid(logit), an embedding model's the cosine",
    "activation": "a cross-encoder's score is sigmoid(logit), an embedding model's the cosine",
    "softmax": "a cross-encoder's score is sigmoid(logit), an embedding model's the cosine",
    "mm_processor_kwargs": "score inputs are text",
    "score_template": "pairs are joined by the model's tokenizer (or an LLM reranker's prompt)",
}

# How messages name one text of a side ("The query at index 2 is empty ...").
SIDE_NAMES = {"queries": "query", "documents": "document", "items": "item"}


class VllmServingScore(OpenAIServingBase[ScoreRequest]):
    endpoint = "/score"

    def __init__(self, tokenizer_manager, served_model_name: str) -> None:
        super().__init__(tokenizer_manager, served_model_name)
        self.sides = SideEmbedder(tokenizer_manager)

    def validate(self, request: ScoreRequest) -> None:
        super().validate(request)
        refuse_unsupported(request.model_extra or {}, SCORE_UNSUPPORTED)
        k = request.truncate_prompt_tokens  # a bad value is refused before any work
        context = self.tm.model_info.max_input_length
        set_truncation_vllm(EmbeddingReqInput(), k, None, context, "truncate_prompt_tokens")
        self.check_model()

    def check_model(self) -> None:
        """A one-label cross-encoder or an embedding model, else a 400 naming what to use."""
        info, name = self.tm.model_info, self.served_model_name
        caps = info.capabilities
        if Capability.RERANK in caps:
            return  # a cross-encoder scores the joined pairs
        if Capability.CLASSIFY in caps:
            raise invalid(
                f"Model '{name}' has {len(info.labels or ())} labels; /score needs an embedding model or a "
                "cross-encoder with a single relevance logit (use /v1/classify).",
                "model",
            )
        if Capability.MULTI_VECTOR in caps:
            raise invalid(f"Model '{name}' ranks by MaxSim over its ColBERT vectors: use /v1/rerank.", "model")
        if not scores_by_cosine(info):
            raise invalid(
                f"Model '{name}' answers {info.embeddings_output.value} vectors, which /score cannot compare.", "model"
            )

    def options(self, request: ScoreRequest) -> Callable[[EmbeddingReqInput], None]:
        """Sets the request's options on each side's EmbeddingReqInput: vLLM's truncate_prompt_tokens,
        and the model's default prompt on texts (as /v1/embeddings embeds them)."""
        info = self.tm.model_info

        def setup(req: EmbeddingReqInput) -> None:
            set_truncation_vllm(
                req, request.truncate_prompt_tokens, None, info.max_input_length, "truncate_prompt_tokens"
            )
            if req.text is not None:
                set_prompt(req, info)

        return setup

    async def handle(self, request: ScoreRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        self.validate(request)
        (left_key, right_key), left, right = score_sides(request.sides())
        setup = self.options(request)
        if Capability.RERANK in self.tm.model_info.capabilities:
            scores, result = await self.cross_encoder(left, right, setup)
        else:
            self.check_batch_size(len(left) + len(right))
            keep_left = None if request.truncate_prompt_tokens is not None else False
            cos, result = await self.sides.cosines(
                Side(left, SIDE_NAMES.get(left_key, left_key), left_key, truncate=keep_left),
                Side(right, SIDE_NAMES.get(right_key, right_key), right_key),
                setup,
            )
            scores = cos.tolist()
        tokens = sum(result.prompt_tokens)
        body = {
            **self.list_head("score", rid),
            "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }
        return orjson.dumps(body), result

    async def cross_encoder(self, left: list[str], right: list[str], setup) -> tuple[list[float], EmbeddingResult]:
        """sigmoid(logit) of each (left, right) pair, joined as /v1/rerank joins them."""
        pairs = [(left[0], r) for r in right] if len(left) == 1 else list(zip(left, right))
        req = EmbeddingReqInput(text_pairs=pairs, encoding_format=FORMAT_RAW)
        setup(req)
        self.check_batch_size(req.batch_size)
        result = await self.tm.embed(req)
        logits = result.first_values()
        return (1.0 / (1.0 + np.exp(-logits))).tolist(), result
