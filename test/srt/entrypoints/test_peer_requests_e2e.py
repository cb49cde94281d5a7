"""#30 items 3, 4, 6 on real servers over the bundled all-MiniLM-L6-v2 (which has no chat template):
vLLM's chat-form `messages` (equal to the rendered text sent with `add_special_tokens: false`,
checked against transformers), the same with a Jinja --chat-template, SageMaker's /invocations
(each body shape answered as its direct route answers) and /ping (200, then 503 once the engine
is stalled), and Cohere's v1 and v2 SDK clients, errors included.

The main server requires an API key (Cohere's clients send it; /ping must not need it). Its last
test stops the scheduler (keep it last).
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import requests

from test.helpers.procs import running
from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
KEY = "sk-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXTS = ["how much protein should a female eat", "summit define", "the cat sat on the mat by the river"]
CONVERSATION = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": [{"type": "text", "text": "what is a summit?"}, {"type": "text", "text": "thanks"}]},
]
TEMPLATE = (
    "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}[ASSISTANT]{% endif %}{{ tail | default('') }}"
)
WATCHDOG = 3.0


@pytest.fixture(scope="module")
def server():
    args = ("--api-key", KEY, "--served-model-name", "minilm", "--watchdog-timeout", str(WATCHDOG))
    with ServerProcess(*args) as s:
        yield s


@pytest.fixture(scope="module")
def templated(tmp_path_factory):
    path = tmp_path_factory.mktemp("template") / "chat.jinja"
    path.write_text(TEMPLATE)
    with ServerProcess("--chat-template", str(path)) as s:
        yield s


@pytest.fixture(scope="module")
def reference():
    """MiniLM through transformers: mean pooling and L2 norm over exactly the ids given."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from sglang.srt.server_args import default_model_path

    tok = AutoTokenizer.from_pretrained(default_model_path())
    model = AutoModel.from_pretrained(default_model_path()).eval()

    def embed(text: str, special: bool) -> tuple[np.ndarray, int]:
        ids = tok(text, add_special_tokens=special, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            hidden = model(input_ids=ids).last_hidden_state[0]
        v = hidden.mean(dim=0)
        return (v / v.norm()).numpy(), ids.shape[1]

    embed.tokenizer = tok
    return embed


def _post(s, path: str, body, headers=None) -> requests.Response:
    return requests.post(s.base_url + path, json=body, headers={**AUTH, **(headers or {})}, timeout=60)


def _vector(r: requests.Response) -> np.ndarray:
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["data"][0]["embedding"], dtype=np.float32)


def _cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# ----- item 3: chat-form embedding requests -----
def test_messages_without_a_template_equal_the_rendered_text_without_special_tokens(server, reference):
    rendered = "system: Answer briefly.\nuser: what is a summit?\nthanks\n"
    chat = _post(server, "/v1/embeddings", {"messages": CONVERSATION})
    same = _post(server, "/v1/embeddings", {"input": rendered, "add_special_tokens": False})
    np.testing.assert_allclose(_vector(chat), _vector(same), atol=1e-6)
    ref, n = reference(rendered, special=False)
    assert _cos(_vector(chat), ref) > 1 - 1e-4
    assert chat.json()["usage"]["prompt_tokens"] == n  # no [CLS] / [SEP]
    with_special = _post(server, "/v1/embeddings", {"messages": CONVERSATION, "add_special_tokens": True})
    ref_special, _ = reference(rendered, special=True)
    assert _cos(_vector(with_special), ref_special) > 1 - 1e-4
    # vLLM's /pooling takes the chat form too
    pooled = _post(server, "/pooling", {"messages": CONVERSATION, "task": "embed"})
    assert pooled.status_code == 200, pooled.text
    np.testing.assert_allclose(pooled.json()["data"][0]["data"], _vector(chat), atol=1e-6)


def test_chat_form_refusals(server):
    cases = [
        ({"input": "x", "messages": CONVERSATION}, "messages", "not both"),
        ({"messages": CONVERSATION, "chat_template": "{{ 1 }}"}, "chat_template", "--chat-template"),
        ({"messages": CONVERSATION, "add_generation_prompt": True}, "add_generation_prompt", "no"),
        ({"messages": []}, "messages", "empty"),
        ({}, "input", "'input' is required"),
    ]
    for body, param, words in cases:
        r = _post(server, "/v1/embeddings", body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param and words in r.text, (body, r.text)


def test_messages_with_a_jinja_template(templated, reference):
    body = {"messages": CONVERSATION, "add_generation_prompt": True, "chat_template_kwargs": {"tail": " !"}}
    rendered = reference.tokenizer.apply_chat_template(
        [{"role": m["role"], "content": "what is a summit?\nthanks" if m["role"] == "user" else m["content"]}
         for m in CONVERSATION],
        chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True, tail=" !",
    )  # fmt: skip
    assert rendered == "[SYSTEM] Answer briefly.\n[USER] what is a summit?\nthanks\n[ASSISTANT] !"
    chat = _post(templated, "/v1/embeddings", body)
    same = _post(templated, "/v1/embeddings", {"input": rendered, "add_special_tokens": False})
    np.testing.assert_allclose(_vector(chat), _vector(same), atol=1e-6)
    assert _cos(_vector(chat), reference(rendered, special=False)[0]) > 1 - 1e-4
    r = _post(templated, "/v1/embeddings", {"messages": CONVERSATION, "chat_template_kwargs": {"tokenize": True}})
    assert r.status_code == 400 and "tokenize" in r.json()["error"]["message"]


# ----- item 4: SageMaker -----
def _without_ids(value):
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in ("id", "created")}
    return value


def test_invocations_answer_as_the_direct_route(server):
    cases = [
        ({"input": TEXTS}, "/v1/embeddings"),
        ({"messages": CONVERSATION}, "/v1/embeddings"),
        ({"query": TEXTS[0], "documents": TEXTS[1:]}, "/v1/rerank"),
        ({"inputs": TEXTS}, "/embed"),
        ({"texts": TEXTS, "input_type": "search_query"}, "/v1/embed"),
        ({"inputs": [{"content": [{"type": "text", "text": TEXTS[0]}]}], "embedding_types": ["int8"]}, "/v2/embed"),
        ({"input": 3}, "/v1/embeddings"),  # the route's own 400
    ]
    for body, path in cases:
        via, direct = _post(server, "/invocations", body), _post(server, path, body)
        assert via.status_code == direct.status_code, (body, via.text, direct.text)
        assert _without_ids(via.json()) == _without_ids(direct.json()), (body, via.text[:300], direct.text[:300])
    named = _post(server, "/invocations", {"texts": TEXTS}, {"X-Amzn-SageMaker-Custom-Attributes": "route=/v2/embed"})
    assert named.status_code == 200 and named.json()["response_type"] == "embeddings_by_type"
    unknown = _post(server, "/invocations", {"prompt": "x"})
    assert unknown.status_code == 400 and "`input` or `messages` (/v1/embeddings)" in unknown.json()["error"]["message"]
    assert requests.post(server.base_url + "/invocations", json={"input": "x"}, timeout=10).status_code == 401
    metrics = requests.get(server.base_url + "/metrics", headers=AUTH, timeout=10).text
    assert 'route="/invocations"' in metrics


# ----- item 6: Cohere v1 and v2 with Cohere's own SDK -----
def test_cohere_v1_client_and_v2_client(server, reference):
    import cohere

    v1 = cohere.Client(api_key=KEY, base_url=server.base_url)
    floats = v1.embed(texts=TEXTS, model="embed-english-v3.0", input_type="search_document")
    assert floats.response_type == "embeddings_floats" and floats.texts == TEXTS
    for text, vec in zip(TEXTS, floats.embeddings):
        assert _cos(vec, reference(text, special=True)[0]) > 1 - 1e-4
    assert floats.meta.api_version.version == "1" and floats.meta.billed_units.input_tokens > 0
    typed = v1.embed(texts=TEXTS, model="m", input_type="search_query", embedding_types=["float", "ubinary"])
    assert typed.response_type == "embeddings_by_type"
    np.testing.assert_allclose(typed.embeddings.float_, floats.embeddings, atol=1e-6)
    assert np.asarray(typed.embeddings.ubinary).shape == (3, 48)
    v2 = cohere.ClientV2(api_key=KEY, base_url=server.base_url)
    out = v2.embed(texts=TEXTS, model="m", input_type="search_document", embedding_types=["float"])
    np.testing.assert_allclose(out.embeddings.float_, floats.embeddings, atol=1e-6)


def test_cohere_errors_reach_the_sdk_in_cohere_shape(server):
    import cohere
    from cohere.errors import BadRequestError, UnauthorizedError

    for client in (cohere.Client(api_key="wrong", base_url=server.base_url),
                   cohere.ClientV2(api_key="wrong", base_url=server.base_url)):  # fmt: skip
        with pytest.raises(UnauthorizedError) as e:
            client.embed(texts=["x"], model="m", input_type="search_query", embedding_types=["float"])
        assert set(e.value.body) == {"message"} and "API key" in e.value.body["message"]
    good = cohere.Client(api_key=KEY, base_url=server.base_url)
    with pytest.raises(BadRequestError) as e:
        good.embed(texts=["x"], model="m", input_type="search_everything")
    assert e.value.body == {"message": e.value.body["message"]} and "search_everything" in e.value.body["message"]
    for path in ("/v1/embed", "/v2/embed"):
        r = requests.post(server.base_url + path, data=b"{}", headers=AUTH, timeout=10)  # no Content-Type
        assert r.status_code == 415 and set(r.json()) == {"message"}
        r = _post(server, path, {"texts": ["x"], "truncate": "MIDDLE"})
        assert r.status_code == 400 and set(r.json()) == {"message"} and "truncate" in r.json()["message"]


# ----- keep last: stops the engine -----
def test_ping_is_200_then_503_when_the_engine_stalls(server):
    ping = requests.get(server.base_url + "/ping", timeout=2)  # no API key: SageMaker sends none
    assert ping.status_code == 200 and ping.elapsed.total_seconds() < 2
    children = server.children()
    scheduler = next(p for p in children if open(f"/proc/{p}/comm").read().startswith("sglang-schedule"))
    os.kill(scheduler, signal.SIGSTOP)
    try:
        stalled = wait_until(
            lambda: requests.get(server.base_url + "/ping", timeout=2).status_code == 503, WATCHDOG + 5, interval=0.2
        )
        assert stalled, "/ping stayed 200 with a stopped scheduler"
        r = requests.get(server.base_url + "/ping", timeout=2)
        assert "scheduler" in r.json()["error"]["message"] and r.elapsed.total_seconds() < 2
        assert requests.get(server.base_url + "/health", timeout=2).status_code == 503
    finally:
        if running([scheduler]):
            os.kill(scheduler, signal.SIGKILL)
