"""The real server (three processes) on the bundled all-MiniLM-L6-v2, over HTTP."""

from __future__ import annotations

import base64
import os
import signal

import numpy as np
import pytest
import requests

from test.helpers.procs import running
from test.helpers.responses import response_vectors as _vectors
from test.helpers.server import ServerProcess
from test.helpers.texts import load_texts
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def server(default_server):
    return default_server  # conftest.py: shared with the other modules that need no flags


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    from sglang.srt.server_args import default_model_path

    return SentenceTransformer(default_model_path(), device="cpu")


def _post(server, payload, **kw):
    return requests.post(server.base_url + "/v1/embeddings", json=payload, timeout=60, **kw)


def test_response_shape_is_openai(server):
    r = _post(server, {"input": "hello world", "model": MODEL})
    body = r.json()
    assert set(body) == {"object", "data", "model", "usage"}
    assert body["object"] == "list" and body["model"] == MODEL
    assert body["data"][0]["object"] == "embedding" and len(body["data"][0]["embedding"]) == 384
    assert body["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    assert r.headers["content-type"] == "application/json"
    assert float(r.headers["x-total-time"]) >= float(r.headers["x-inference-time"]) >= 0


def test_parity_with_sentence_transformers(server, st_model):
    tok = st_model.tokenizer
    texts = [t for t in load_texts() if len(tok(t)["input_ids"]) <= 256]
    assert len(texts) >= 100
    ours = np.concatenate([_vectors(_post(server, {"input": texts[i : i + 32]})) for i in range(0, len(texts), 32)])
    ref = st_model.encode(texts, batch_size=32, convert_to_numpy=True)
    cos = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() >= 0.9999, f"worst cosine {cos.min()} at {texts[int(cos.argmin())]!r}"


def test_batch_equals_single_requests(server):
    texts = [t for t in load_texts() if len(t.split()) < 150][:12]
    batched = _vectors(_post(server, {"input": texts}))
    single = np.concatenate([_vectors(_post(server, {"input": t})) for t in texts])
    assert np.abs(batched - single).max() <= 1e-5


def test_base64_matches_float(server):
    texts = ["alpha beta", "gamma"]
    floats = _vectors(_post(server, {"input": texts}))
    data = _post(server, {"input": texts, "encoding_format": "base64"}).json()["data"]
    decoded = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data])
    np.testing.assert_array_equal(decoded, floats)


def test_openai_client_default_base64(server):
    import openai

    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
    res = client.embeddings.create(input=["the cat sat", "on the mat"], model=MODEL)
    got = np.asarray([d.embedding for d in res.data], dtype=np.float32)
    np.testing.assert_allclose(got, _vectors(_post(server, {"input": ["the cat sat", "on the mat"]})), atol=1e-7)
    assert res.usage.prompt_tokens == res.usage.total_tokens > 0
    # Any `model` is served, as SGLang does (--strict-model-name restores the 404); the answer names ours.
    assert client.embeddings.create(input="x", model="other-model").model == MODEL


def test_token_id_inputs(server):
    text_vec = _vectors(_post(server, {"input": "hello world"}))
    ids = [101, 7592, 2088, 102]
    np.testing.assert_allclose(_vectors(_post(server, {"input": ids})), text_vec, atol=1e-6)
    both = _vectors(_post(server, {"input": [ids, ids[:2] + [102]]}))
    assert both.shape == (2, 384)
    np.testing.assert_allclose(both[0], text_vec[0], atol=1e-6)


@pytest.mark.parametrize(
    "payload,status,param,fragment",
    [
        ({"input": []}, 400, "input", "empty"),
        ({"input": ""}, 400, "input", "empty"),
        ({"input": ["ok", "   "]}, 400, "input", "whitespace"),
        ({"input": 5}, 400, "input", "must be a string"),
        ({"input": [1, "a"]}, 400, "input", "must be a string"),
        ({"input": [[1, 2], []]}, 400, "input", "empty"),
        ({"input": [-3, 4]}, 400, "input", "outside the vocabulary"),
        ({"input": [101, 999999]}, 400, "input", "outside the vocabulary"),
        (
            {"input": "word " * 300},
            400,
            "input",
            "The input at index 0 (302 tokens) is longer than the model's context length (256 tokens).",
        ),
        ({"input": "x", "encoding_format": "int8"}, 400, "encoding_format", "encoding_format"),
        ({"input": "x", "dimensions": 8}, 400, "dimensions", "matryoshka"),
        ({}, 400, "input", ""),
    ],
)
def test_errors_are_openai_shaped(server, payload, status, param, fragment):
    r = _post(server, payload)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and fragment in err["message"]
    if status == 404:
        assert err["code"] == "model_not_found"


def test_malformed_json_is_400(server):
    r = requests.post(
        server.base_url + "/v1/embeddings", data=b"{not json", timeout=10, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]


def test_health_models_and_model_info(server):
    assert requests.get(server.base_url + "/health", timeout=5).status_code == 200
    models = requests.get(server.base_url + "/v1/models", timeout=5).json()
    assert models["object"] == "list" and models["data"][0]["id"] == MODEL
    info = requests.get(server.base_url + "/model_info", timeout=5).json()
    assert info["embedding_dim"] == 384 and info["pooling"] == "mean" and info["max_input_length"] == 256


def test_server_survives_errors_and_keeps_serving(server):
    for _ in range(3):
        _post(server, {"input": ""})
    assert _post(server, {"input": "still alive"}).status_code == 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_shutdown_leaves_nothing_behind(sig):
    s = ServerProcess()
    children = s.children()
    assert len(children) >= 2  # scheduler and detokenizer (plus multiprocessing's helper)
    ipc_dir = s.ipc_dir()
    assert os.stat(ipc_dir).st_mode & 0o777 == 0o700
    assert s.stop(sig) == 0
    assert wait_until(lambda: not running(children), 5.0)
    assert not os.path.exists(ipc_dir)


def test_health_fails_and_server_exits_when_scheduler_dies():
    s = ServerProcess()
    # The scheduler is the child that loaded torch and the model: the largest resident set.
    rss = {p: int(open(f"/proc/{p}/statm").read().split()[1]) for p in s.children()}
    victim = max(rss, key=rss.get)
    os.kill(victim, signal.SIGKILL)

    def unhealthy() -> bool:
        try:
            return requests.get(s.base_url + "/health", timeout=1).status_code != 200
        except requests.ConnectionError:
            return True  # down

    assert wait_until(unhealthy, 10, interval=0.1)
    assert s.proc.wait(15) == 1
    s.stop()
