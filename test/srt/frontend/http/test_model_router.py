"""ModelRouter (frontend/http/model_router.py) over small member apps (test/helpers/member_apps.py),
driven as ASGI (no server): which model answers, the router's own answers, bodies, lists, health
and lifespan."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from sglang.srt.configs.served_models import ServedModel
from sglang.srt.frontend import sagemaker
from sglang.srt.frontend.http import json_body, model_router
from sglang.srt.frontend.http.http_server import create_app
from sglang.srt.frontend.http.model_router import ModelRouter
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs
from test.helpers.member_apps import KINDS, LIMIT, app_of, call, counted, openai_error, router
from test.helpers.model_info import make_model_info


@pytest.fixture
def four() -> ModelRouter:
    """A sparse model first (the fallback), a classifier, a cross-encoder, an embedder."""
    return router(("splade", "sparse"), ("clf", "classify"), ("ce", "rerank", ["ce-alias"]), ("emb", "embed", ["e1"]))


# ----- a model named -----


def test_the_body_model_picks_the_app_whatever_the_route(four):
    for name, owner in (("ce", "ce"), ("ce-alias", "ce"), ("emb", "emb"), ("e1", "emb"), ("splade", "splade")):
        a = call(four, body={"model": name, "input": "hi"})
        assert a.status == 200 and a.json()["app"] == owner, (name, a.body)
    a = call(four, path="/rerank", body={"model": "clf", "query": "q", "texts": ["t"]})
    assert a.json()["app"] == "clf"  # named: served by that model even where another fits the route better


def test_the_query_model_picks_the_app_and_the_body_model_wins(four):
    assert call(four, body={"input": "x"}, query="model=clf").json()["app"] == "clf"
    assert call(four, body={"input": "x"}, query="model=ce-alias&x=1").json()["app"] == "ce"
    assert call(four, body={"model": "emb"}, query="model=clf").json()["app"] == "emb"
    assert call(four, "GET", "/metrics", query="model=clf").json() == {"app": "clf"}
    assert call(four, "GET", "/metrics").json() == {"app": "splade"}
    assert call(four, "GET", "/v1/models/e1").json() == {"id": "e1", "app": "emb"}


@pytest.mark.parametrize("model", [None, "", 7, ["emb"]])
def test_a_model_that_names_nothing_routes_by_capability(four, model):
    a = call(four, path="/rerank", body={"model": model, "query": "q", "texts": ["t"]})
    assert a.status == 200 and a.json()["app"] == "ce"


# ----- no model named: the first model able to answer the route -----


@pytest.mark.parametrize(
    "path,body,owner",
    [
        ("/v1/embeddings", {"input": "x"}, "emb"),
        ("/embed", {"inputs": "x"}, "emb"),
        ("/v2/embed", {"texts": ["x"]}, "emb"),
        ("/rerank", {"query": "q", "texts": ["a"]}, "ce"),
        ("/v1/rerank", {"query": "q", "documents": ["a"]}, "ce"),
        ("/score", {"text_1": "q", "text_2": "a"}, "ce"),
        ("/predict", {"inputs": "x"}, "clf"),
        ("/v1/classify", {"input": "x"}, "clf"),
        ("/embed_sparse", {"inputs": "x"}, "splade"),
        ("/embed_all", {"inputs": "x"}, "splade"),  # the first with token_embed (the sparse model has it)
        ("/detokenize", {"tokens": [1]}, "splade"),  # a route every model answers: the first model
    ],
)
def test_a_route_goes_to_the_first_model_that_can_answer_it(four, path, body, owner):
    a = call(four, path=path, body=body)
    assert a.status == 200 and a.json()["app"] == owner and a.json()["path"] == path


def test_ranking_prefers_a_cross_encoder_then_multi_vector_then_an_embedder():
    ranked = router(("clf", "classify"), ("emb", "embed"), ("colbert", "colbert"))
    assert call(ranked, path="/rerank", body={"query": "q", "texts": ["a"]}).json()["app"] == "colbert"
    plain = router(("clf", "classify"), ("emb", "embed"))
    assert call(plain, path="/v1/rerank", body={"query": "q", "documents": ["a"]}).json()["app"] == "emb"
    embedders = router(("one", "embed"), ("two", "embed"))
    assert call(embedders, path="/predict", body={"inputs": "x"}).json()["app"] == "one"  # nobody classifies


@pytest.mark.parametrize(
    "body,headers,owner,path",
    [
        ({"query": "q", "texts": ["a"]}, {}, "ce", "/rerank"),
        ({"query": "q", "documents": ["a"]}, {}, "ce", "/v1/rerank"),
        ({"input": "x"}, {}, "emb", "/v1/embeddings"),
        ({"inputs": "x"}, {"x-amzn-sagemaker-custom-attributes": "route=/predict"}, "clf", "/predict"),
        ({"input": "x", "model": "ce"}, {}, "ce", "/v1/embeddings"),
        ({"inputs": "x"}, {}, "splade", "/"),  # TEI's root fits any model: the first one's
    ],
)
def test_invocations_go_where_the_body_or_the_header_points(four, body, headers, owner, path):
    a = call(four, path="/invocations", body=body, headers=headers)
    assert a.status == 200, a.body
    assert (a.json()["app"], a.json()["path"], a.json()["parsed"]) == (owner, path, body)


# ----- a name no model serves -----


def test_an_unknown_model_is_an_openai_404_naming_the_served_models(four):
    a = call(four, body={"model": "gpt-4", "input": "x"})
    assert a.status == 404
    err = openai_error(a)
    assert (err["code"], err["param"], err["type"]) == ("model_not_found", "model", "invalid_request_error")
    assert err["message"] == ("The model `gpt-4` does not exist. This server serves `splade`, `clf`, `ce`, `emb`.")
    assert counted(four, "splade", "/v1/embeddings", 404) == 1  # counted with the first model's requests
    a = call(four, "GET", "/metrics", query="model=gpt-4")
    assert a.status == 404 and openai_error(a)["code"] == "model_not_found"
    assert counted(four, "splade", "unmatched", 404) == 1


def test_an_unknown_model_on_cohere_paths_answers_in_cohere_shape():
    cohere_first = router(("emb", "embed", [], True), ("ce", "rerank"))
    for path in ("/v2/embed", "/v1/embed"):
        a = call(cohere_first, path=path, body={"model": "nope", "texts": ["x"]})
        assert a.status == 404 and set(a.json()) == {"message"}, a.body
        assert "`nope` does not exist" in a.json()["message"]
    assert openai_error(call(cohere_first, body={"model": "nope"}))["code"] == "model_not_found"


# ----- bodies the router does not read a model from -----


def test_a_body_that_is_not_json_reaches_the_routes_app_untouched(four):
    a = call(four, body=b'{"model": "ce"}', headers={"content-type": "text/plain"})
    assert a.status == 415 and "Unsupported media type" in openai_error(a)["message"]
    assert counted(four, "emb", "/v1/embeddings", 415) == 1  # by the route: an embedder's app answered
    a = call(four, body=b'{"model": "ce"}', headers={"content-type": None})
    assert a.status == 415 and counted(four, "emb", "/v1/embeddings", 415) == 2


def test_invalid_json_is_handed_on_as_sent(four):
    for raw in (b'{"model": "ce", ', b"[" * 2000 + b"]" * 2000, '{"input": "é"}'.encode("utf-16")):
        a = call(four, path="/rerank", body=raw)
        assert a.status == 200 and a.json()["app"] == "ce" and a.json()["parsed"] is None
        assert a.json()["body"] == raw.decode("latin-1")
    a = call(four, body=b"{oops", query="model=clf")  # ?model= still names the model
    assert (a.json()["app"], a.json()["body"]) == ("clf", "{oops")


def test_an_over_limit_body_gets_the_members_413(four):
    big = json.dumps({"model": "ce", "input": "x" * LIMIT}).encode()
    for chunks in ([big], [big[:1000], big[1000:3000], big[3000:]]):
        a = call(four, chunks=chunks, headers={"content-length": None})
        assert a.status == 413 and "--max-payload-bytes" in openai_error(a)["message"]
        assert a.headers["connection"] == "close"
    assert counted(four, "emb", "/v1/embeddings", 413) == 2  # not read for its model: the route's app
    at_limit = json.dumps({"model": "ce", "input": "y" * (LIMIT - 40)}).encode().ljust(LIMIT)
    assert call(four, body=at_limit).json()["app"] == "ce"


def test_a_declared_over_limit_body_is_refused_unread(four):
    chunks = [b"x" * 1000] * 8
    a = call(four, chunks=chunks, headers={"content-length": "8000", "expect": "100-continue"})
    assert a.status == 413 and a.unread == 8  # the client waiting on 100-continue sends nothing


def test_a_body_without_the_api_key_is_refused_unread(monkeypatch):
    parsed = []
    monkeypatch.setattr(model_router, "loads", lambda body: parsed.append(body) or json_body.loads(body))
    keyed = router(("a", "embed"), ("b", "rerank"), api_key="s3cret")
    for auth in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic s3cret"}):
        a = call(keyed, path="/rerank", chunks=[b'{"model": "a", ', b'"query": "q"}'], headers=auth)
        assert a.status == 401 and openai_error(a)["code"] == "invalid_api_key" and a.unread == 2
    assert parsed == [] and app_of(keyed, "b").state.metrics.requests.get(route="/rerank", status="401") == 3
    a = call(keyed, path="/rerank", body={"model": "a", "query": "q"}, headers={"authorization": "Bearer s3cret"})
    assert a.status == 200 and a.json()["app"] == "a" and len(parsed) == 1


def test_a_slow_body_is_a_408_that_closes_the_connection(four):
    a = call(four, chunks=[b'{"model": "ce", "in'], then="stall")
    assert a.status == 408 and a.headers["connection"] == "close"
    err = openai_error(a)
    assert err["code"] == "request_timeout" and "--body-timeout" in err["message"]
    assert counted(four, "splade", "/v1/embeddings", 408) == 1
    cohere_first = router(("emb", "embed", [], True), ("ce", "rerank"))
    a = call(cohere_first, path="/v2/embed", chunks=[b"{"], then="stall")
    assert a.status == 408 and set(a.json()) == {"message"}


def test_a_client_leaving_mid_body_gets_no_answer(four):
    a = call(four, path="/rerank", chunks=[b'{"model": "emb", ', b'"query": '], then="leave")
    assert a.status is None
    assert counted(four, "ce", "/rerank", 499) == 1  # the route's app saw the client leave


# ----- the parsed body handed over -----


def test_the_chosen_route_gets_the_body_parsed_once(four, monkeypatch):
    def parse_again(*_):
        raise AssertionError("the body was parsed twice")

    monkeypatch.setattr(json_body, "parse_body", parse_again)
    monkeypatch.setattr(sagemaker, "parse_body", parse_again)
    a = call(four, path="/tokenize", body={"model": "ce-alias", "prompt": "hello"})
    assert a.status == 200 and a.json() == {"app": "ce", "prompt": "hello", "model": "ce-alias"}
    a = call(four, path="/invocations", body={"model": "clf", "input": "x"})
    assert a.status == 200 and a.json()["app"] == "clf" and a.json()["parsed"] == {"model": "clf", "input": "x"}


def test_a_large_body_is_parsed_off_the_event_loop_and_handed_over(monkeypatch):
    threads = []

    def spy(body: bytes):
        threads.append(threading.current_thread() is threading.main_thread())
        return json_body.loads(body)

    monkeypatch.setattr(model_router, "loads", spy)
    big = router(("a", "embed"), ("b", "embed"), max_payload_bytes=2 << 20)
    body = {"model": "b", "input": ["word " * 60] * 1000}
    assert len(json.dumps(body)) > json_body.LARGE_BODY_BYTES
    a = call(big, body=body)
    assert a.status == 200 and a.json()["app"] == "b" and a.json()["parsed"] == body
    assert call(big, body={"model": "a"}).json()["app"] == "a"
    assert threads == [False, True]  # the large one in a worker thread, the small one on the loop


# ----- the model list -----


def test_model_lists_are_merged_in_model_order(four):
    for path in ("/v1/models", "/models"):
        a = call(four, "GET", path)
        assert a.status == 200 and a.headers["content-type"] == "application/json"
        listing = a.json()
        assert listing["object"] == "list"
        ids = [(card["id"], card["capabilities"]) for card in listing["data"]]
        assert ids == [
            ("splade", ["sparse", "token_embed"]),
            ("clf", ["classify"]),
            ("ce", ["classify", "rerank"]),
            ("ce-alias", ["classify", "rerank"]),
            ("emb", ["embed", "token_embed"]),
            ("e1", ["embed", "token_embed"]),
        ]


def test_a_refused_model_list_is_passed_on_as_the_member_said_it():
    keyed = router(("a", "embed"), ("b", "rerank"), api_key="s3cret")
    a = call(keyed, "GET", "/v1/models")
    assert a.status == 401 and a.headers["www-authenticate"] == "Bearer" and "x-request-id" in a.headers
    assert openai_error(a)["code"] == "invalid_api_key"
    assert int(a.headers["content-length"]) == len(a.body)
    a = call(keyed, "GET", "/models", headers={"authorization": "Bearer s3cret"})
    assert a.status == 200 and [c["id"] for c in a.json()["data"]] == ["a", "b"]
    assert call(keyed, "GET", "/health").status == 200  # open without the key, as on one model


# ----- health -----


def test_health_reports_every_model(four):
    for path in ("/health", "/ping"):
        a = call(four, "GET", path)
        assert a.status == 200
        assert a.json() == {"status": "ok", "models": {n: {"status": "ok"} for n in ("splade", "clf", "ce", "emb")}}
    app_of(four, "ce").state.lifecycle.dead_reason = "scheduler exited (signal 9)"
    a = call(four, "GET", "/health")
    assert a.status == 200 and a.json()["status"] == "degraded"
    assert a.json()["models"]["ce"] == {
        "status": "unavailable",
        "reason": "The embedding engine is unavailable: scheduler exited (signal 9)",
    }
    assert a.json()["models"]["emb"] == {"status": "ok"}
    for app in four.apps:
        app.state.lifecycle.dead_reason = "gone"
    a = call(four, "GET", "/ping")
    assert a.status == 503 and a.json()["status"] == "unavailable"
    assert {s["status"] for s in a.json()["models"].values()} == {"unavailable"}


def test_head_health_has_no_body(four):
    get = call(four, "GET", "/health")
    head = call(four, "HEAD", "/health")
    assert head.status == 200 and head.body == b""
    assert head.headers["content-length"] == str(len(get.body))


@pytest.mark.parametrize(
    "method,path,kwargs",
    [
        ("GET", "/health", {}),
        ("HEAD", "/ping", {}),
        ("GET", "/v1/models", {}),
        ("POST", "/v1/embeddings", {"body": {"model": "nope"}}),
        ("GET", "/metrics", {"query": "model=nope"}),
        ("POST", "/v1/embeddings", {"chunks": [b"{"], "then": "stall"}),
    ],
)
def test_the_routers_own_answers_carry_the_request_id(four, method, path, kwargs):
    """As every answer of a one-model server does: the client's id when sane, else a new one."""
    sane = call(four, method, path, headers={"x-request-id": "trace-42"}, **kwargs)
    assert sane.headers["x-request-id"] == "trace-42"
    for given in ({}, {"x-request-id": "has spaces"}):
        fresh = call(four, method, path, headers=given, **kwargs).headers["x-request-id"]
        assert len(fresh) == 32 and int(fresh, 16) >= 0


# ----- lifespan -----


def lifespan_run(app) -> list[dict]:
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
    return sent


def test_lifespan_starts_and_stops_every_model():
    events: list = []
    ready: list = []
    both = router(("a", "embed"), ("b", "rerank"), events=events, on_ready=lambda: ready.append(list(events)))
    sent = lifespan_run(both)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert ready == [[("start", "a"), ("start", "b")]]  # ready once every model started
    assert events == [("start", "a"), ("start", "b"), ("stop", "b"), ("stop", "a")]


def test_a_failing_startup_is_reported_and_the_started_models_stop():
    events: list = []
    ready: list = []
    broken = router(("a", "embed"), ("broken", "rerank"), events=events, on_ready=lambda: ready.append(1))
    sent = lifespan_run(broken)
    assert sent == [{"type": "lifespan.startup.failed", "message": "RuntimeError: no weights"}]
    assert events == [("start", "a"), ("stop", "a")] and ready == []


def test_a_failing_shutdown_is_reported_after_every_model_stopped():
    events: list = []
    shaky = router(("a", "embed"), ("fragile", "rerank"), ("c", "embed"), events=events)
    sent = lifespan_run(shaky)
    assert sent == [
        {"type": "lifespan.startup.complete"},
        {"type": "lifespan.shutdown.failed", "message": "OSError: socket already closed"},
    ]
    assert events[3:] == [("stop", "c"), ("stop", "fragile"), ("stop", "a")]


# ----- the real per-model apps -----


@pytest.fixture
def real_router():
    """A router over two apps as a server builds them (http_server.create_app), not started."""
    made = []
    apps, models = [], []
    for name, kind in (("minilm", "embed"), ("ce", "rerank")):
        args = ServerArgs(model_path=f"/models/{name}", served_model_name=name, allowed_hosts=["*"])
        info = make_model_info(model_path=args.model_path, served_model_name=name, **KINDS[kind])
        made.append(PortArgs.create())
        apps.append(create_app(args, made[-1], info))
        models.append(ServedModel(args, made[-1], info))
    yield ModelRouter(apps, models, models[0].args.max_payload_bytes, models[0].args.body_timeout)
    for port_args in made:
        port_args.cleanup()


def test_the_real_apps_list_report_and_refuse_through_the_router(real_router):
    cards = call(real_router, "GET", "/v1/models").json()["data"]
    assert [(c["id"], c["capabilities"]) for c in cards] == [
        ("minilm", ["embed", "token_embed"]),
        ("ce", ["classify", "rerank"]),
    ]
    a = call(real_router, "GET", "/health")  # no engine started yet: both report why
    assert a.status == 503
    reason = {"status": "unavailable", "reason": "The embedding engine is not ready."}
    assert a.json() == {"status": "unavailable", "models": {"minilm": reason, "ce": reason}}
    a = call(real_router, path="/v2/embed", body={"model": "nope", "texts": ["x"], "input_type": "search_query"})
    assert a.status == 404 and a.json() == {
        "message": "The model `nope` does not exist. This server serves `minilm`, `ce`."
    }
