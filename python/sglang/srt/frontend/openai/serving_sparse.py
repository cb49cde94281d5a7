"""POST /embed_sparse (TEI-compatible); the sparse form of /v1/embeddings is in serving_embedding.

TEI answers `[[{"index": token_id, "value": weight}, ...], ...]`, one list per input (also for a
single string). `return_text: true` adds each token's vocabulary string (rendered by the
detokenizer). /v1/embeddings on a sparse model answers each `embedding` as a `{"token_id":
weight}` object, as SGLang does. Errors come in TEI's `{"error", "error_type"}` shape.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.configs.model_info import Capability
from sglang.srt.frontend.http.error_styles import TeiError, tei_empty
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.task_protocol import SparseEmbedRequest
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_SPARSE_TEI, FORMAT_SPARSE_TEI_TEXT, EmbeddingReqInput


class ServingSparseEmbedding(OpenAIServingBase[SparseEmbedRequest]):
    endpoint = "/embed_sparse"

    def validate(self, request: SparseEmbedRequest) -> None:
        # TEI's request names no model; a model without a sparse head is TEI's 424 Backend.
        if Capability.SPARSE not in self.tm.model_info.capabilities:
            raise TeiError(
                f"Model '{self.served_model_name}' has no sparse head; "
                "serve a SPLADE or bge-m3 checkpoint, or pass --sparse-head.",
                "Backend",
                param="model",
            )
        texts = [request.inputs] if isinstance(request.inputs, str) else request.inputs
        if not texts or any(t == "" for t in texts):
            raise tei_empty("inputs")

    def convert(self, request: SparseEmbedRequest) -> EmbeddingReqInput:
        texts = [request.inputs] if isinstance(request.inputs, str) else list(request.inputs)
        fmt = FORMAT_SPARSE_TEI_TEXT if request.return_text else FORMAT_SPARSE_TEI
        return EmbeddingReqInput(text=texts, encoding_format=fmt)

    def render(self, request: SparseEmbedRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        return b"[" + b",".join(result.payloads) + b"]"
