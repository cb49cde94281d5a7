"""POST /pooling as vLLM answers it.

Without `task`, vLLM picks `token_embed` where the model supports it: one vector per token in
`data[i].data` (the hidden states /embed_all serves, each cut to `dimensions` and L2-normalized
unless `normalize: false`, as vLLM's token-embedding head makes them, by the renderer; on a model
with a ColBERT head, that head's vectors, as /v1/embeddings' `multi_vector` answers them). `embed` returns
each input's vector (with every /v1/embeddings option); `classify` (the default for a classifier,
which has no per-token head here) the class probabilities. token_classify and plugins are refused
by name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np
import orjson

from sglang.srt.configs.model_info import Capability, ModelInfo, OutputKind
from sglang.srt.frontend.binary_response import binary_body, request_id
from sglang.srt.frontend.embed_options import invalid
from sglang.srt.frontend.http.response_parts import Parts
from sglang.srt.frontend.openai.chat_request import ChatForm
from sglang.srt.frontend.openai.multi_vector import check_multi_vector_options, multi_vector_output
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.serving_classify import probabilities
from sglang.srt.frontend.openai.serving_embed_all import check_per_token_model, serves_per_token
from sglang.srt.frontend.openai.serving_embedding import (
    check_embedding_request,
    embedding_request_input,
    refuse_set,
)
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.frontend.vllm.protocol import PoolingRequest
from sglang.srt.wire.io_struct import BINARY_FORMATS, FORMAT_RAW, EmbeddingReqInput
from sglang.srt.wire.token_kinds import TOKENS_HIDDEN

TASKS = ("embed", "classify", "token_embed")
# Options of the embedding body that class probabilities do not take, with their unset values.
CLASSIFY_IGNORES = {
    "normalize": None,
    "use_activation": None,
    "embed_dtype": None,
    "endianness": None,
}
# ... and that per-token hidden states do not take.
TOKEN_EMBED_IGNORES = {"multi_vector": None}


class VllmServingPooling(ChatForm, OpenAIServingBase[PoolingRequest]):
    endpoint = "/pooling"

    def task(self, request: PoolingRequest) -> str:
        info = self.tm.model_info
        classifier = info.is_classifier
        if request.task is None:  # vLLM: token_embed where supported, else the model's own task
            return "classify" if classifier else ("token_embed" if serves_per_token(info) else "embed")
        task = request.task
        if task not in TASKS:
            raise invalid(f"task {task!r} is not supported here; use 'embed', 'token_embed' or 'classify'.", "task")
        if (task == "classify") != classifier:
            kind = "a classifier" if task == "classify" else "an embedding model"
            raise invalid(f"task {task!r} needs {kind}; model '{self.served_model_name}' is not one.", "task")
        if task == "token_embed":
            check_per_token_model(info, self.served_model_name, "task 'token_embed'")
        return task

    def validate(self, request: PoolingRequest) -> None:
        super().validate(request)
        if request.embedding_types is not None:
            raise invalid("embedding_types is not supported on /pooling; use /v1/embeddings.", "embedding_types")
        task = self.task(request)
        if task == "embed":
            check_embedding_request(request, self.tm.model_info, self.served_model_name)
        if task == "token_embed":
            check_embedding_request(request, self.token_view(), self.served_model_name)
        if task == "token_embed":
            refuse_set(request, TOKEN_EMBED_IGNORES, "task token_embed answers one vector per token")
            if Capability.MULTI_VECTOR in self.tm.model_info.capabilities:
                check_multi_vector_options(request, self.tm.model_info)
        if task == "classify":
            if request.dimensions is not None:
                raise invalid("dimensions is currently not supported", "dimensions")
            why = "task classify answers class probabilities"
            refuse_set(request, CLASSIFY_IGNORES, why)
            if request.encoding_format in BINARY_FORMATS:
                raise invalid(
                    f"encoding_format '{request.encoding_format}' does not apply here: {why}.", "encoding_format"
                )

    def token_view(self) -> ModelInfo:
        """The model as token_embed sees it: dense float rows, whatever its pooled output is (sparse
        weights, or a ColBERT-only checkpoint's multi-vector default, which token_embed asks for itself)."""
        return replace(self.tm.model_info, embeddings_output=OutputKind.DENSE)

    def convert(self, request: PoolingRequest) -> EmbeddingReqInput:
        task = self.task(request)
        info = self.token_view() if task == "token_embed" else self.tm.model_info
        req = embedding_request_input(request, info, self.served_model_name)
        if task == "classify":
            req.encoding_format = FORMAT_RAW
        elif task == "token_embed":
            if req.items is not None:
                raise invalid("task token_embed takes text or token-id inputs, not image items.", "input")
            if Capability.MULTI_VECTOR in info.capabilities:  # vLLM: a ColBERT head's vectors, as multi_vector
                req.token_output = multi_vector_output(
                    info, self.served_model_name, True, request.input_type, request.dimensions
                )
                req.encoding_format = request.encoding_format
            else:  # hidden states, each row cut and normalized (vLLM's default: normalized) by the renderer
                req.token_output, req.normalize = TOKENS_HIDDEN, request.normalize is not False
        return req

    def render(self, request: PoolingRequest, result: EmbeddingResult, rid: Optional[str]) -> Parts:
        task = self.task(request)
        if request.encoding_format in BINARY_FORMATS:  # embed / token_embed rows as vLLM's bytes body
            return binary_body(
                result,
                self.served_model_name,
                request.encoding_format,
                request.embed_dtype,
                request.endianness,
                request_id("pool", rid),
            )
        if task == "classify":
            info = self.tm.model_info
            rows = [probabilities(p.astype(np.float64), info.problem_type) for p in result.arrays()]
            payloads = [orjson.dumps(r.tolist()) for r in rows]
        else:
            payloads = result.payloads
        tokens = sum(result.prompt_tokens)
        head = orjson.dumps(self.list_head("pool", rid))
        tail = b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":0}}' % (tokens, tokens)
        parts = Parts([head[:-1] + b',"data":['])
        for i, p in enumerate(payloads):  # rows stay as rendered (frontend/http/response_parts.py)
            parts += [b'%s{"index":%d,"object":"pooling","data":' % (b"," if i else b"", i), p, b"}"]
        parts.append(b"]" + tail)
        return parts
