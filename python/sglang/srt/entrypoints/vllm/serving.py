"""POST /pooling as vLLM answers it for sequence-level tasks.

`task` embed (the default for an embedding model) returns each input's vector in `data[i].data`
(with every /v1/embeddings option); classify (the default for a classifier) returns the class
probabilities. Per-token tasks (token_embed, token_classify) and plugins are refused by name.
"""

from __future__ import annotations

import time
import uuid
from typing import Optional

import numpy as np
import orjson

from sglang.srt.entrypoints.embed_options import invalid
from sglang.srt.entrypoints.openai.serving_base import OpenAIServingBase
from sglang.srt.entrypoints.openai.serving_classify import probabilities
from sglang.srt.entrypoints.openai.serving_embedding import (
    check_embedding_request,
    embedding_request_input,
    refuse_set,
)
from sglang.srt.entrypoints.vllm.protocol import PoolingRequest
from sglang.srt.managers.io_struct import FORMAT_RAW, EmbeddingReqInput
from sglang.srt.managers.tokenizer_manager import EmbeddingResult, payload_to_array

TASKS = ("embed", "classify")
# Options of the embedding body that class probabilities do not take, with their unset values.
CLASSIFY_IGNORES = {"normalize": None, "embed_dtype": None, "endianness": None}


class VllmServingPooling(OpenAIServingBase[PoolingRequest]):
    endpoint = "/pooling"

    def task(self, request: PoolingRequest) -> str:
        classifier = self.tm.model_info.is_classifier
        task = request.task or ("classify" if classifier else "embed")
        if task not in TASKS:
            raise invalid(f"task {task!r} is not supported here; use 'embed' or 'classify'.", "task")
        if (task == "classify") != classifier:
            kind = "a classifier" if task == "classify" else "an embedding model"
            raise invalid(f"task {task!r} needs {kind}; model '{self.served_model_name}' is not one.", "task")
        return task

    def validate(self, request: PoolingRequest) -> None:
        super().validate(request)
        if request.embedding_types is not None:
            raise invalid("embedding_types is not supported on /pooling; use /v1/embeddings.", "embedding_types")
        if self.task(request) == "embed":
            check_embedding_request(request, self.tm.model_info, self.served_model_name)
        else:
            if request.dimensions is not None:
                raise invalid("dimensions is currently not supported", "dimensions")
            why = "task classify answers class probabilities"
            refuse_set(request, CLASSIFY_IGNORES, why)

    def convert(self, request: PoolingRequest) -> EmbeddingReqInput:
        req = embedding_request_input(request, self.tm.model_info, self.served_model_name)
        if self.task(request) == "classify":
            req.encoding_format = FORMAT_RAW
        return req

    def render(self, request: PoolingRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        if self.task(request) == "classify":
            info = self.tm.model_info
            rows = [probabilities(payload_to_array(p).astype(np.float64), info.problem_type) for p in result.payloads]
            payloads = [orjson.dumps(r.tolist()) for r in rows]
        else:
            payloads = result.payloads
        items = b",".join(b'{"index":%d,"object":"pooling","data":%s}' % (i, p) for i, p in enumerate(payloads))
        tokens = sum(result.prompt_tokens)
        head = orjson.dumps(
            {
                "id": f"pool-{rid or uuid.uuid4().hex}",
                "object": "list",
                "created": int(time.time()),
                "model": self.served_model_name,
            }
        )
        tail = b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":0}}' % (tokens, tokens)
        return head[:-1] + b',"data":[' + items + b"]" + tail
