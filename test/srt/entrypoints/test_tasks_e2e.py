"""/v1/rerank, /v1/classify, /embed_sparse and the logit / sparse forms of /v1/embeddings on real
servers over tiny checkpoints: a BERT cross-encoder, a Qwen2 3-label classifier, and a bge-m3-like
XLM-R started with --sparse-head; plus Engine.encode on a SPLADE model."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import requests
import torch

from sglang.srt.frontend.openai.task_protocol import ClassifyResponse, RerankResponse, SparseValue
from test.helpers.server import ServerProcess
from test.helpers.tiny_task_models import build_tiny_bert_task, build_tiny_decoder_classifier, build_tiny_xlm_roberta

pytestmark = pytest.mark.slow

QUERY = "the river"
DOCS = ["a dog in the house", "the river by the mountain", "three blue books", "water and fire in the city"]
LABELS = {0: "negative", 1: "positive", 2: "neutral"}
SERVER_ARGS = ("--max-batch-size", "8", "--cpu-threads", "1")


def _post(server: ServerProcess, path: str, payload) -> requests.Response:
    return requests.post(server.base_url + path, json=payload, timeout=60)


def _hf_logits(model_dir: str, first: list[str], second=None) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(**tok(first, second, padding=True, return_tensors="pt")).logits.numpy()


def _error(resp: requests.Response, status: int, param=None) -> str:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    if param is not None:
        assert err["param"] == param, err
    return err["message"]


def _tei_error(resp: requests.Response, status: int, error_type: str, names: str) -> str:
    """TEI's `{"error": str, "error_type": str}`; the message names `names`."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    assert names in body["error"], body
    return body["error"]


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    d = build_tiny_bert_task(str(tmp_path_factory.mktemp("ce")), "seq_cls", num_labels=1, id2label={0: "relevant"})
    with ServerProcess("--model-path", d, "--served-model-name", "ce", "--strict-model-name", *SERVER_ARGS) as s:
        s.model_dir = d
        yield s


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    d = build_tiny_decoder_classifier(str(tmp_path_factory.mktemp("cls")), "qwen2", num_labels=3, id2label=LABELS)
    with ServerProcess(
        "--model-path", d, "--served-model-name", "cls", "alias", "--strict-model-name", *SERVER_ARGS
    ) as s:
        s.model_dir = d
        yield s


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    d = build_tiny_xlm_roberta(str(tmp_path_factory.mktemp("m3")), st_pooling="cls", sparse_linear=True)
    with ServerProcess(
        "--model-path", d, "--served-model-name", "m3", "--sparse-head", "sparse_linear.pt", *SERVER_ARGS
    ) as s:
        s.model_dir = d
        yield s


def test_rerank_orders_documents_like_transformers(cross_encoder):
    r = _post(cross_encoder, "/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "ce"})
    assert r.status_code == 200, r.text
    body = r.json()
    RerankResponse.model_validate(body)  # the schema /docs advertises
    logits = _hf_logits(cross_encoder.model_dir, [QUERY] * len(DOCS), DOCS)[:, 0]
    assert [x["index"] for x in body["results"]] == np.argsort(-logits, kind="stable").tolist()
    scores = {x["index"]: x["relevance_score"] for x in body["results"]}
    np.testing.assert_allclose([scores[i] for i in range(len(DOCS))], 1 / (1 + np.exp(-logits)), atol=1e-5)
    assert body["results"][0]["document"]["text"] == DOCS[body["results"][0]["index"]]
    assert body["model"] == "ce" and body["usage"]["prompt_tokens"] > 0 and "x-inference-time" in r.headers
    top = _post(
        cross_encoder, "/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2, "return_documents": False}
    ).json()["results"]
    assert [x["index"] for x in top] == [x["index"] for x in body["results"][:2]] and "document" not in top[0]


def test_cross_encoder_classify_and_embeddings_give_its_logit(cross_encoder):
    logit = float(_hf_logits(cross_encoder.model_dir, ["the cat"])[0, 0])
    item = _post(cross_encoder, "/v1/classify", {"input": "the cat"}).json()["data"][0]
    assert item["label"] == "relevant" and item["num_classes"] == 1
    assert abs(item["logits"][0] - logit) <= 1e-4 and abs(item["probs"][0] - 1 / (1 + np.exp(-logit))) <= 1e-5
    emb = _post(cross_encoder, "/v1/embeddings", {"input": ["the cat"]}).json()["data"][0]["embedding"]
    assert len(emb) == 1 and abs(emb[0] - logit) <= 1e-4


@pytest.mark.parametrize(
    "payload, status, param",
    [
        ({"query": QUERY, "documents": []}, 400, "documents"),
        ({"query": QUERY, "documents": DOCS, "top_n": -1}, 400, "top_n"),
        ({"query": "  ", "documents": DOCS}, 400, "query"),
        ({"query": QUERY, "documents": ["ok", ""]}, 400, "documents"),
        ({"query": QUERY, "documents": "not a list"}, 400, "documents"),
        ({"documents": DOCS}, 400, "query"),
        ({"query": QUERY, "documents": DOCS, "model": "other"}, 404, "model"),
        ({"query": QUERY, "documents": DOCS, "instruction": "x"}, 400, "instruction"),  # no LLM-reranker prompt
    ],
)
def test_rerank_bad_inputs(cross_encoder, payload, status, param):
    _error(_post(cross_encoder, "/v1/rerank", payload), status, param)


def test_classify_labels_match_transformers(classifier):
    texts = ["the cat", "a fast embedding server", "three blue books in the house by the river"]
    r = _post(classifier, "/v1/classify", {"input": texts, "model": "alias"})  # an alias; answers name "cls"
    assert r.status_code == 200, r.text
    body = r.json()
    ClassifyResponse.model_validate(body)
    ref = _hf_logits(classifier.model_dir, texts)
    assert [d["label"] for d in body["data"]] == [LABELS[i] for i in ref.argmax(1)]
    np.testing.assert_allclose([d["logits"] for d in body["data"]], ref, atol=1e-4)
    probs = np.asarray([d["probs"] for d in body["data"]])
    np.testing.assert_allclose(probs, np.exp(ref) / np.exp(ref).sum(1, keepdims=True), atol=1e-5)
    assert body["object"] == "list" and body["model"] == "cls" and body["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize(
    "path, payload, status, param",
    [
        ("/v1/classify", {"input": []}, 400, "input"),
        ("/v1/classify", {"input": ""}, 400, "input"),
        ("/v1/classify", {"input": {"text": "x"}}, 400, "input"),
        ("/v1/classify", {"input": "x", "model": "other"}, 404, "model"),
        ("/v1/rerank", {"query": QUERY, "documents": DOCS}, 400, "model"),  # 3 labels: not a reranker
    ],
)
def test_classifier_bad_inputs(classifier, path, payload, status, param):
    _error(_post(classifier, path, payload), status, param)


def test_vllm_pooling_on_a_classifier(classifier):
    # No per-token classifier head here: without `task` a classifier answers `classify`.
    default = _post(classifier, "/pooling", {"input": ["a dog", "three blue books"]})
    explicit = _post(classifier, "/pooling", {"input": ["a dog", "three blue books"], "task": "classify"})
    assert default.status_code == 200, default.text
    assert [d["data"] for d in default.json()["data"]] == [d["data"] for d in explicit.json()["data"]]
    assert all(len(d["data"]) == 3 and abs(sum(d["data"]) - 1) < 1e-5 for d in default.json()["data"])
    for task in ("token_classify", "token_embed", "embed"):
        assert task in _error(_post(classifier, "/pooling", {"input": "x", "task": task}), 400, "task")


def test_tei_routes_refuse_a_classifier_as_tei_does(classifier):
    # TEI's 424 Backend: the model cannot do what the route does.
    _tei_error(_post(classifier, "/embed_sparse", {"inputs": "x"}), 424, "Backend", "no sparse head")
    _tei_error(_post(classifier, "/embed_all", {"inputs": "x"}), 424, "Backend", "is a classifier")


def test_embed_sparse_is_tei_shaped_with_optional_texts(sparse):
    texts = ["the cat and the dog", "river"]
    r = _post(sparse, "/embed_sparse", {"inputs": texts, "truncate": False})
    assert r.status_code == 200, r.text
    rows = r.json()
    assert len(rows) == 2 and all(set(e) == {"index", "value"} for e in rows[0])
    assert [e["index"] for e in rows[0]] == sorted(e["index"] for e in rows[0]) and all(e["value"] > 0 for e in rows[0])
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(sparse.model_dir)
    ids = set(tok(texts[0])["input_ids"]) - set(tok.all_special_ids)
    assert {e["index"] for e in rows[0]} <= ids
    with_text = _post(sparse, "/embed_sparse", {"inputs": "the cat and the dog", "return_text": True}).json()
    assert [e["index"] for e in with_text[0]] == [e["index"] for e in rows[0]]
    assert all(SparseValue.model_validate(e).text for e in with_text[0])
    assert [e["text"] for e in with_text[0]] == tok.convert_ids_to_tokens([e["index"] for e in rows[0]])


def test_embeddings_answer_sparse_dicts(sparse):
    single = _post(sparse, "/embed_sparse", {"inputs": "the cat and the dog"}).json()[0]
    r = _post(sparse, "/v1/embeddings", {"input": ["the cat and the dog"], "model": "m3"})
    assert r.status_code == 200, r.text
    emb = r.json()["data"][0]["embedding"]
    assert {int(k): v for k, v in emb.items()} == {e["index"]: e["value"] for e in single}
    _error(_post(sparse, "/v1/embeddings", {"input": "x", "encoding_format": "base64"}), 400, "encoding_format")


@pytest.mark.parametrize(
    "payload, status, error_type, names",
    [
        ({"inputs": []}, 400, "Empty", "`inputs` cannot be empty"),
        ({"inputs": [""]}, 400, "Empty", "`inputs` cannot be empty"),
        ({"inputs": 5}, 422, "Validation", "'inputs' must be a string or a list of strings"),
        ({}, 422, "Validation", "inputs"),
        ({"inputs": "x", "return_text": "yes"}, 422, "Validation", "return_text"),
    ],
)
def test_embed_sparse_bad_inputs(sparse, payload, status, error_type, names):
    _tei_error(_post(sparse, "/embed_sparse", payload), status, error_type, names)
    _error(_post(sparse, "/v1/classify", {"input": "x"}), 400, "model")


def test_vllm_pooling_token_embed_on_a_sparse_model_is_dense_rows(sparse):
    """token_embed's rows are hidden states even where the pooled output is sparse weights."""
    (hidden,) = _post(sparse, "/embed_all", {"inputs": "the cat and the dog"}).json()
    raw = _post(sparse, "/pooling", {"input": "the cat and the dog", "normalize": False}).json()["data"][0]["data"]
    np.testing.assert_allclose(np.asarray(raw), np.asarray(hidden), atol=1e-5)
    b64 = _post(sparse, "/pooling", {"input": "the cat and the dog", "encoding_format": "base64"})
    assert b64.status_code == 200, b64.text
    rows = np.frombuffer(base64.b64decode(b64.json()["data"][0]["data"]), "<f4").reshape(len(hidden), -1)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    sparse_vec = _post(sparse, "/pooling", {"input": "the cat and the dog", "task": "embed"}).json()["data"][0]["data"]
    assert isinstance(sparse_vec, dict)  # task embed: the model's own (sparse) output, as /v1/embeddings


def test_engine_encode_returns_sparse_dicts_for_splade(tmp_path):
    from sentence_transformers import SparseEncoder
    from transformers import AutoTokenizer

    import sglang
    from test.helpers.tiny_task_models import build_tiny_splade

    d = build_tiny_splade(str(tmp_path / "splade"))
    texts = ["the cat and the dog", "three blue books"]
    with sglang.Engine(model_path=d, cpu_threads=1) as engine:
        assert engine.get_model_info()["embeddings_output"] == "sparse"
        out = engine.encode(texts)
    ref = SparseEncoder(d, device="cpu").encode(texts).to_dense().numpy()
    ref[:, AutoTokenizer.from_pretrained(d).all_special_ids] = 0.0
    for item, expected in zip(out, ref):
        emb = item["embedding"]
        assert sorted(emb) == np.flatnonzero(expected).tolist() and all(isinstance(k, int) for k in emb)
        np.testing.assert_allclose([emb[k] for k in sorted(emb)], expected[sorted(emb)], rtol=1e-4, atol=1e-5)


# ----- TEI's /rerank and /predict on the same checkpoints -----
def test_tei_rerank_shape_and_scores(cross_encoder):
    ref = _hf_logits(cross_encoder.model_dir, [QUERY] * len(DOCS), DOCS)[:, 0]
    r = _post(cross_encoder, "/rerank", {"query": QUERY, "texts": DOCS, "return_text": True})
    assert r.status_code == 200, r.text
    ranks = r.json()
    assert [x["index"] for x in ranks] == list(np.argsort(-ref, kind="stable"))
    np.testing.assert_allclose([x["score"] for x in ranks], 1 / (1 + np.exp(-np.sort(ref)[::-1])), atol=1e-5)
    assert all(x["text"] == DOCS[x["index"]] for x in ranks)
    raw = _post(cross_encoder, "/rerank", {"query": QUERY, "texts": DOCS, "raw_scores": True}).json()
    assert "text" not in raw[0] and abs(raw[0]["score"] - ref.max()) < 1e-4
    empty = _post(cross_encoder, "/rerank", {"query": QUERY, "texts": []})
    assert empty.status_code == 400 and empty.json() == {"error": "`texts` cannot be empty", "error_type": "Empty"}


def test_tei_predict_single_pair_and_batch(classifier):
    texts = ["the cat", "three blue books"]
    ref = _hf_logits(classifier.model_dir, texts)
    probs = np.exp(ref) / np.exp(ref).sum(1, keepdims=True)
    single = _post(classifier, "/predict", {"inputs": texts[0]}).json()
    assert [p["label"] for p in single] == [LABELS[i] for i in np.argsort(-probs[0])]
    np.testing.assert_allclose(sorted((p["score"] for p in single), reverse=True), np.sort(probs[0])[::-1], atol=1e-5)
    batch = _post(classifier, "/predict", {"inputs": [[texts[0]], [texts[1]], ["the cat", "the dog"]]}).json()
    assert len(batch) == 3 and {p["label"] for p in batch[2]} == set(LABELS.values())
    np.testing.assert_allclose(
        {p["label"]: p["score"] for p in batch[1]}["positive"], probs[1][1], atol=1e-5
    )  # a batch of singles and a pair, in request order
    info = requests.get(classifier.base_url + "/info", timeout=10).json()
    assert info["model_type"]["classifier"]["id2label"] == {str(k): v for k, v in LABELS.items()}
    assert _post(classifier, "/embed", {"inputs": "x"}).status_code == 424
