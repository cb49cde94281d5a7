"""SageMaker's /invocations and /ping, and Cohere's error shape on the middlewares' answers, on the
real app without an engine: which route each body shape reaches (seen through that route's own
validation error and its error shape), one parse per body, the explicit route header, and /ping
answering like /health (503 here: no engine)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.http import json_body
from sglang.srt.frontend.http.http_server import create_app
from sglang.srt.frontend.sagemaker import TARGETS, pick_route, requested_route
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs
from test.helpers.model_info import make_model_info

KEY = {"authorization": "Bearer k"}


@pytest.fixture
def client():
    args = ServerArgs(allowed_hosts=["*"], api_key="k")  # TestClient says `Host: testserver`
    port_args = PortArgs.create()
    app = create_app(args, port_args, make_model_info(model_path=args.model_path))
    yield TestClient(app, raise_server_exceptions=False)  # no lifespan: no engine, /ping is 503
    port_args.cleanup()


@pytest.mark.parametrize(
    "body, path",
    [
        ({"input": "x"}, "/v1/embeddings"),
        ({"messages": [], "model": "m"}, "/v1/embeddings"),
        ({"query": "q", "documents": ["d"]}, "/v1/rerank"),
        ({"query": "q", "texts": ["d"]}, "/rerank"),
        ({"queries": "q", "documents": ["d"]}, "/score"),
        ({"queries": "q", "items": ["d"]}, "/score"),
        ({"text_1": "a", "text_2": "b"}, "/score"),
        ({"data_1": "a", "data_2": "b"}, "/score"),
        ({"inputs": [{"content": [{"type": "text", "text": "a"}]}]}, "/v2/embed"),
        ({"inputs": ["a"]}, "/"),
        ({"inputs": "a"}, "/"),
        ({"texts": ["a"], "input_type": "search_query"}, "/v1/embed"),
        ({"images": ["data:image/png;base64,AAAA"]}, "/v1/embed"),
    ],
)
def test_the_body_keys_pick_the_route(body, path):
    assert pick_route(body, None, set(TARGETS)) == path


def test_a_missing_route_and_unknown_shapes_are_400s():
    with pytest.raises(EmbeddingError, match="found none it knows") as e:
        pick_route({"text_1": "a", "text_2": "b"}, None, set(TARGETS) - {"/score"})
    assert "/score" not in e.value.message  # only routes this server has are offered
    with pytest.raises(EmbeddingError, match="must be a JSON object"):
        pick_route([1, 2], None, set(TARGETS))
    with pytest.raises(EmbeddingError, match="not an inference route"):
        pick_route({"input": "x"}, "/health", set(TARGETS))
    assert pick_route({"input": "x"}, "/v1/classify", set(TARGETS)) == "/v1/classify"


def test_the_route_header():
    header = b"x-amzn-sagemaker-custom-attributes"
    assert requested_route([(header, b"trace=1; route=/v2/embed")]) == "/v2/embed"
    assert requested_route([(b"X-Amzn-SageMaker-Custom-Attributes", b"a=b,route = /v1/rerank")]) == "/v1/rerank"
    assert requested_route([(header, b"trace=1")]) is None and requested_route([]) is None


def test_each_body_gets_its_route_answer_and_error_shape(client):
    cases = [  # a body the route refuses shows which route took it: its message and its shape
        ({"input": 3}, 400, lambda j: j["error"]["message"].startswith("'input' must be a string")),
        ({"messages": 3}, 400, lambda j: j["error"]["param"] == "messages"),
        ({"query": "q", "documents": 3}, 400, lambda j: j["error"]["param"] == "documents"),
        ({"inputs": 3}, 422, lambda j: j["error_type"] == "Validation" and "embed request" in j["error"]),
        ({"texts": 5}, 400, lambda j: set(j) == {"message"} and "texts" in j["message"]),
        ({"inputs": [{"content": 3}]}, 400, lambda j: set(j) == {"message"} and "content" in j["message"]),
        ({"nothing": 1}, 400, lambda j: "`input` or `messages` (/v1/embeddings)" in j["error"]["message"]),
    ]
    for body, status, check in cases:
        r = client.post("/invocations", json=body, headers=KEY)
        assert r.status_code == status and check(r.json()), (body, r.text)
    r = client.post("/invocations", content=b"{oops", headers={**KEY, "content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    named = {**KEY, "X-Amzn-SageMaker-Custom-Attributes": "route=/embed_sparse"}
    r = client.post("/invocations", json={"inputs": [1]}, headers=named)  # TEI's sparse route's own refusal
    assert r.status_code == 422 and "'inputs' must be a string or a list of strings." in r.json()["error"]


def test_the_body_is_parsed_once(client, monkeypatch):
    parsed = []
    real = json_body.loads
    monkeypatch.setattr(json_body, "loads", lambda body: parsed.append(body) or real(body))
    for body in ({"input": 3}, {"inputs": 3}, {"texts": 5}):  # typed routes, and TEI's hand-read POST /
        parsed.clear()
        client.post("/invocations", json=body, headers=KEY)
        assert len(parsed) == 1, body


def test_middlewares_run_for_invocations_and_ping_is_open_like_health(client):
    assert client.post("/invocations", json={"input": "x"}).status_code == 401
    assert client.post("/invocations", content=b"{}", headers=KEY).status_code == 415
    ping = client.get("/ping")  # no key: SageMaker's probe sends none
    assert ping.status_code == 503 and "not ready" in ping.json()["error"]["message"]
    assert client.get("/health").status_code == 503
    assert client.get("/invocations", headers=KEY).headers["allow"] == "POST"


def test_cohere_routes_answer_the_middlewares_errors_in_cohere_shape(client):
    for path in ("/v1/embed", "/v2/embed"):
        r = client.post(path, json={"texts": ["a"]})
        assert r.status_code == 401 and r.json() == {
            "message": "Invalid or missing API key: send `Authorization: Bearer <key>`."
        }
        assert r.headers["www-authenticate"] == "Bearer" and int(r.headers["content-length"]) == len(r.content)
        r = client.post(path, content=b"{}", headers=KEY)
        assert r.status_code == 415 and set(r.json()) == {"message"}
        r = client.get(path, headers=KEY)
        assert r.status_code == 405 and set(r.json()) == {"message"}
        r = client.post(path, json={"texts": ["a"], "truncate": 3}, headers=KEY)
        assert r.status_code == 400 and set(r.json()) == {"message"} and "truncate" in r.json()["message"]
    r = client.post("/v1/embeddings", json={"input": "a"})
    assert r.status_code == 401 and "error" in r.json()  # other routes keep OpenAI's shape
