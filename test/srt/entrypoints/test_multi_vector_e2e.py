"""Multi-vector output on real servers: a Stanford ColBERT checkpoint (multi-vector by default,
query / document forms, base64, MaxSim /v1/rerank) and a bge-m3-like model (dense by default,
`multi_vector: true` on request, MaxSim averaged); TEI's /embed_all on both; the errors."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import requests
import torch

from test.helpers.colbert_reference import bge_m3_colbert_reference, colbert_reference, maxsim_reference
from test.helpers.server import ServerProcess
from test.helpers.tiny_encoders import COLBERT_DIM, build_tiny_stanford_colbert, write_colbert_linear
from test.helpers.tiny_task_models import build_tiny_xlm_roberta

pytestmark = pytest.mark.slow

SERVER_ARGS = ("--max-batch-size", "8", "--cpu-threads", "1")
QUERY = "the river and the city"
DOCS = ["a dog in the house.", "the river by the mountain, in the city", "three blue books!"]


def _post(server, path, payload) -> requests.Response:
    return requests.post(server.base_url + path, json=payload, timeout=60)


def _close(vectors, ref_vectors) -> None:
    vectors = np.asarray(vectors, dtype=np.float64)
    assert vectors.shape == ref_vectors.shape
    assert (np.linalg.norm(vectors - ref_vectors, axis=1) / np.linalg.norm(ref_vectors, axis=1)).max() <= 1e-4


@pytest.fixture(scope="module")
def colbert(tmp_path_factory):
    d = build_tiny_stanford_colbert(str(tmp_path_factory.mktemp("colbert") / "m"))
    with ServerProcess("--model-path", d, "--served-model-name", "colbert", *SERVER_ARGS) as s:
        s.model_dir = d
        yield s


@pytest.fixture(scope="module")
def m3(tmp_path_factory):
    d = build_tiny_xlm_roberta(str(tmp_path_factory.mktemp("m3") / "m"), st_pooling="cls")
    write_colbert_linear(d, 32)
    with ServerProcess("--model-path", d, "--served-model-name", "m3", *SERVER_ARGS) as s:
        s.model_dir = d
        yield s


def test_colbert_embeddings_are_per_token_with_token_ids(colbert):
    info = requests.get(colbert.base_url + "/model_info", timeout=10).json()
    assert info["embeddings_output"] == "multi_vector" and info["multi_vector_dim"] == COLBERT_DIM
    docs = _post(colbert, "/v1/embeddings", {"input": DOCS, "model": "colbert"}).json()["data"]
    for item, (ref, ref_ids) in zip(docs, colbert_reference(colbert.model_dir, DOCS, is_query=False)):
        _close(item["embedding"], ref)
        assert item["token_ids"] == ref_ids
    query = _post(colbert, "/v1/embeddings", {"input": QUERY, "input_type": "query"}).json()["data"][0]
    ref, ref_ids = colbert_reference(colbert.model_dir, [QUERY], is_query=True)[0]
    _close(query["embedding"], ref)
    assert query["token_ids"] == ref_ids and len(ref_ids) == 12  # expanded to query_length
    b64 = _post(colbert, "/v1/embeddings", {"input": QUERY, "input_type": "query", "encoding_format": "base64"})
    flat = np.frombuffer(base64.b64decode(b64.json()["data"][0]["embedding"]), dtype="<f4")
    _close(flat.reshape(-1, COLBERT_DIM), ref)


def test_colbert_rerank_is_maxsim(colbert):
    body = _post(colbert, "/v1/rerank", {"query": QUERY, "documents": DOCS}).json()
    q = colbert_reference(colbert.model_dir, [QUERY], is_query=True)[0][0]
    docs = colbert_reference(colbert.model_dir, DOCS, is_query=False)
    expected = [maxsim_reference(q, d) for d, _ in docs]
    assert [r["index"] for r in body["results"]] == np.argsort(-np.array(expected), kind="stable").tolist()
    got = {r["index"]: r["relevance_score"] for r in body["results"]}
    np.testing.assert_allclose([got[i] for i in range(len(DOCS))], expected, rtol=1e-4)
    assert body["usage"]["prompt_tokens"] > 0 and body["results"][0]["document"]["text"] in DOCS


@pytest.mark.parametrize(
    "payload, param",
    [
        ({"input": "the cat", "multi_vector": False}, "multi_vector"),
        ({"input": "the cat", "dimensions": 4}, "dimensions"),
        ({"input": "the cat", "input_type": "summary"}, "input_type"),
        ({"input": "the cat", "normalize": False}, "normalize"),  # per-token rows come as the checkpoint makes them
        ({"input": "the cat", "truncate": False}, "truncate"),  # ColBERT's own lengths always apply
    ],
)
def test_colbert_refusals(colbert, payload, param):
    r = _post(colbert, "/v1/embeddings", payload)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_embed_all_is_every_hidden_state(m3, colbert):
    from transformers import AutoModel, AutoTokenizer

    r = _post(m3, "/embed_all", {"inputs": DOCS[:2], "truncate": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body) == 2
    tok = AutoTokenizer.from_pretrained(m3.model_dir)
    model = AutoModel.from_pretrained(m3.model_dir, attn_implementation="eager").eval()
    for rows, text in zip(body, DOCS):
        with torch.no_grad():
            ref = model(**tok(text, return_tensors="pt")).last_hidden_state[0].numpy()
        _close(rows, ref)
    single = _post(colbert, "/embed_all", {"inputs": "the cat"}).json()
    assert len(single) == 1 and len(single[0]) == 4 and len(single[0][0]) == 32  # [CLS] the cat [SEP], hidden 32


def test_bge_m3_dense_by_default_multi_vector_on_request(m3):
    dense = _post(m3, "/v1/embeddings", {"input": DOCS[0]}).json()["data"][0]
    assert len(dense["embedding"]) == 32 and "token_ids" not in dense
    multi = _post(m3, "/v1/embeddings", {"input": DOCS, "multi_vector": True}).json()["data"]
    for item, (ref, ref_ids) in zip(multi, bge_m3_colbert_reference(m3.model_dir, DOCS)):
        _close(item["embedding"], ref)
        assert item["token_ids"] == ref_ids
    body = _post(m3, "/v1/rerank", {"query": QUERY, "documents": DOCS, "return_documents": False}).json()
    q = bge_m3_colbert_reference(m3.model_dir, [QUERY])[0][0]
    expected = [maxsim_reference(q, d, "mean") for d, _ in bge_m3_colbert_reference(m3.model_dir, DOCS)]
    got = {r["index"]: r["relevance_score"] for r in body["results"]}
    np.testing.assert_allclose([got[i] for i in range(len(DOCS))], expected, rtol=1e-4)


def test_engine_encode_multi_vector(tmp_path):
    from sglang import Engine

    d = build_tiny_stanford_colbert(str(tmp_path / "colbert"), seed=1)
    with Engine(model_path=d, cpu_threads=1) as engine:
        out = engine.encode(DOCS)
        query = engine.encode(QUERY, input_type="query")
    for item, (ref, ref_ids) in zip(out, colbert_reference(d, DOCS, is_query=False)):
        _close(item["embedding"], ref)
        assert item["token_ids"] == ref_ids
    ref, ref_ids = colbert_reference(d, [QUERY], is_query=True)[0]
    _close(query["embedding"], ref)
    assert query["token_ids"] == ref_ids


def test_vllm_pooling_token_embed_is_the_colbert_vectors(m3, colbert):
    """vLLM's /pooling without `task` (token_embed) on a ColBERT head: its vectors, as multi_vector gives them."""
    for server, extra in ((colbert, {}), (m3, {"multi_vector": True})):
        want = _post(server, "/v1/embeddings", {"input": DOCS[:2], **extra}).json()["data"]
        got = _post(server, "/pooling", {"input": DOCS[:2]})
        assert got.status_code == 200, got.text
        for item, ref in zip(got.json()["data"], want):
            _close(item["data"], np.asarray(ref["embedding"]))
    explicit = _post(m3, "/pooling", {"input": DOCS[0], "task": "token_embed", "encoding_format": "base64"}).json()
    (ref,) = _post(m3, "/v1/embeddings", {"input": [DOCS[0]], "multi_vector": True}).json()["data"]
    flat = np.frombuffer(base64.b64decode(explicit["data"][0]["data"]), "<f4")
    np.testing.assert_allclose(flat, np.asarray(ref["embedding"], np.float32).reshape(-1), atol=1e-6)
    pooled = _post(m3, "/pooling", {"input": DOCS[0], "task": "embed"}).json()["data"][0]["data"]
    assert len(pooled) == 32 and isinstance(pooled[0], float)  # bge-m3's dense vector
