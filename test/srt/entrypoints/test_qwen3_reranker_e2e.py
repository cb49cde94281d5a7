"""A Qwen3-Reranker server (tiny random checkpoint, detected from its name, no flags) ranks
documents on /v1/rerank in the order of the model card's transformers recipe, with its default
instruction and with one per request (`instruction`, or SGLang's `instruct`)."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from sglang.srt.frontend.openai.task_protocol import RerankResponse
from test.helpers.server import ServerProcess
from test.helpers.tiny_reranker import CARD_PREFIX, DOCUMENTS, QUERY, build_tiny_qwen3_reranker, card_scores

pytestmark = pytest.mark.slow

INSTRUCTION = "Given a question about places, find the passage that names them"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = build_tiny_qwen3_reranker(str(tmp_path_factory.mktemp("rr") / "Qwen3-Reranker-tiny"), seed=5)
    with ServerProcess("--model-path", d, "--served-model-name", "qwen3-rr", "--cpu-threads", "1") as s:
        s.model_dir = d
        yield s


def _rerank(server, **payload) -> requests.Response:
    return requests.post(
        server.base_url + "/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS, **payload}, timeout=60
    )


def _check_against(body: dict, ref: np.ndarray) -> None:
    assert [x["index"] for x in body["results"]] == np.argsort(-ref, kind="stable").tolist()
    scores = np.array([x["relevance_score"] for x in sorted(body["results"], key=lambda x: x["index"])])
    assert np.max(np.abs(scores - ref) / ref) <= 1e-4


def test_rerank_follows_the_model_card(server):
    r = _rerank(server, model="qwen3-rr")
    assert r.status_code == 200, r.text
    body = r.json()
    RerankResponse.model_validate(body)
    _check_against(body, card_scores(server.model_dir, QUERY, DOCUMENTS))
    assert body["results"][0]["document"]["text"] == DOCUMENTS[body["results"][0]["index"]]
    assert body["usage"]["prompt_tokens"] > 60 * len(DOCUMENTS)  # the prompt is counted: ~70 tokens a pair
    info = requests.get(server.base_url + "/model_info", timeout=10).json()
    assert info["rerank_prompt"] == "qwen3-reranker" and info["labels"] == ["yes"]


def test_tei_rerank_route_gets_the_prompt_too(server):
    r = requests.post(server.base_url + "/rerank", json={"query": QUERY, "texts": DOCUMENTS}, timeout=60)
    assert r.status_code == 200, r.text
    ref = card_scores(server.model_dir, QUERY, DOCUMENTS)
    assert [x["index"] for x in r.json()] == np.argsort(-ref, kind="stable").tolist()
    scores = np.array([x["score"] for x in sorted(r.json(), key=lambda x: x["index"])])
    assert np.max(np.abs(scores - ref) / ref) <= 1e-4


def test_per_request_instruction(server):
    ref = card_scores(server.model_dir, QUERY, DOCUMENTS, INSTRUCTION)
    for field in ("instruction", "instruct"):
        r = _rerank(server, **{field: INSTRUCTION, "top_n": 5})
        assert r.status_code == 200, r.text
        _check_against(r.json(), ref)


@pytest.mark.parametrize(
    "payload",
    [{"instruction": ""}, {"instruction": 3}, {"query": CARD_PREFIX + "<Query>: x\n", "instruction": "find"}],
)
def test_bad_instructions(server, payload):
    r = _rerank(server, **payload)
    assert r.status_code == 400 and r.json()["error"]["param"] == "instruction", r.text
