"""Drop-in for the peers' users, on one real server over a copy of the bundled all-MiniLM-L6-v2
that carries e5-style prompts (config_sentence_transformers.json written here): SGLang's text
example, the openai client, vLLM's / TEI's / infinity's / Cohere's routes and options, quantized
outputs against sentence-transformers, huggingface_hub's InferenceClient, and /openapi.json."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
import openai
import pytest
import requests

from test.helpers.server import ServerProcess

pytestmark = pytest.mark.slow
PROMPTS = {"query": "query: ", "passage": "passage: "}
TEXTS = ["how much protein should a female eat", "summit define", "the cat sat on the mat by the river"]
NAME, ALIAS = "all-MiniLM-L6-v2", "minilm"
MAX_PAYLOAD = 100_000


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    from sglang.srt.server_args import default_model_path

    d = tmp_path_factory.mktemp("minilm") / "model"
    shutil.copytree(default_model_path(), d)
    cfg_path = d / "config_sentence_transformers.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    cfg.update(prompts=PROMPTS, default_prompt_name=None)
    cfg_path.write_text(json.dumps(cfg))
    return str(d)


@pytest.fixture(scope="module")
def server(model_dir):
    args = ("--model-path", model_dir, "--served-model-name", NAME, ALIAS, "--max-payload-bytes", str(MAX_PAYLOAD))
    with ServerProcess(*args) as s:
        yield s


@pytest.fixture(scope="module")
def st(model_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_dir, device="cpu")


def _post(server, path, payload) -> requests.Response:
    return requests.post(server.base_url + path, json=payload, timeout=60)


def _floats(data) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


# ----- SGLang and OpenAI -----
def test_sglang_text_example_as_written_with_any_model_name(server, st):
    payload = {
        "model": "Qwen/Qwen3-Embedding-4B",
        "input": "What is the capital of France?",
        "encoding_format": "float",
    }
    response = _post(server, "/v1/embeddings", payload).json()
    assert response["model"] == NAME  # served whatever `model` says; the answer names the served model
    ref = st.encode(["What is the capital of France?"])
    np.testing.assert_allclose(_floats(response["data"][0]["embedding"]), ref[0], atol=1e-5)


def test_openai_client_base64_default_and_models_retrieve(server, st):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
    out = client.embeddings.create(model=ALIAS, input=TEXTS)  # the client asks for base64 and decodes it
    np.testing.assert_allclose(_floats([d.embedding for d in out.data]), st.encode(TEXTS), atol=1e-5)
    assert client.models.retrieve(ALIAS).id == ALIAS
    assert [m.id for m in client.models.list().data] == [NAME, ALIAS]
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope/not-served")
    # dimensions equal to the full width is accepted on a non-Matryoshka model
    assert len(client.embeddings.create(model=NAME, input="x", dimensions=384).data[0].embedding) == 384


def test_payload_too_large_is_json_413(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        client.embeddings.create(model=NAME, input="hello " * (MAX_PAYLOAD // 5))
    assert e.value.status_code == 413 and "Payload Too Large" in str(e.value)


# ----- vLLM -----
def test_truncate_prompt_tokens_keeps_the_last_tokens_and_counts_them(server, st):
    text = "one two three four five six seven eight nine ten"
    r = _post(server, "/v1/embeddings", {"input": text, "truncate_prompt_tokens": 6}).json()
    assert r["usage"]["prompt_tokens"] == 6
    ref = st.encode(["seven eight nine ten"])  # [CLS] + the last 4 words + [SEP]
    np.testing.assert_allclose(_floats(r["data"][0]["embedding"]), ref[0], atol=1e-5)
    full = _post(server, "/v1/embeddings", {"input": text, "truncate_prompt_tokens": -1}).json()
    assert full["usage"]["prompt_tokens"] == 12


@pytest.mark.parametrize(
    "extra, param, fragment",
    [
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "got 0"),
        ({"truncate_prompt_tokens": 257}, "truncate_prompt_tokens", "(257) is greater than"),
        ({"embed_dtype": "fp8_e4m3"}, "embed_dtype", "'fp8_e4m3'"),
        ({"encoding_format": "int8"}, "encoding_format", "'int8'"),
        ({"use_activation": False, "normalize": True}, "use_activation", "disagree"),
        ({"messages": [{"role": "user", "content": "x"}]}, "messages", "not both"),  # chat form: without `input`
        ({"prompt_name": "nope"}, "prompt_name", "['document', 'passage', 'query']"),
    ],
)
def test_unsupported_or_bad_options_are_400_naming_them(server, extra, param, fragment):
    r = _post(server, "/v1/embeddings", {"input": "x", "user": "harmless", **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and fragment in err["message"]


def test_over_long_input_names_index_and_count(server):
    r = _post(server, "/v1/embeddings", {"input": ["ok", "word " * 300]})
    assert r.json()["error"]["message"].startswith("The input at index 1 (302 tokens) is longer")


def test_normalize_false_and_embed_dtype(server, st):
    raw = _post(server, "/v1/embeddings", {"input": TEXTS[0], "normalize": False}).json()["data"][0]["embedding"]
    ref = st.encode([TEXTS[0]], normalize_embeddings=False)  # the bundled model normalizes in a module:
    vec = _floats(raw)
    assert abs(np.linalg.norm(vec) - 1) > 0.01
    np.testing.assert_allclose(vec / np.linalg.norm(vec), ref[0] / np.linalg.norm(ref[0]), atol=1e-5)
    r = _post(
        server,
        "/v1/embeddings",
        {"input": TEXTS[0], "encoding_format": "base64", "embed_dtype": "float16", "endianness": "big"},
    )
    half = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), ">f2")
    np.testing.assert_allclose(half.astype(np.float32), st.encode([TEXTS[0]])[0], atol=1e-3)
    ignored = _post(server, "/v1/embeddings", {"input": TEXTS[0], "embed_dtype": "float16"})  # float: no effect
    assert ignored.status_code == 400 and ignored.json()["error"]["param"] == "embed_dtype"


def test_vllm_pooling_tokenize_detokenize(server, st):
    # No task: vLLM's token_embed on an embedding model, one L2-normalized vector per token, which
    # are /embed_all's hidden states normalized row by row.
    text = "vLLM is great!"
    r = _post(server, "/pooling", {"model": NAME, "input": text}).json()
    assert r["object"] == "list" and r["data"][0]["object"] == "pooling" and r["id"].startswith("pool-")
    (hidden,) = _post(server, "/embed_all", {"inputs": text}).json()
    hidden = _floats(hidden)
    rows = _floats(r["data"][0]["data"])
    assert rows.shape == hidden.shape and r["usage"]["prompt_tokens"] == len(hidden)
    np.testing.assert_allclose(rows, hidden / np.linalg.norm(hidden, axis=1, keepdims=True), atol=1e-5)
    same = _post(server, "/pooling", {"input": [text, "x"], "task": "token_embed", "normalize": False}).json()
    np.testing.assert_allclose(_floats(same["data"][0]["data"]), hidden, atol=1e-5)
    assert len(same["data"][1]["data"]) == 3  # [CLS] x [SEP]
    cut = _post(server, "/pooling", {"input": text, "dimensions": 384, "encoding_format": "base64"}).json()
    flat = np.frombuffer(base64.b64decode(cut["data"][0]["data"]), "<f4").reshape(rows.shape)  # row-major bytes
    np.testing.assert_allclose(flat, rows, atol=1e-6)
    # task embed: one sentence-transformers vector per input, as before
    r = _post(server, "/pooling", {"input": text, "task": "embed"}).json()
    np.testing.assert_allclose(_floats(r["data"][0]["data"]), st.encode([text])[0], atol=1e-5)
    refused = _post(server, "/pooling", {"input": "x", "task": "token_classify"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "task"
    assert "token_classify" in refused.json()["error"]["message"]
    multi = _post(server, "/pooling", {"input": "x", "multi_vector": True})
    assert multi.status_code == 400 and multi.json()["error"]["param"] == "multi_vector"
    tok = _post(server, "/tokenize", {"model": NAME, "prompt": "hello world", "return_token_strs": True}).json()
    assert tok == {
        "count": 4,
        "max_model_len": 256,
        "tokens": [101, 7592, 2088, 102],
        "token_strs": ["[CLS]", "hello", "world", "[SEP]"],
    }
    assert _post(server, "/detokenize", {"tokens": [7592, 2088]}).json() == {"prompt": "hello world"}


# ----- prompts (e5-style prefixes; sentence-transformers' encode(..., prompt_name=...)) -----
def test_prompt_name_matches_sentence_transformers_and_counts_tokens(server, st):
    for name in ("query", "passage"):
        r = _post(server, "/v1/embeddings", {"input": TEXTS, "prompt_name": name}).json()
        np.testing.assert_allclose(
            _floats([d["embedding"] for d in r["data"]]), st.encode(TEXTS, prompt_name=name), atol=1e-5
        )
        with_prefix = sum(len(st.tokenizer(PROMPTS[name] + t)["input_ids"]) for t in TEXTS)
        assert r["usage"]["prompt_tokens"] == with_prefix
    raw = _post(server, "/v1/embeddings", {"input": TEXTS[:1], "instruction": "query: "}).json()
    np.testing.assert_allclose(
        _floats(raw["data"][0]["embedding"]), st.encode(TEXTS[:1], prompt="query: ")[0], atol=1e-5
    )
    # input_type (Cohere's values, as /v2/embed maps them) picks the same prompts on /v1/embeddings
    typed = _post(server, "/v1/embeddings", {"input": TEXTS, "input_type": "search_document"}).json()
    np.testing.assert_allclose(
        _floats([d["embedding"] for d in typed["data"]]), st.encode(TEXTS, prompt_name="passage"), atol=1e-5
    )
    both = _post(server, "/v1/embeddings", {"input": "x", "input_type": "search_query", "prompt_name": "query"})
    assert both.status_code == 400 and both.json()["error"]["param"] == "input_type"


# ----- quantized outputs (sentence-transformers' quantize_embeddings on the same vectors) -----
def test_embedding_types_match_quantize_embeddings(server, st):
    from sentence_transformers.util import quantize_embeddings

    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    r = _post(server, "/v1/embeddings", {"input": TEXTS, "embedding_types": types}).json()
    got = {t: [d["embeddings"][t] for d in r["data"]] for t in types}
    ref = st.encode(TEXTS)
    np.testing.assert_allclose(_floats(got["float"]), ref, atol=1e-5)
    floats = _floats(got["float"])
    for t in ("int8", "uint8", "binary", "ubinary"):
        np.testing.assert_array_equal(np.asarray(got[t]), quantize_embeddings(floats, t), err_msg=t)
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(got["base64"][2]), "<f4"), floats[2])


def test_cohere_v2_embed(server, st):
    body = {
        "model": "embed-v4.0",
        "texts": TEXTS,
        "input_type": "search_query",
        "embedding_types": ["float", "ubinary"],
    }
    r = _post(server, "/v2/embed", body).json()
    assert r["texts"] == TEXTS and r["response_type"] == "embeddings_by_type"
    assert r["meta"]["api_version"]["version"] == "2" and r["meta"]["billed_units"]["input_tokens"] > 0
    ref = st.encode(TEXTS, prompt_name="query")  # search_query -> the model's `query` prompt
    np.testing.assert_allclose(_floats(r["embeddings"]["float"]), ref, atol=1e-5)
    assert np.asarray(r["embeddings"]["ubinary"]).shape == (3, 48)
    bad = _post(server, "/v2/embed", {"texts": ["x"], "input_type": "search_everything"})
    assert bad.status_code == 400 and set(bad.json()) == {"message"} and "search_everything" in bad.json()["message"]


# ----- TEI -----
def test_tei_embed_tokenize_decode_info(server, st):
    r = _post(server, "/embed", {"inputs": TEXTS[1], "prompt_name": "query"})
    np.testing.assert_allclose(_floats(r.json()), st.encode([TEXTS[1]], prompt_name="query"), atol=1e-5)
    r = _post(
        server,
        "/embed",
        {"inputs": ["one two three four five"], "truncate": True, "truncation_direction": "left", "normalize": False},
    )
    assert r.status_code == 200  # within the context: nothing to cut
    text = "héllo world"
    (tokens,) = _post(server, "/tokenize", {"inputs": text, "prompt_name": "query"}).json()
    raw = (PROMPTS["query"] + text).encode()
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert tokens[1] == {"id": 23032, "text": "query", "special": False, "start": 0, "stop": 5}
    assert tokens[-1]["special"] and tokens[-1]["text"] == "[SEP]"
    assert tokens[-2]["text"] == "world" and tokens[-2]["start"] == len("query: héllo ".encode())  # byte offsets
    assert all(raw[t["start"] : t["stop"]].decode() == t["text"] for t in tokens[1:-1])
    assert _post(server, "/decode", {"ids": [[7592, 2088], [2088]]}).json() == ["hello world", "world"]
    # /embed_all (main's route) takes /embed's prompt_name and truncation too: one row per token embedded
    (rows,) = _post(server, "/embed_all", {"inputs": text, "prompt_name": "query"}).json()
    assert len(rows) == len(tokens)
    (cut,) = _post(server, "/embed_all", {"inputs": "a " * 400, "truncate": True}).json()
    assert len(cut) == 256
    info = requests.get(server.base_url + "/info", timeout=10).json()
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["max_input_length"] == 256
    empty = _post(server, "/embed", {"inputs": []})
    assert empty.status_code == 400 and empty.json() == {"error": "`inputs` cannot be empty", "error_type": "Empty"}
    wrong = _post(server, "/embed", {"inputs": 5})
    assert wrong.status_code == 422 and wrong.json()["error_type"] == "Validation"
    # an embedding model ranks TEI's /rerank body by cosine (TEI answers 424; test_similarity_e2e.py)
    ranked = _post(server, "/rerank", {"query": "a", "texts": ["b"]})
    assert ranked.status_code == 200 and [set(x) for x in ranked.json()] == [{"index", "score"}]


def test_huggingface_hub_inference_client(server, st, monkeypatch):
    import huggingface_hub.constants
    from huggingface_hub import InferenceClient

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the hub stays unreachable: loopback only

    client = InferenceClient(model=server.base_url)
    out = client.feature_extraction(TEXTS[0], prompt_name="passage", normalize=True)
    np.testing.assert_allclose(np.asarray(out).reshape(-1), st.encode([TEXTS[0]], prompt_name="passage")[0], atol=1e-5)


# ----- infinity -----
def test_infinity_routes_through_the_openai_client(server, st):
    client = openai.OpenAI(base_url=server.base_url, api_key="unused")  # infinity serves at the root
    out = client.embeddings.create(model="default/not-specified", input=TEXTS[:2])
    np.testing.assert_allclose(_floats([d.embedding for d in out.data]), st.encode(TEXTS[:2]), atol=1e-5)
    models = requests.get(server.base_url + "/models", timeout=10).json()
    assert models["data"][0]["id"] == NAME and models["data"][0]["capabilities"] == ["embed"]


def test_openapi_describes_every_route(server):
    spec = requests.get(server.base_url + "/openapi.json", timeout=10).json()
    want = {
        "/v1/embeddings": "post",
        "/v1/models": "get",
        "/v1/models/{model}": "get",
        "/embeddings": "post",
        "/models": "get",
        "/embed": "post",
        "/embed_all": "post",
        "/rerank": "post",
        "/predict": "post",
        "/tokenize": "post",
        "/decode": "post",
        "/info": "get",
        "/": "post",
        "/pooling": "post",
        "/detokenize": "post",
        "/v2/embed": "post",
        "/v1/embed": "post",
        "/ping": "get",
        "/v1/rerank": "post",
        "/v1/classify": "post",
        "/embed_sparse": "post",
        "/score": "post",
        "/v1/score": "post",
        "/similarity": "post",
    }
    for path, method in want.items():
        assert method in spec["paths"].get(path, {}), path
    assert "oneOf" in json.dumps(spec["paths"]["/tokenize"]["post"]["requestBody"])
    assert {"TokenizeRequest", "VllmTokenizeRequest", "SimpleToken"} <= set(spec["components"]["schemas"])


# ----- client libraries: the snippets of README's "Clients" section, as written there -----
def test_langchain_openai_snippet(server, st):
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model=NAME,
        base_url=server.base_url + "/v1",
        api_key="unused",
        check_embedding_ctx_length=False,  # send the texts, not tiktoken ids
    )
    vectors = embeddings.embed_documents(TEXTS)
    np.testing.assert_allclose(_floats(vectors), st.encode(TEXTS), atol=1e-5)
    np.testing.assert_allclose(_floats(embeddings.embed_query(TEXTS[0])), st.encode(TEXTS[:1])[0], atol=1e-5)


def test_llama_index_snippet(server, st):
    from llama_index.embeddings.openai_like import OpenAILikeEmbedding

    embed_model = OpenAILikeEmbedding(model_name=NAME, api_base=server.base_url + "/v1", api_key="unused")
    np.testing.assert_allclose(_floats(embed_model.get_text_embedding(TEXTS[0])), st.encode(TEXTS[:1])[0], atol=1e-5)


def test_litellm_snippet(server, st, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of litellm's price list at import
    import litellm

    response = litellm.embedding(
        model=f"openai/{NAME}", input=TEXTS[:2], api_base=server.base_url + "/v1", api_key="unused"
    )
    np.testing.assert_allclose(_floats([d["embedding"] for d in response.data]), st.encode(TEXTS[:2]), atol=1e-5)


def test_deeply_nested_bodies_on_hand_read_routes_are_4xx(server):
    for path in ("/", "/tokenize"):
        r = requests.post(server.base_url + path, data=b"[" * 5000, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (path, r.text)


@pytest.mark.parametrize("path", ["/", "/decode", "/rerank"])
def test_tei_hand_read_routes_refuse_bodies_that_are_not_objects_in_teis_shape(server, path):
    bad_json = requests.post(server.base_url + path, data=b"{nope", headers={"content-type": "application/json"})
    assert bad_json.status_code == 422, bad_json.text
    assert bad_json.json() == {"error": "The request body is not valid JSON.", "error_type": "Validation"}
    not_object = _post(server, path, [[101, 102]])
    assert not_object.status_code == 422, not_object.text
    assert not_object.json() == {"error": "The request body must be a JSON object.", "error_type": "Validation"}
