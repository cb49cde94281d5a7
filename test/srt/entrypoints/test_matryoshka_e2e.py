"""A tiny Qwen3 served for real: --is-embedding, Matryoshka `dimensions`, context length, Engine.

Two servers and one Engine for the whole module: one Matryoshka model (list given on the command
line), one plain model found by its sentence-transformers files, and an Engine whose config.json
lists widths while the override says `is_matryoshka: true` (the list wins).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import requests

from test.helpers.parity import MIXED_TEXTS, hf_decoder_embeddings
from test.helpers.responses import response_vectors as _vectors
from test.helpers.server import ServerProcess
from test.helpers.tiny_models import build_tiny_qwen3

pytestmark = pytest.mark.slow
WIDTH = 48
LONG_TEXT = " ".join(["the cat and the dog by the river"] * 20)


# Qwen3-Embedding's config_sentence_transformers.json prompts (no space after "Query:").
QWEN3_PROMPTS = {
    "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
    "document": "",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    d = build_tiny_qwen3(str(tmp_path_factory.mktemp("qwen3")))
    with open(os.path.join(d, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": QWEN3_PROMPTS, "default_prompt_name": None}, f)
    return d


@pytest.fixture(scope="module")
def mrl_server(model_dir):
    # As SGLang's example, the list names a width above the model's (96 > 48; theirs 1536 > 1024).
    overrides = json.dumps({"matryoshka_dimensions": [8, 16, 32, 96]})
    with ServerProcess(
        "--model-path",
        model_dir,
        "--is-embedding",
        "--served-model-name",
        "tiny-qwen3",
        "--json-model-override-args",
        overrides,
        "--context-length",
        "160",
    ) as s:
        yield s


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory) -> str:
    from test.helpers.tiny_models import write_st_pooling

    d = build_tiny_qwen3(str(tmp_path_factory.mktemp("qwen3_st")), seed=5)
    write_st_pooling(d, WIDTH, mode="lasttoken")
    return d


@pytest.fixture(scope="module")
def plain_server(st_dir):
    # No --is-embedding: the sentence-transformers files declare the pooling.
    with ServerProcess("--model-path", st_dir, "--context-length", "8", "--allow-auto-truncate") as s:
        yield s


def _post(server, payload) -> requests.Response:
    return requests.post(server.base_url + "/v1/embeddings", json=payload, timeout=60)


def _shortened(full: np.ndarray, n: int) -> np.ndarray:
    head = full[:, :n]
    return head / np.linalg.norm(head, axis=1, keepdims=True)


def test_full_vectors_match_transformers(mrl_server, model_dir):
    ours = _vectors(_post(mrl_server, {"input": MIXED_TEXTS}))
    ref = hf_decoder_embeddings(model_dir, MIXED_TEXTS)
    assert ours.shape == (len(MIXED_TEXTS), WIDTH)
    err = np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert err.max() <= 1e-4


@pytest.mark.parametrize("fmt", ["float", "base64"])
def test_dimensions_cut_and_renormalize(mrl_server, fmt):
    full = _vectors(_post(mrl_server, {"input": MIXED_TEXTS}))
    short = _vectors(_post(mrl_server, {"input": MIXED_TEXTS, "dimensions": 16, "encoding_format": fmt}))
    assert short.shape == (len(MIXED_TEXTS), 16)
    assert np.abs(short - _shortened(full, 16)).max() <= 1e-6
    assert np.allclose(np.linalg.norm(short, axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    "dims, message",
    [
        (0, "dimensions must be at least 1, got 0."),
        (-4, "dimensions must be at least 1, got -4."),
        (49, "dimensions 49 is greater than the model's embedding size 48."),
        (
            12,
            "Model 'tiny-qwen3' only supports matryoshka dimensions [8, 16, 32, 96]; "
            "dimensions 12 would lead to poor results.",
        ),
    ],
)
def test_bad_dimensions_are_400(mrl_server, dims, message):
    r = _post(mrl_server, {"input": "the cat", "dimensions": dims})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": message,
        "type": "invalid_request_error",
        "param": "dimensions",
        "code": None,
    }


def test_sglang_matryoshka_example_shape(mrl_server):
    """SGLang's documented Matryoshka request (its width scaled to the tiny model), any `model` name."""
    payload = {"model": "Qwen/Qwen3-Embedding-0.6B", "input": "Explain diffusion models simply.", "dimensions": 16}
    response = _post(mrl_server, payload).json()
    assert len(response["data"][0]["embedding"]) == 16 and response["model"] == "tiny-qwen3"
    assert _post(mrl_server, {"input": "x", "dimensions": 48}).status_code == 200  # the full width
    assert _post(mrl_server, {"input": "x", "dimensions": 96}).status_code == 400  # listed, but too wide


def test_qwen3_query_instruction(mrl_server, model_dir):
    """prompt_name="query" prefixes Qwen3-Embedding's instruction, as sentence-transformers'
    encode(..., prompt_name="query") does: the same vector as the prefixed text, tokens counted."""
    from transformers import AutoTokenizer

    r = _post(mrl_server, {"input": MIXED_TEXTS[:3], "prompt_name": "query"})
    prefixed = [QWEN3_PROMPTS["query"] + t for t in MIXED_TEXTS[:3]]
    ref = hf_decoder_embeddings(model_dir, prefixed)
    assert np.abs(_vectors(r) - ref).max() <= 1e-4
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert r.json()["usage"]["prompt_tokens"] == sum(len(tok(t)["input_ids"]) for t in prefixed)
    typed = _post(mrl_server, {"input": MIXED_TEXTS[:3], "input_type": "search_query"})  # Cohere's spelling
    assert np.abs(_vectors(typed) - _vectors(r)).max() == 0
    documents = _vectors(_post(mrl_server, {"input": MIXED_TEXTS[:3], "prompt_name": "document"}))
    assert np.abs(documents - _vectors(_post(mrl_server, {"input": MIXED_TEXTS[:3]}))).max() == 0


def test_over_long_input_is_400(mrl_server, model_dir):
    from transformers import AutoTokenizer

    n = len(AutoTokenizer.from_pretrained(model_dir)(LONG_TEXT)["input_ids"])
    r = _post(mrl_server, {"input": LONG_TEXT})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        f"The input at index 0 ({n} tokens) is longer than the model's context length (160 tokens)."
    )


def test_model_info_reports_matryoshka(mrl_server):
    info = requests.get(mrl_server.base_url + "/model_info", timeout=10).json()
    assert info["is_matryoshka"] is True and info["matryoshka_dimensions"] == [8, 16, 32, 96]
    assert info["embedding_dim"] == WIDTH and info["max_input_length"] == 160
    assert info["architecture"] == "Qwen3ForCausalLM" and info["pooling"] == "lasttoken"


def test_non_matryoshka_model_rejects_dimensions(plain_server, st_dir):
    r = _post(plain_server, {"input": "the cat", "dimensions": 8})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        f"Model '{st_dir}' does not support matryoshka representation, "
        "changing output dimensions will lead to poor results."
    )


def test_auto_truncate_counts_the_tokens_used(plain_server, st_dir):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    r = _post(plain_server, {"input": LONG_TEXT})
    assert r.json()["usage"]["prompt_tokens"] == 8
    # The tokenizer keeps the end token when it cuts, so the last-token vector is still pooled at it.
    ids = AutoTokenizer.from_pretrained(st_dir)(LONG_TEXT, truncation=True, max_length=8)["input_ids"]
    model = AutoModel.from_pretrained(st_dir, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        ref = F.normalize(model(input_ids=torch.tensor([ids])).last_hidden_state[:, -1], dim=-1).numpy()
    assert np.abs(_vectors(r) - ref).max() <= 1e-5


def test_engine_dimensions(model_dir, tmp_path):
    import shutil

    import sglang
    from sglang.srt.errors import EmbeddingError, ErrorKind

    d = str(tmp_path / "mrl_config")
    shutil.copytree(model_dir, d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["matryoshka_dimensions"] = [8, 16]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)

    with sglang.Engine(
        model_path=d, is_embedding=True, served_model_name="tiny", json_model_override_args='{"is_matryoshka": true}'
    ) as engine:
        assert engine.get_model_info()["is_matryoshka"] is True
        full = np.asarray([o["embedding"] for o in engine.encode(MIXED_TEXTS)], dtype=np.float32)
        out = engine.encode(MIXED_TEXTS, dimensions=16)
        short = np.asarray([o["embedding"] for o in out], dtype=np.float32)
        assert short.shape == (len(MIXED_TEXTS), 16)
        assert np.abs(short - _shortened(full, 16)).max() <= 1e-6
        # input_type picks Qwen3's query instruction in the Engine too (frontend/input_types.py)
        queries = engine.encode(MIXED_TEXTS[:2], input_type="search_query")
        prefixed = engine.encode([QWEN3_PROMPTS["query"] + t for t in MIXED_TEXTS[:2]])
        assert [q["embedding"] for q in queries] == [p["embedding"] for p in prefixed]
        for dims, message in [
            # The config's list wins over is_matryoshka: true.
            (12, "Model 'tiny' only supports matryoshka dimensions [8, 16]; dimensions 12 would lead to poor results."),
            (0, "dimensions must be at least 1, got 0."),
            (49, "dimensions 49 is greater than the model's embedding size 48."),
        ]:
            with pytest.raises(EmbeddingError) as err:
                engine.encode("the cat", dimensions=dims)
            assert err.value.kind == ErrorKind.INVALID_REQUEST and err.value.message == message
