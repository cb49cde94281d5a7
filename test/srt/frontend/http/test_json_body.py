"""Request bodies through the app's route class: orjson, strict UTF-8, validation in one place, and
large bodies parsed off the event loop; plus what /v1/models and /model_info reveal."""

from __future__ import annotations

import json
import threading

import pytest
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient

from sglang.srt.frontend.http import json_body
from sglang.srt.frontend.http.http_server import create_app, hide_paths
from sglang.srt.frontend.openai.protocol import EmbeddingRequest, input_shape
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs
from test.helpers.model_info import make_model_info


class _Field:
    """A stand-in for FastAPI's body field: validates an EmbeddingRequest like FastAPI would."""

    def validate(self, value, values, loc):
        try:
            return EmbeddingRequest.model_validate(value), []
        except Exception as e:
            return None, [{"loc": (*loc, "input"), "type": "value_error", "msg": str(e)}]


@pytest.mark.parametrize(
    "body,detail",
    [
        ('{"input": "x"}'.encode("utf-16"), "invalid UTF-8"),
        (b'{"input": "\xff"}', "invalid UTF-8"),
        (b'{"input": "\\ud800"}', "surrogate"),
        (b'{"input": ', None),
    ],
)
def test_bodies_json_loads_would_accept_are_refused(body, detail):
    with pytest.raises(RequestValidationError) as exc:
        json_body.parse_body(body, None)
    err = exc.value.errors()[0]
    assert err["type"] == "json_invalid"
    if detail:
        assert detail in err["ctx"]["error"]


def test_validated_model_comes_back_and_errors_carry_the_body_location():
    req = json_body.parse_body(b'{"input": [1, 2, 3]}', _Field())
    assert isinstance(req, EmbeddingRequest) and req.input == [1, 2, 3]
    with pytest.raises(RequestValidationError):
        json_body.parse_body(b'{"input": 5}', _Field())


def test_input_shape_is_read_from_the_first_element():
    assert [input_shape(v) for v in ("a", ["a"], [1], [[1]], [{"text": "a"}], [], [True], None, 3)] == [
        "text", "texts", "ids", "id_lists", "items", "texts", None, None, None
    ]  # fmt: skip


@pytest.fixture
def make_app():
    made = []

    def make(**flags):
        args = ServerArgs(allowed_hosts=["*"], **flags)  # TestClient says `Host: testserver`
        made.append(PortArgs.create())
        return create_app(args, made[-1], make_model_info(model_path=args.model_path))

    yield make
    for port_args in made:
        port_args.cleanup()


def test_large_bodies_are_parsed_off_the_event_loop(monkeypatch, make_app):
    threads = []
    real = json_body.parse_body

    def spy(body, field):
        threads.append(threading.current_thread().name)
        return real(body, field)

    monkeypatch.setattr(json_body, "parse_body", spy)
    client = TestClient(make_app(), raise_server_exceptions=False)  # no lifespan: fails after parsing
    small = json.dumps({"input": "x"}).encode()
    large = json.dumps({"input": [7] * 200_000}).encode()
    assert len(large) > json_body.LARGE_BODY_BYTES > len(small)
    for body in (small, large):
        client.post("/v1/embeddings", content=body, headers={"content-type": "application/json"})
    assert not threads[0].startswith("json-body") and threads[1].startswith("json-body")


def test_models_and_model_info_show_paths_only_when_asked(make_app):
    hidden = TestClient(make_app(served_model_name="mini"))
    card = hidden.get("/v1/models").json()["data"][0]
    info = hidden.get("/model_info").json()
    assert card["root"] == "mini" and info["model_path"] == "mini" and "tokenizer_path" not in info
    assert hidden.get("/info").json()["model_id"] == "mini"  # TEI's /info
    assert hidden.get("/v1/models/mini").json()["root"] == "mini"
    shown = TestClient(make_app(served_model_name="mini", expose_model_path=True))
    args_path = ServerArgs().model_path
    assert shown.get("/v1/models").json()["data"][0]["root"] == args_path
    assert shown.get("/model_info").json()["tokenizer_path"] == args_path


def test_model_info_hides_the_image_processor_dir_and_colbert_file():
    info = {
        "model_path": "/srv/models/gme",
        "vision": {"model_dir": "/srv/models/gme", "image_token_id": 5, "spatial_merge_size": 2},
        "colbert": {"projection": "file", "path": "/srv/models/bge-m3/colbert_linear.pt", "dim": 8},
    }
    hide_paths(info, "gme")
    assert "/srv" not in json.dumps(info)
    assert info["vision"]["image_token_id"] == 5 and info["colbert"]["path"] == "colbert_linear.pt"


def test_tei_and_multi_vector_routes_get_the_same_body_checks(make_app):
    """/embed_all (and every route added later) gets orjson parsing, the input-shape message, 415."""
    client = TestClient(make_app(), raise_server_exceptions=False)
    json_ct = {"content-type": "application/json"}
    cases = [
        ("/embed_all", b'{"inputs": 3}', "'inputs' must be a string, a list of strings, a list of token ids, or a"),
        ("/embed_all", b'{"inputs": "\\ud800"}', "lone surrogate"),
        ("/embed_all", '{"inputs": "x"}'.encode("utf-16"), "not valid UTF-8"),
        ("/embed_sparse", b'{"inputs": [1]}', "'inputs' must be a string or a list of strings."),
        ("/v1/embeddings", b'{"input": "x", "multi_vector": "yes"}', "multi_vector"),
    ]
    for path, body, message in cases:
        r = client.post(path, content=body, headers=json_ct)
        if path == "/v1/embeddings":
            assert r.status_code == 400 and message in r.json()["error"]["message"], (path, r.text)
        else:  # TEI's routes: TEI's {"error": str, "error_type": str}, 422 Validation
            assert r.status_code == 422 and r.json()["error_type"] == "Validation", (path, r.text)
            assert message in r.json()["error"], (path, r.text)
    r = client.post("/embed_all", content=b'{"inputs": "x"}')
    # the middleware's 415 comes before any route: OpenAI's shape on every path (docs/migrating.md)
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    assert client.get("/embed_all").headers["allow"] == "POST"
