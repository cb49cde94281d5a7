"""The similarity routes' serving classes over a fake tokenizer manager whose vectors are known:
vLLM's /score (cosine on embedding models, sigmoid(logit) on cross-encoders), /v1/rerank and
TEI's /rerank by cosine on embedding models, TEI's /similarity, and their refusals."""

from __future__ import annotations

import asyncio
import zlib

import numpy as np
import orjson
import pytest

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.model_info import OutputKind
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.embed_sides import gather_or_cancel
from sglang.srt.frontend.http.error_styles import TeiError
from sglang.srt.frontend.openai.serving_rerank import OpenAIServingRerank
from sglang.srt.frontend.openai.task_protocol import RerankRequest
from sglang.srt.frontend.similarity import cosine_scores
from sglang.srt.frontend.tei.protocol import RerankRequest as TeiRerankRequest
from sglang.srt.frontend.tei.protocol import SimilarityRequest
from sglang.srt.frontend.tei.serving import TeiServingRerank, TeiServingSimilarity
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.frontend.vllm.protocol import ScoreRequest
from sglang.srt.frontend.vllm.serving_score import VllmServingScore
from sglang.srt.server_args import ServerArgs
from test.helpers.model_info import make_model_info

LONG = "too long"  # the fake tokenizer refuses it unless the request truncates


def vector(text: str) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(text.encode())).normal(size=8).astype("<f4")


def logit(query: str, doc: str) -> float:
    return float(len(doc) - len(query))


class FakeTokenizerManager:
    """Answers texts with vector(text) and pairs with logit(query, doc); 3 tokens per input."""

    def __init__(self, **info) -> None:
        self.server_args = ServerArgs(
            model_path="/tmp", served_model_name=["m"], strict_model_name=True, max_client_batch_size=5
        )
        self.model_info = make_model_info(**info)
        self.seen = []

    async def embed(self, req):
        self.seen.append(req)
        if req.text_pairs is not None:
            payloads = [np.array([logit(q, d)], np.float32) for q, d in req.text_pairs]  # Format.ARRAY rows
        else:
            for i, t in enumerate(req.text):
                if t == LONG and not req.truncate:
                    raise EmbeddingError(
                        ErrorKind.INVALID_REQUEST,
                        f"The input at index {i} (300 tokens) is longer than the model's context length (256 tokens).",
                        param="input",
                    )
            payloads = [vector(t).astype(np.float32) for t in req.text]
        return EmbeddingResult(payloads, [3] * len(payloads))


CLASSIFIER = dict(embeddings_output=OutputKind.LOGITS, labels=("relevant",), embedding_dim=1)


def _run(serving, request):
    body, result = asyncio.run(serving.handle(request, "rid-1"))
    return orjson.loads(body if isinstance(body, bytes) else b"".join(body)), result


def _err(serving, request) -> EmbeddingError:
    with pytest.raises(EmbeddingError) as e:
        asyncio.run(serving.handle(request, "rid-1"))
    return e.value


def _cos(left: list[str], right: list[str]) -> list[float]:
    return cosine_scores(np.stack([vector(t) for t in left]), np.stack([vector(t) for t in right])).tolist()


# ----- /v1/rerank on an embedding model -----
def test_rerank_on_an_embedding_model_ranks_by_cosine():
    tm = FakeTokenizerManager()
    docs = ["alpha", "beta", "gamma", "delta"]
    body, result = _run(OpenAIServingRerank(tm, "m"), RerankRequest(query="q", documents=docs, model="m"))
    want = _cos(["q"], docs)
    assert [r["index"] for r in body["results"]] == sorted(range(4), key=lambda i: -want[i])
    for r in body["results"]:
        assert r["relevance_score"] == pytest.approx(want[r["index"]], abs=1e-12)
        assert r["document"] == {"text": docs[r["index"]]}
    assert body["id"] == "rerank-rid-1" and body["usage"] == {"prompt_tokens": 15, "total_tokens": 15}
    query_req, docs_req = tm.seen
    assert query_req.text == ["q"] and query_req.truncate is False  # the query is never cut
    assert docs_req.text == docs and docs_req.truncate is None  # documents follow --allow-auto-truncate
    top, _ = _run(
        OpenAIServingRerank(tm, "m"), RerankRequest(query="q", documents=docs, top_n=1, return_documents=False)
    )
    assert top["results"] == [
        {"index": body["results"][0]["index"], "relevance_score": body["results"][0]["relevance_score"]}
    ]
    assert len(result.payloads) == 5


def test_rerank_embeds_with_the_models_default_prompt():
    tm = FakeTokenizerManager(default_prompt="query: ")
    _run(OpenAIServingRerank(tm, "m"), RerankRequest(query="q", documents=["d"]))
    assert [r.prompt for r in tm.seen] == ["query: ", "query: "]


@pytest.mark.parametrize(
    "fields,status,param,fragment",
    [
        (dict(documents=[]), 400, "documents", "cannot be empty"),
        (dict(documents=["a", " "]), 400, "documents", "The document at index 1 is empty"),
        (dict(query=""), 400, "query", "The query is empty"),
        (dict(top_n=-1), 400, "top_n", "0 (all documents) or more"),
        (dict(instruction="x"), 400, "instruction", "not to cosine similarity"),
        (dict(model="other"), 404, "model", "does not exist"),
        (dict(query=LONG), 400, "query", "The query at index 0 (300 tokens) is longer"),
        (dict(documents=["a"] * 5), 413, "input", "6 inputs"),
    ],
)
def test_cosine_rerank_refusals(fields, status, param, fragment):
    tm = FakeTokenizerManager()
    request = RerankRequest(**{"query": "q", "documents": ["a", "b"], **fields})
    e = _err(OpenAIServingRerank(tm, "m"), request)
    kinds = {400: ErrorKind.INVALID_REQUEST, 404: ErrorKind.MODEL_NOT_FOUND, 413: ErrorKind.TOO_LARGE}
    assert e.kind == kinds[status] and e.param == param and fragment in e.message, e.message


def test_a_long_document_is_cut_when_the_server_truncates_but_never_the_query():
    tm = FakeTokenizerManager()
    serving = OpenAIServingRerank(tm, "m")
    e = _err(serving, RerankRequest(query="q", documents=["a", LONG]))
    assert e.param == "documents" and e.message.startswith("The document at index 1 (300 tokens)")


def test_rerank_keeps_cross_encoders_and_maxsim_models_on_their_paths():
    assert OpenAIServingRerank(FakeTokenizerManager(**CLASSIFIER), "m").cosine is None
    colbert = FakeTokenizerManager(colbert=ColbertConfig(projection="checkpoint", dim=4), multi_vector_dim=4)
    serving = OpenAIServingRerank(colbert, "m")
    assert serving.maxsim is not None and serving.cosine is None
    sparse = OpenAIServingRerank(FakeTokenizerManager(embeddings_output=OutputKind.SPARSE, sparse_head="splade"), "m")
    e = _err(sparse, RerankRequest(query="q", documents=["d"]))
    assert e.param == "model" and "not a classification model" in e.message


# ----- vLLM's /score -----
@pytest.mark.parametrize(
    "body,left,right",
    [
        ({"queries": "q", "documents": ["a", "b", "c"]}, ["q"], ["a", "b", "c"]),
        ({"queries": ["q1", "q2"], "items": ["a", "b"]}, ["q1", "q2"], ["a", "b"]),
        ({"data_1": "q", "data_2": "a"}, ["q"], ["a"]),
        ({"text_1": ["q"], "text_2": ["a", "b"]}, ["q"], ["a", "b"]),
    ],
)
def test_score_on_an_embedding_model_is_the_cosine(body, left, right):
    tm = FakeTokenizerManager()
    out, _ = _run(VllmServingScore(tm, "m"), ScoreRequest(**body, model="m"))
    assert out["object"] == "list" and out["model"] == "m" and out["id"] == "score-rid-1"
    assert isinstance(out["created"], int)
    want = _cos(left, right)
    assert [d["index"] for d in out["data"]] == list(range(len(right)))
    assert all(d["object"] == "score" for d in out["data"])
    np.testing.assert_allclose([d["score"] for d in out["data"]], want, atol=1e-12)
    n = 3 * (len(left) + len(right))
    assert out["usage"] == {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0}
    assert [r.text for r in tm.seen] == [left, right] and tm.seen[0].truncate is False


def test_score_on_a_cross_encoder_is_the_sigmoid_of_each_pair():
    tm = FakeTokenizerManager(**CLASSIFIER)
    out, _ = _run(VllmServingScore(tm, "m"), ScoreRequest(text_1="qq", text_2=["a", "abcd"]))
    want = [1 / (1 + np.exp(-logit("qq", d))) for d in ("a", "abcd")]
    np.testing.assert_allclose([d["score"] for d in out["data"]], want, atol=1e-12)
    assert tm.seen[0].text_pairs == [("qq", "a"), ("qq", "abcd")]
    _run(VllmServingScore(tm, "m"), ScoreRequest(queries=["x", "y"], documents=["a", "b"]))
    assert tm.seen[1].text_pairs == [("x", "a"), ("y", "b")]


def test_score_truncate_prompt_tokens_cuts_both_sides():
    tm = FakeTokenizerManager()
    _run(VllmServingScore(tm, "m"), ScoreRequest(queries=LONG, documents=["a"], truncate_prompt_tokens=-1))
    assert [(r.truncate, r.max_tokens) for r in tm.seen] == [(True, None), (True, None)]


@pytest.mark.parametrize(
    "info,body,param,fragment",
    [
        (CLASSIFIER | dict(labels=("a", "b", "c")), {}, "model", "has 3 labels"),
        (dict(colbert=ColbertConfig(projection="checkpoint", dim=4), multi_vector_dim=4), {}, "model", "/v1/rerank"),
        (dict(embeddings_output=OutputKind.SPARSE, sparse_head="splade"), {}, "model", "sparse vectors"),
        ({}, {"use_activation": False}, "use_activation", "not supported"),
        ({}, {"mm_processor_kwargs": {}}, "mm_processor_kwargs", "text"),
        ({}, {"truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "-1"),
        ({}, {"truncate_prompt_tokens": 10_000}, "truncate_prompt_tokens", "context length"),
        ({}, {"queries": LONG}, "queries", "The query at index 0 (300 tokens)"),
        ({}, {"documents": ["a", ""]}, "documents", "The document at index 1 is empty"),
        ({}, {"documents": ["a", "b", "c", "d", "e"]}, "input", "6 inputs"),
    ],
)
def test_score_refusals(info, body, param, fragment):
    tm = FakeTokenizerManager(**info)
    e = _err(VllmServingScore(tm, "m"), ScoreRequest(**{"queries": "q", "documents": ["a"], **body}))
    assert e.param == param and fragment in e.message, e.message
    if param != "queries" and param != "documents":
        assert tm.seen == []  # refused before any work


# ----- TEI -----
def test_tei_similarity_is_the_cosine_with_the_source_sentence():
    tm = FakeTokenizerManager(prompts=(("query", "query: "),))
    body = {"inputs": {"source_sentence": "s", "sentences": ["a", "b"]}, "parameters": {"prompt_name": "query"}}
    out, _ = _run(TeiServingSimilarity(tm, "m"), SimilarityRequest.model_validate(body))
    np.testing.assert_allclose(out, _cos(["s"], ["a", "b"]), atol=1e-12)
    assert [r.prompt for r in tm.seen] == ["query: ", "query: "]
    cut = {"inputs": {"source_sentence": LONG, "sentences": ["a"]}, "parameters": {"truncate": True}}
    _run(TeiServingSimilarity(tm, "m"), SimilarityRequest.model_validate(cut))  # TEI's truncate covers every text


def test_tei_similarity_refusals():
    tm = FakeTokenizerManager()
    with pytest.raises(TeiError) as e:
        asyncio.run(
            TeiServingSimilarity(tm, "m").handle(
                SimilarityRequest.model_validate({"inputs": {"source_sentence": "s", "sentences": []}})
            )
        )
    assert e.value.error_type == "Empty" and e.value.message == "`inputs.sentences` cannot be empty"
    with pytest.raises(TeiError) as e:
        classifier = FakeTokenizerManager(**CLASSIFIER)
        request = SimilarityRequest.model_validate({"inputs": {"source_sentence": "s", "sentences": ["a"]}})
        asyncio.run(TeiServingSimilarity(classifier, "m").handle(request))
    assert e.value.error_type == "Backend" and "not a embedding model" in e.value.message


def test_tei_rerank_body_on_an_embedding_model_ranks_by_cosine_in_teis_shape():
    tm = FakeTokenizerManager()
    texts = ["alpha", "beta", "gamma"]
    out, _ = _run(TeiServingRerank(tm, "m"), TeiRerankRequest(query="q", texts=texts, return_text=True))
    want = _cos(["q"], texts)
    assert [r["index"] for r in out] == sorted(range(3), key=lambda i: -want[i])
    assert all(r["score"] == pytest.approx(want[r["index"]], abs=1e-12) and r["text"] == texts[r["index"]] for r in out)
    with pytest.raises(TeiError) as e:
        asyncio.run(TeiServingRerank(tm, "m").handle(TeiRerankRequest(query="q", texts=[])))
    assert e.value.error_type == "Empty"


def test_tei_rerank_on_a_maxsim_model_is_still_teis_424():
    tm = FakeTokenizerManager(colbert=ColbertConfig(projection="checkpoint", dim=4), multi_vector_dim=4)
    with pytest.raises(TeiError) as e:
        asyncio.run(TeiServingRerank(tm, "m").handle(TeiRerankRequest(query="q", texts=["a"])))
    assert e.value.error_type == "Backend" and "re-ranker" in e.value.message


# ----- one side failing cancels the other -----
def test_a_failing_side_cancels_the_other():
    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def fail():
        await asyncio.sleep(0)
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, "bad")

    async def main():
        with pytest.raises(EmbeddingError, match="bad"):
            await gather_or_cancel(slow(), fail())

    asyncio.run(main())
    assert cancelled == [True]
