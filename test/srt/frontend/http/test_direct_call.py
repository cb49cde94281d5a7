"""The direct call of simple JSON routes and the route tried first (frontend/http/direct_call.py):
the app answers every request byte for byte as it does through FastAPI's own handler and route
order (statuses, headers, bodies, error messages, /openapi.json), the common request does skip
FastAPI's dependency machinery, and routes with anything more to them keep it."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Optional

import fastapi.routing
import orjson
import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from fastapi.testclient import TestClient
from pydantic import BaseModel

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http import http_server, json_body
from sglang.srt.frontend.http.direct_call import FirstRoute, direct_endpoint, put_first
from sglang.srt.frontend.http.json_body import LARGE_BODY_BYTES, JsonBodyRoute
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs
from test.helpers.model_info import make_model_info

RESULT = SimpleNamespace(
    payloads=[b"[0.5]"], prompt_tokens=[3], tokenize_time=0.001, queue_time=0.002, inference_time=0.003
)


class EchoServing:
    """Answers with the validated request it was handed, so a different model would show."""

    async def handle(self, request, rid):
        text = request.input if isinstance(request.input, str) else None
        if text == "boom":
            raise EmbeddingError(ErrorKind.INVALID_REQUEST, "boom refused", param="input")
        if text == "crash":
            raise RuntimeError("crash")
        return orjson.dumps(request.model_dump(mode="json")), RESULT


@pytest.fixture
def apps(monkeypatch):
    """(direct, fastapi): the app as built, and the same app with FastAPI's handler on every route
    and its routes in their plain order."""
    made, port_args = [], []

    def build():
        args = ServerArgs(allowed_hosts=["*"])  # TestClient says `Host: testserver`
        port_args.append(PortArgs.create())
        app = http_server.create_app(args, port_args[-1], make_model_info(model_path=args.model_path))
        app.state.embedding = app.state.classify = EchoServing()  # no lifespan: no engine
        made.append(TestClient(app, raise_server_exceptions=False))
        return app

    direct = build()
    with monkeypatch.context() as m:
        m.setattr(json_body, "direct_endpoint", lambda route: None)
        m.setattr(http_server, "put_first", lambda app, path: False)
        plain = build()
    assert isinstance(direct.routes[0], FirstRoute) and not isinstance(plain.routes[0], FirstRoute)
    yield made
    for p in port_args:
        p.cleanup()


JSON = "application/json"
LARGE = json.dumps({"input": [[7] * 100] * 1000}).encode()
CASES = [
    ("POST", "/v1/embeddings", JSON, b'{"input": "hello", "encoding_format": "base64", "model": "x"}'),
    ("POST", "/v1/embeddings", "application/json; charset=utf-8", b'{"input": ["a", "b"], "dimensions": 8}'),
    ("POST", "/v1/embeddings", "Application/JSON", b'{"input": [1, 2, 3]}'),
    ("POST", "/v1/embeddings", "application/vnd.api+json", b'{"input": "x"}'),
    ("POST", "/v1/embeddings", JSON, b'{"input": "x", "unknown_field": {"a": 1}}'),
    ("POST", "/v1/embeddings", JSON, b'{"input": 3}'),
    ("POST", "/v1/embeddings", JSON, b'{"input": "x", "dimensions": "8"}'),
    ("POST", "/v1/embeddings", JSON, b'{"input": "x", "encoding_format": 7}'),
    ("POST", "/v1/embeddings", JSON, b""),
    ("POST", "/v1/embeddings", JSON, b"null"),
    ("POST", "/v1/embeddings", JSON, b"[1, 2]"),
    ("POST", "/v1/embeddings", JSON, b'{"input": "x"'),
    ("POST", "/v1/embeddings", JSON, b'{"input": "\\ud800"}'),
    ("POST", "/v1/embeddings", JSON, b'{"input": "boom"}'),
    ("POST", "/v1/embeddings", JSON, b'{"input": "crash"}'),
    ("POST", "/v1/embeddings", None, b'{"input": "x"}'),
    ("POST", "/v1/embeddings", "text/plain", b'{"input": "x"}'),
    ("POST", "/v1/embeddings", JSON, LARGE),
    ("GET", "/v1/embeddings", None, b""),
    ("PUT", "/v1/embeddings", JSON, b'{"input": "x"}'),
    ("POST", "/v1/embeddings/", JSON, b'{"input": "x"}'),
    ("POST", "/invocations", JSON, b'{"input": "handed over"}'),
    ("POST", "/invocations", JSON, b'{"input": 3}'),
    ("POST", "/v1/classify", JSON, b'{"input": "to classify"}'),
    ("POST", "/v1/classify", JSON, b'{"input": {"a": 1}}'),
    ("GET", "/health", None, b""),
]


def _answer(client: TestClient, method: str, path: str, ctype: Optional[str], body: bytes):
    headers = {"x-request-id": "same-id"}
    if ctype is not None:
        headers["content-type"] = ctype
    r = client.request(method, path, content=body, headers=headers, follow_redirects=False)
    kept = sorted((k, v) for k, v in r.headers.items() if k != "x-total-time")  # a wall-clock time
    return r.status_code, kept, r.content


@pytest.mark.parametrize("method, path, ctype, body", CASES, ids=[f"{c[0]} {c[1]} {c[3][:30]!r}" for c in CASES])
def test_every_answer_is_the_one_fastapi_gives(apps, method, path, ctype, body):
    direct, plain = apps
    assert _answer(direct, method, path, ctype, body) == _answer(plain, method, path, ctype, body)


def test_the_common_request_skips_fastapis_dependency_machinery(apps, monkeypatch):
    calls = []
    real = fastapi.routing.solve_dependencies

    async def counting(*args, **kwargs):
        calls.append(kwargs["request"].url.path)
        return await real(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counting)
    direct, plain = apps
    ok = ("POST", "/v1/embeddings", JSON, b'{"input": "hello"}')
    for client in (direct, plain):
        assert _answer(client, *ok)[0] == 200
        assert _answer(client, "POST", "/v1/embeddings", JSON, LARGE)[0] == 200  # parsed off the loop
        assert _answer(client, "POST", "/invocations", JSON, b'{"input": "x"}')[0] == 200  # handed over
    assert calls == ["/v1/embeddings"] * 3  # all from the plain app (/invocations hands over to /v1/embeddings)
    calls.clear()
    # what stays with FastAPI: another JSON media type, an empty body
    assert _answer(direct, "POST", "/v1/embeddings", "application/x+json", b'{"input": "x"}')[0] == 200
    assert _answer(direct, "POST", "/v1/embeddings", JSON, b"")[0] == 400
    assert calls == ["/v1/embeddings", "/v1/embeddings"]
    assert len(LARGE) > LARGE_BODY_BYTES


def test_openapi_schema_is_unchanged(apps):
    direct, plain = apps
    assert direct.get("/openapi.json").content == plain.get("/openapi.json").content
    assert direct.app.url_path_for("embeddings") == "/v1/embeddings"


class Body(BaseModel):
    x: int


def _route(app: FastAPI, path: str):
    return next(r for r in app.routes if getattr(r, "path", None) == path and not isinstance(r, FirstRoute))


def test_only_routes_fastapi_would_just_hand_their_body_are_called_directly():
    app = FastAPI()
    app.router.route_class = JsonBodyRoute

    async def dep() -> int:
        return 1

    @app.post("/simple")
    async def simple(body: Body, raw: Request):
        return Response(b"ok")

    @app.post("/no-request")
    async def no_request(body: Body):
        return {"x": body.x}

    @app.post("/query")
    async def query(body: Body, q: int = 0):
        return Response(b"ok")

    @app.post("/dependency")
    async def dependency(body: Body, d: int = Depends(dep)):
        return Response(b"ok")

    @app.post("/model", response_model=Body)
    async def model(body: Body):
        return body

    @app.post("/status", status_code=201)
    async def status(body: Body):
        return {"x": 1}

    @app.post("/sync")
    def sync(body: Body):
        return Response(b"ok")

    @app.post("/response")
    async def response(body: Body, out: Response):
        return {"x": 1}

    @app.post("/two")
    async def two(a: Body, b: Body):
        return Response(b"ok")

    direct = {p for p in ("/simple", "/no-request") if direct_endpoint(_route(app, p))}
    assert direct == {"/simple", "/no-request"}
    for p in ("/query", "/dependency", "/model", "/status", "/sync", "/response", "/two"):
        assert direct_endpoint(_route(app, p)) is None, p
    # a value (not a Response) comes back as FastAPI renders it without a response model
    client = TestClient(app)
    r = client.post("/no-request", json={"x": 5})
    assert r.status_code == 200 and r.json() == {"x": 5} and r.headers["content-type"] == "application/json"


def test_a_route_included_with_a_routers_dependencies_keeps_them():
    from fastapi import APIRouter, HTTPException

    async def refuse() -> None:
        raise HTTPException(403, "refused by the router's dependency")

    router = APIRouter(route_class=JsonBodyRoute)

    @router.post("/inner")
    async def inner(body: Body, raw: Request):
        return Response(b"ok")

    app = FastAPI()
    app.include_router(router, dependencies=[Depends(refuse)])
    r = TestClient(app).post("/inner", json={"x": 1})
    assert r.status_code == 403, r.text
    assert direct_endpoint(_route(router, "/inner")) is not None  # the route itself is simple: the inclusion is not


def test_put_first_refuses_when_an_earlier_route_answers_the_same_request():
    app = FastAPI()

    @app.post("/{anything}")
    async def catch_all(anything: str):
        return {"route": "catch_all"}

    @app.post("/hot")
    async def hot():
        return {"route": "hot"}

    @app.get("/cold")
    async def cold():
        return {"route": "cold"}

    @app.post("/cold")
    async def cold_post():
        return {"route": "cold_post"}

    before = list(app.router.routes)
    assert not put_first(app, "/hot")  # /{anything} answers POST /hot first: moving /hot would change that
    assert not put_first(app, "/cold")  # two routes at the path
    assert not put_first(app, "/missing")
    assert app.router.routes == before
    assert TestClient(app).post("/hot").json() == {"route": "catch_all"}

    other = FastAPI()

    @other.get("/a")
    async def a():
        return {"route": "a"}

    @other.post("/hot")
    async def hot2():
        return {"route": "hot"}

    assert put_first(other, "/hot") and not put_first(other, "/hot")  # once
    assert isinstance(other.router.routes[0], FirstRoute)
    client = TestClient(other)
    assert client.post("/hot").json() == {"route": "hot"}
    r = client.get("/hot")  # a wrong method falls through to the routes in order: FastAPI's 405
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert client.get("/a").json() == {"route": "a"}
