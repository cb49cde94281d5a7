"""The serving base every inference route stands on: validate -> convert -> run -> render, and the
checks they share (model name, inputs per request, classifier-only routes)."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
import pytest

from sglang.srt.configs.model_info import OutputKind
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.openai.protocol import EmbeddingRequest
from sglang.srt.frontend.openai.serving_classify import OpenAIServingClassify
from sglang.srt.frontend.openai.serving_embedding import OpenAIServingEmbedding
from sglang.srt.frontend.openai.task_protocol import ClassifyRequest
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.server_args import ServerArgs
from test.helpers.model_info import make_model_info


class FakeTokenizerManager:
    """Records what reaches `embed` and answers every input with the same payload."""

    def __init__(self, payload=b"[1.0]", strict: bool = True, **info) -> None:
        self.server_args = ServerArgs(
            model_path="/tmp",
            served_model_name=["m", "m2"],
            strict_model_name=strict,
            max_client_batch_size=3,
            max_queue_size=8,
        )
        self.model_info = make_model_info(**info)
        self.payload = payload
        self.seen = []

    async def embed(self, req):
        self.seen.append(req)
        return EmbeddingResult([self.payload] * req.batch_size, [2] * req.batch_size)


def _run(serving, request):
    return asyncio.run(serving.handle(request, "rid-1"))


def test_embedding_route_runs_the_four_steps():
    tm = FakeTokenizerManager()
    body, result = _run(OpenAIServingEmbedding(tm, "m"), EmbeddingRequest(input=["a", "b"], model="m"))
    assert tm.seen[0].text == ["a", "b"] and result.prompt_tokens == [2, 2]
    assert orjson.loads(body) == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [1.0]},
            {"object": "embedding", "index": 1, "embedding": [1.0]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 4, "total_tokens": 4},
    }


@pytest.mark.parametrize(
    "request_, kind, param",
    [
        (EmbeddingRequest(input="a", model="other"), ErrorKind.MODEL_NOT_FOUND, "model"),
        (EmbeddingRequest(input=["a"] * 4), ErrorKind.TOO_LARGE, "input"),
        (EmbeddingRequest(input=[]), ErrorKind.INVALID_REQUEST, "input"),
        (EmbeddingRequest(input="a", dimensions=8), ErrorKind.INVALID_REQUEST, "dimensions"),
    ],
)
def test_refusals_never_reach_the_engine(request_, kind, param):
    tm = FakeTokenizerManager()
    with pytest.raises(EmbeddingError) as err:
        _run(OpenAIServingEmbedding(tm, "m"), request_)
    assert (err.value.kind, err.value.param) == (kind, param) and tm.seen == []
    if kind is ErrorKind.TOO_LARGE:
        assert "at most 3 per request (--max-client-batch-size)" in err.value.message


def test_any_model_name_is_served_unless_strict():
    tm = FakeTokenizerManager(strict=False)
    body, _ = _run(OpenAIServingEmbedding(tm, "m"), EmbeddingRequest(input="a", model="gme-qwen2-vl"))
    assert orjson.loads(body)["model"] == "m"  # the served name, whatever the request said
    strict = FakeTokenizerManager(strict=True)
    body, _ = _run(OpenAIServingEmbedding(strict, "m"), EmbeddingRequest(input="a", model="m2"))  # an alias
    assert orjson.loads(body)["model"] == "m"


def test_classifier_routes_need_a_classifier():
    with pytest.raises(EmbeddingError, match="not a classification model; /v1/classify needs"):
        _run(OpenAIServingClassify(FakeTokenizerManager(), "m"), ClassifyRequest(input="a"))
    tm = FakeTokenizerManager(
        payload=np.array([1.0, 0.0], np.float32),  # the renderer's Format.ARRAY row of logits
        embeddings_output=OutputKind.LOGITS,
        labels=("yes", "no"),
    )
    body, _ = _run(OpenAIServingClassify(tm, "m"), ClassifyRequest(input=[[1, 2]]))
    out = orjson.loads(body)
    assert out["id"] == "classify-rid-1" and out["data"][0]["label"] == "yes" and tm.seen[0].input_ids == [[1, 2]]
