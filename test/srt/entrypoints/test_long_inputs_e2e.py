"""Long inputs by chunked processing (#30 item 2) on the bundled all-MiniLM-L6-v2 (context 256).

The server is started with vLLM's --pooler-config as vLLM users write it, and a per-batch budget of
two chunks (--max-num-tokens 512), so a three-chunk input runs over two batches. References are
computed here with transformers on the same chunk token ids: each chunk's mean-pooled hidden
states (sentence-transformers' Pooling), their mean weighted by chunk length, then L2-normalized.
"""

from __future__ import annotations

import numpy as np
import pytest
import requests
import torch

from sglang.srt.server_args import ServerArgs
from test.helpers.responses import response_vectors
from test.helpers.server import ServerProcess

pytestmark = pytest.mark.slow

POOLER_CONFIG = '{"pooling_type": "MEAN", "normalize": true, "enable_chunked_processing": true, "max_embed_len": 2000}'
LONG = " ".join(f"river{i % 37} stone{i % 11}" for i in range(175))  # about 700 tokens
SHORT = "The cat sat by the river."
CONTEXT = 256


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--pooler-config", POOLER_CONFIG, "--max-num-tokens", "512") as s:
        yield s


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoModel, AutoTokenizer

    path = ServerArgs().model_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()

    def mean_pooled(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        return hidden.mean(0).numpy().astype(np.float64)

    return tokenizer, mean_pooled


def _chunks(ids: list[int]) -> list[list[int]]:
    """[CLS] body [SEP] -> [CLS] piece [SEP] pieces of at most CONTEXT tokens (written out here, not
    taken from the server's code)."""
    cls, body, sep = ids[:1], ids[1:-1], ids[-1:]
    room = CONTEXT - 2
    return [cls + body[i : i + room] + sep for i in range(0, len(body), room)]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_long_input_is_the_weighted_mean_of_its_chunks(server, reference):
    tokenizer, mean_pooled = reference
    ids = tokenizer(LONG)["input_ids"]
    assert 600 < len(ids) < 800
    chunks = _chunks(ids)
    assert len(chunks) == 3
    weights = np.array([len(c) for c in chunks], dtype=np.float64)
    rows = np.stack([mean_pooled(c) for c in chunks])
    expect_long = _unit((rows * weights[:, None]).sum(0) / weights.sum())
    expect_short = _unit(mean_pooled(tokenizer(SHORT)["input_ids"]))

    r = requests.post(f"{server.base_url}/v1/embeddings", json={"input": [SHORT, LONG, SHORT]}, timeout=120)
    got = response_vectors(r)
    np.testing.assert_allclose(got[1], expect_long, atol=1e-4)
    np.testing.assert_allclose(got[0], expect_short, atol=1e-4)  # an input that fits: as without chunking
    np.testing.assert_array_equal(got[0], got[2])
    short_tokens = len(tokenizer(SHORT)["input_ids"])
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] == int(weights.sum()) + 2 * short_tokens  # every chunk's tokens
    assert usage["total_tokens"] == usage["prompt_tokens"]

    # alone and as base64: the same vector; with `normalize: false`, the raw weighted mean
    r = requests.post(
        f"{server.base_url}/v1/embeddings", json={"input": LONG, "encoding_format": "base64"}, timeout=120
    )
    np.testing.assert_allclose(response_vectors(r)[0], expect_long, atol=1e-4)
    r = requests.post(f"{server.base_url}/v1/embeddings", json={"input": LONG, "normalize": False}, timeout=120)
    raw = (rows * weights[:, None]).sum(0) / weights.sum()
    np.testing.assert_allclose(response_vectors(r)[0], raw, atol=1e-4)


def test_long_token_id_input_is_chunked_too(server, reference):
    tokenizer, mean_pooled = reference
    ids = tokenizer(LONG)["input_ids"]
    chunks = _chunks(ids)
    weights = np.array([len(c) for c in chunks], dtype=np.float64)
    rows = np.stack([mean_pooled(c) for c in chunks])
    r = requests.post(f"{server.base_url}/v1/embeddings", json={"input": [ids]}, timeout=120)
    np.testing.assert_allclose(
        response_vectors(r)[0], _unit((rows * weights[:, None]).sum(0) / weights.sum()), atol=1e-4
    )


def test_over_max_embed_len_is_400(server):
    r = requests.post(f"{server.base_url}/v1/embeddings", json={"input": ["ok", "word " * 2100]}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "input"
    assert (
        "at index 1 (2102 tokens)" in err["message"] and "maximum embedding input length (2000 tokens" in err["message"]
    )


def test_many_long_inputs_at_once_all_come_back(server):
    texts = [f"{LONG} variant {i}" for i in range(6)]
    r = requests.post(f"{server.base_url}/v1/embeddings", json={"input": texts}, timeout=300)
    got = response_vectors(r)
    assert got.shape == (6, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert len({v.tobytes() for v in got}) == 6


def test_two_replicas_give_the_same_vectors(server):
    """--dp-size 2: a long input's chunks travel as one input, so they meet on one replica; the
    inputs of one request are spread over both, and each comes back as the one replica answers it."""
    texts = [f"{LONG} variant {i}" for i in range(4)] + [SHORT]
    one = response_vectors(requests.post(f"{server.base_url}/v1/embeddings", json={"input": texts}, timeout=300))
    with ServerProcess("--max-embed-len", "2000", "--dp-size", "2", "--cpu-threads", "1") as dp:
        r = requests.post(f"{dp.base_url}/v1/embeddings", json={"input": texts}, timeout=300)
        np.testing.assert_allclose(response_vectors(r), one, atol=1e-5)
