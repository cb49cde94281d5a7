"""Similarity with an embedding model on a real server over the bundled all-MiniLM-L6-v2, against
sentence-transformers' cosines (issue #30 item 1): vLLM's /score and /v1/score under every key
pair, /v1/rerank and /rerank (both bodies) ranked by cosine, TEI's /similarity and POST / with
huggingface_hub's sentence_similarity; plus /score on a tiny cross-encoder (sigmoid of its logit,
as /v1/rerank scores it)."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import torch

from test.helpers.server import ServerProcess
from test.helpers.tiny_task_models import build_tiny_bert_task

pytestmark = pytest.mark.slow

QUERY = "how much protein should a female eat"
DOCS = [
    "The average protein requirement for women is about 46 grams per day.",
    "Summit is the highest point of a mountain.",
    "Proteins are made of amino acids.",
    "the cat sat on the mat by the river",
]
LONG = "word " * 400  # over MiniLM's 256-token context
NAME = "minilm"


@pytest.fixture(scope="module")
def server():
    # --allow-auto-truncate: documents over the context are cut, a query over it is still refused
    with ServerProcess("--served-model-name", NAME, "--allow-auto-truncate", "--max-client-batch-size", "8") as s:
        yield s


@pytest.fixture(scope="module")
def st():
    from sentence_transformers import SentenceTransformer

    from sglang.srt.server_args import default_model_path

    return SentenceTransformer(default_model_path(), device="cpu")


def _post(server, path: str, payload) -> requests.Response:
    return requests.post(server.base_url + path, json=payload, timeout=60)


def _cos(st, left: list[str], right: list[str]) -> np.ndarray:
    """sentence-transformers' cosine of each left text with each right one ([len(left), len(right)])."""
    from sentence_transformers import util

    a = st.encode(left, convert_to_tensor=True)
    b = st.encode(right, convert_to_tensor=True)
    return util.cos_sim(a, b).to(torch.float64).numpy()


def _openai_error(resp: requests.Response, status: int, param: str) -> str:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param, err
    return err["message"]


def _tei_error(resp: requests.Response, status: int, error_type: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    return body["error"]


# ----- vLLM /score -----
@pytest.mark.parametrize("path", ["/score", "/v1/score"])
@pytest.mark.parametrize(
    "keys", [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")]
)
def test_score_one_against_many_is_the_cosine(server, st, path, keys):
    r = _post(server, path, {"model": NAME, keys[0]: QUERY, keys[1]: DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == NAME and body["id"].startswith("score-")
    assert [d["index"] for d in body["data"]] == [0, 1, 2, 3] and {d["object"] for d in body["data"]} == {"score"}
    np.testing.assert_allclose([d["score"] for d in body["data"]], _cos(st, [QUERY], DOCS)[0], atol=1e-4)
    usage = body["usage"]
    assert usage["prompt_tokens"] == usage["total_tokens"] > 0 and usage["completion_tokens"] == 0


def test_score_pairwise_and_single_pair(server, st):
    left = [QUERY, "what is a summit", "cats"]
    r = _post(server, "/score", {"text_1": left, "text_2": DOCS[:3]})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose([d["score"] for d in r.json()["data"]], np.diag(_cos(st, left, DOCS[:3])), atol=1e-4)
    one = _post(server, "/v1/score", {"text_1": [QUERY], "text_2": DOCS[0]}).json()
    assert len(one["data"]) == 1 and abs(one["data"][0]["score"] - _cos(st, [QUERY], DOCS[:1])[0, 0]) < 1e-4


@pytest.mark.parametrize(
    "payload,status,param,fragment",
    [
        ({"queries": ["a", "b"], "documents": ["c", "d", "e"]}, 400, "queries", "1:N"),
        ({"queries": ["a", "b"], "documents": "c"}, 400, "queries", "N:N"),
        ({"queries": "a"}, 400, "documents", "needs `documents` or `items`"),
        ({"text_1": "a", "text_2": []}, 400, "text_2", "at least one text"),
        ({"text_1": "a", "text_2": ["b", "  "]}, 400, "text_2", "index 1 is empty"),
        ({"text_1": "a", "text_2": {"content": [{"type": "image_url"}]}}, 400, "text_2", "multimodal"),
        ({"queries": LONG, "documents": ["a"]}, 400, "queries", "longer than the model's context length"),
        ({"queries": "a", "documents": ["b"] * 8}, 413, "input", "9 inputs"),
        ({"queries": "a", "documents": ["b"], "use_activation": False}, 400, "use_activation", "not supported"),
        ({"queries": "a", "documents": ["b"], "truncate_prompt_tokens": 0}, 400, "truncate_prompt_tokens", "-1"),
    ],
)
def test_score_errors_are_openai_shaped(server, payload, status, param, fragment):
    assert fragment in _openai_error(_post(server, "/score", payload), status, param)


def test_score_cuts_a_long_document_and_a_long_query_only_when_asked(server, st):
    r = _post(server, "/score", {"queries": QUERY, "documents": [DOCS[0], LONG]})
    assert r.status_code == 200, r.text  # the document is cut (--allow-auto-truncate)
    assert abs(r.json()["data"][0]["score"] - _cos(st, [QUERY], DOCS[:1])[0, 0]) < 1e-4
    cut = _post(server, "/score", {"queries": LONG, "documents": DOCS[0], "truncate_prompt_tokens": -1})
    assert cut.status_code == 200, cut.text


# ----- rerank by cosine -----
def _check_ranked(st, results: list[dict], score_key: str, docs=DOCS) -> None:
    want = _cos(st, [QUERY], docs)[0]
    assert [r["index"] for r in results] == list(np.argsort(-want, kind="stable"))
    np.testing.assert_allclose([r[score_key] for r in results], want[[r["index"] for r in results]], atol=1e-4)


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank"])
def test_rerank_documents_body_ranks_by_cosine(server, st, path):
    r = _post(server, path, {"model": NAME, "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == NAME and body["id"].startswith("rerank-") and body["usage"]["prompt_tokens"] > 0
    _check_ranked(st, body["results"], "relevance_score")
    assert all(res["document"] == {"text": DOCS[res["index"]]} for res in body["results"])
    top = _post(server, path, {"query": QUERY, "documents": DOCS, "top_n": 2, "return_documents": False}).json()
    assert [x["index"] for x in top["results"]] == [x["index"] for x in body["results"][:2]]
    assert "document" not in top["results"][0]
    every = _post(server, path, {"query": QUERY, "documents": DOCS, "top_n": 0}).json()  # vLLM's default: all
    assert [x["index"] for x in every["results"]] == [x["index"] for x in body["results"]]


def test_rerank_teis_texts_body_answers_in_teis_shape(server, st):
    r = _post(server, "/rerank", {"query": QUERY, "texts": DOCS, "return_text": True})
    assert r.status_code == 200, r.text
    ranks = r.json()
    _check_ranked(st, ranks, "score")
    assert all(set(x) == {"index", "score", "text"} and x["text"] == DOCS[x["index"]] for x in ranks)


def test_rerank_query_over_the_context_is_400_documents_are_cut(server, st):
    for path in ("/v1/rerank", "/rerank"):
        msg = _openai_error(_post(server, path, {"query": LONG, "documents": DOCS}), 400, "query")
        assert msg.startswith("The query at index 0 (402 tokens) is longer than the model's context length")
    assert "query" in _tei_error(_post(server, "/rerank", {"query": LONG, "texts": DOCS}), 422, "Validation")
    r = _post(server, "/v1/rerank", {"query": QUERY, "documents": [LONG, DOCS[0]]})
    assert r.status_code == 200 and r.json()["results"][0]["index"] == 1


def test_rerank_errors_follow_the_body(server):
    # /v1/rerank's body on /rerank: OpenAI's shape, as /v1/rerank answers
    _openai_error(_post(server, "/rerank", {"query": QUERY, "documents": []}), 400, "documents")
    _openai_error(_post(server, "/rerank", {"query": QUERY, "documents": [1]}), 400, "documents")
    _openai_error(_post(server, "/rerank", {"query": QUERY, "documents": DOCS, "top_n": -1}), 400, "top_n")
    # TEI's body: TEI's shape
    assert (
        _tei_error(_post(server, "/rerank", {"query": QUERY, "texts": []}), 400, "Empty") == "`texts` cannot be empty"
    )
    _tei_error(_post(server, "/rerank", {"query": QUERY}), 422, "Validation")


# ----- TEI /similarity, POST / and huggingface_hub -----
@pytest.mark.parametrize("path", ["/similarity", "/"])
def test_tei_similarity_is_a_list_of_cosines(server, st, path):
    r = _post(server, path, {"inputs": {"source_sentence": QUERY, "sentences": DOCS}, "parameters": {}})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json(), _cos(st, [QUERY], DOCS)[0], atol=1e-4)


def test_tei_similarity_errors_are_teis(server):
    empty = _post(server, "/similarity", {"inputs": {"source_sentence": QUERY, "sentences": []}})
    assert _tei_error(empty, 400, "Empty") == "`inputs.sentences` cannot be empty"
    _tei_error(_post(server, "/similarity", {"inputs": {"source_sentence": QUERY}}), 422, "Validation")
    _tei_error(_post(server, "/", {"inputs": {"source_sentence": 3, "sentences": ["a"]}}), 422, "Validation")
    many = {"inputs": {"source_sentence": QUERY, "sentences": ["a"] * 8}}
    _tei_error(_post(server, "/similarity", many), 413, "Validation")
    long = {"inputs": {"source_sentence": LONG, "sentences": ["a"]}, "parameters": {"truncate": False}}
    _tei_error(_post(server, "/similarity", long), 422, "Validation")


def test_root_route_still_embeds_plain_inputs(server, st):
    r = _post(server, "/", {"inputs": DOCS[0]})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()[0], st.encode(DOCS[0]), atol=1e-5)


def test_huggingface_hub_sentence_similarity(server, st, monkeypatch):
    import huggingface_hub.constants
    from huggingface_hub import InferenceClient

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # loopback only
    out = InferenceClient(model=server.base_url).sentence_similarity(QUERY, DOCS)
    np.testing.assert_allclose(out, _cos(st, [QUERY], DOCS)[0], atol=1e-4)


def test_openapi_lists_the_similarity_routes(server):
    paths = requests.get(server.base_url + "/openapi.json", timeout=10).json()["paths"]
    for path in ("/score", "/v1/score", "/similarity", "/rerank"):
        assert "post" in paths[path], path
    assert len(paths["/rerank"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"]) == 2


# ----- a cross-encoder keeps its scores -----
def test_score_on_a_cross_encoder_is_its_rerank_score(tmp_path):
    d = build_tiny_bert_task(str(tmp_path / "ce"), "seq_cls", num_labels=1, id2label={0: "relevant"})
    with ServerProcess("--model-path", d, "--max-batch-size", "8", "--cpu-threads", "1") as s:
        ranked = _post(s, "/v1/rerank", {"query": QUERY, "documents": DOCS}).json()["results"]
        want = {r["index"]: r["relevance_score"] for r in ranked}
        score = _post(s, "/score", {"queries": QUERY, "documents": DOCS})
        assert score.status_code == 200, score.text
        np.testing.assert_allclose([x["score"] for x in score.json()["data"]], [want[i] for i in range(4)], atol=1e-6)
        on_tei_route = _post(s, "/rerank", {"query": QUERY, "documents": DOCS}).json()["results"]  # the same route
        assert [(r["index"], r["relevance_score"]) for r in on_tei_route] == [
            (r["index"], want[r["index"]]) for r in ranked
        ]
        pairs = _post(s, "/v1/score", {"text_1": [QUERY, QUERY], "text_2": DOCS[:2]}).json()
        np.testing.assert_allclose([x["score"] for x in pairs["data"]], [want[0], want[1]], atol=1e-6)
        # TEI's /similarity is for embedding models, as in TEI
        sim = _post(s, "/similarity", {"inputs": {"source_sentence": QUERY, "sentences": DOCS}})
        assert "embedding" in _tei_error(sim, 424, "Backend")
