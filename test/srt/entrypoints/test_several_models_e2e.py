"""Several models behind one port (#31) on real servers: the bundled MiniLM embedder and a tiny
cross-encoder, from a --models-config YAML file (two HTTP workers) and from repeated --model-path.

Each model's answers match its reference (sentence-transformers, transformers logits), requests
without a `model` reach the model able to answer the route, an unknown name is a 404 naming the
served ones (TEI's routes: their 422); one model's overload (429) and death (503, on every HTTP
worker, until its engine has started again) are its own; every model dead at once stops the server
with exit 1; two models claiming one name never start.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import torch

from sglang.srt.server_args import default_model_path
from test.helpers.procs import is_running
from test.helpers.prom import parse, value
from test.helpers.server import ServerProcess
from test.helpers.tiny_task_models import build_tiny_bert_task
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

TEXTS = ["a dog in the house", "the river by the mountain", "three blue books"]
QUERY = "the river"
DOCS = ["a dog in the house", "the river by the mountain", "three blue books", "water and fire in the city"]
ARGS = ("--cpu-threads", "1", "--max-batch-size", "8")


@pytest.fixture(scope="module")
def ce_dir(tmp_path_factory) -> str:
    return build_tiny_bert_task(str(tmp_path_factory.mktemp("ce")), "seq_cls", num_labels=1, id2label={0: "relevant"})


@pytest.fixture(scope="module")
def server(tmp_path_factory, ce_dir):
    """The embedder as "minilm", the cross-encoder as "ce" (alias "reranker"), two HTTP workers.
    test_one_dead_model_* runs last: it kills this server's models. The cross-encoder is served
    through a link (`s.ce_link`), so that a test can keep a dead model from starting again."""
    where = tmp_path_factory.mktemp("cfg")
    config, link = where / "models.yaml", where / "ce-link"
    link.symlink_to(ce_dir)
    config.write_text(
        "models:\n"
        f"  - model-path: {default_model_path()}\n"
        "    served-model-name: minilm\n"
        f"  - model-path: {link}\n"
        "    served-model-name: [ce, reranker]\n"
        "    max-queue-size: 8\n"  # its own queue: its overload is its own
    )
    with ServerProcess("--models-config", str(config), "--tokenizer-worker-num", "2", "--log-requests", *ARGS) as s:
        s.ce_link = link
        yield s


def _post(server: ServerProcess, path: str, payload) -> requests.Response:
    return requests.post(server.base_url + path, json=payload, timeout=60)


def _ok(resp: requests.Response):
    assert resp.status_code == 200, resp.text
    return resp.json()


def _st_vectors(texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(default_model_path(), device="cpu")
    return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)  # the server normalizes too


def _ce_logits(model_dir: str, first: list[str], second=None) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(**tok(first, second, padding=True, return_tensors="pt")).logits[:, 0].numpy()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _vectors(body: dict) -> np.ndarray:
    return np.array([d["embedding"] for d in sorted(body["data"], key=lambda d: d["index"])])


def _scheduler_pid(server: ServerProcess, name: str) -> int:
    """The PID of model `name`'s scheduler, from its latest start-up line ("model <name>: replica 0:
    ..., pid N"; a model whose engine was started again has one line per start)."""
    with open(server.log_path) as f:
        log = f.read()
    found = re.findall(rf"model {re.escape(name)}(?: \([^)\n]*\))?: replica 0: .*, pid (\d+)$", log, re.M)
    assert found, log[-4000:]
    return int(found[-1])


def _unlinked(link) -> str:
    """Remove the link a model is served through (its engine cannot start again until it is back);
    returns where it pointed."""
    target = os.readlink(link)
    os.remove(link)
    return target


def _not_found(resp: requests.Response, name: str, served: list[str]) -> None:
    assert resp.status_code == 404, resp.text
    err = resp.json()["error"]
    assert err["code"] == "model_not_found" and err["type"] == "invalid_request_error", err
    assert err["param"] == "model" and f"`{name}`" in err["message"], err
    assert all(f"`{s}`" in err["message"] for s in served), err


def _unavailable(resp: requests.Response, name: str) -> None:
    """A 503 saying which model's engine is gone and why."""
    assert resp.status_code == 503, resp.text
    message = resp.json()["error"]["message"]
    assert f"model {name}" in message and "exited unexpectedly" in message and "SIGKILL" in message, message


# ----- answers and routing -----


def test_embeddings_match_sentence_transformers_with_and_without_a_model(server):
    ref = _st_vectors(TEXTS)
    named = _ok(_post(server, "/v1/embeddings", {"input": TEXTS, "model": "minilm"}))
    assert named["model"] == "minilm"
    unnamed = _ok(_post(server, "/v1/embeddings", {"input": TEXTS}))  # no model: the embedder answers
    assert unnamed["model"] == "minilm"
    for body in (named, unnamed):
        got = _vectors(body)
        assert got.shape == ref.shape
        assert _cosines(got, ref).min() > 0.9999
        np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)


def test_rerank_matches_the_cross_encoder_with_and_without_a_model(server, ce_dir):
    logits = _ce_logits(ce_dir, [QUERY] * len(DOCS), DOCS)
    order = np.argsort(-logits, kind="stable").tolist()
    for model in ("ce", "reranker", None):  # its name, its alias, none: the cross-encoder ranks
        payload = {"query": QUERY, "documents": DOCS, **({"model": model} if model else {})}
        body = _ok(_post(server, "/v1/rerank", payload))
        assert body["model"] == "ce"  # an alias answers under the model's name, as with one model
        assert [x["index"] for x in body["results"]] == order, model
        scores = {x["index"]: x["relevance_score"] for x in body["results"]}
        np.testing.assert_allclose([scores[i] for i in range(len(DOCS))], _sigmoid(logits), atol=1e-5)


def test_tei_routes_without_a_model_reach_the_model_for_the_route(server, ce_dir):
    tei = _ok(_post(server, "/embed", {"inputs": TEXTS}))  # -> the embedder
    openai = _vectors(_ok(_post(server, "/v1/embeddings", {"input": TEXTS})))
    np.testing.assert_allclose(np.array(tei), openai, atol=1e-6)

    logits = _ce_logits(ce_dir, [QUERY] * len(DOCS), DOCS)
    ranked = _ok(_post(server, "/rerank", {"query": QUERY, "texts": DOCS}))  # -> the cross-encoder
    assert [x["index"] for x in ranked] == np.argsort(-logits, kind="stable").tolist()
    np.testing.assert_allclose([x["score"] for x in ranked], np.sort(_sigmoid(logits))[::-1], atol=1e-5)

    logit = _ce_logits(ce_dir, ["the cat"])[0]
    predicted = _ok(_post(server, "/predict", {"inputs": "the cat"}))  # -> the cross-encoder (classify)
    assert predicted[0]["label"] == "relevant" and abs(predicted[0]["score"] - _sigmoid(logit)) <= 1e-5


def test_a_model_named_in_the_body_or_query_routes_there(server, ce_dir):
    # TEI's /rerank naming the embedder: it ranks by cosine of its own vectors, not the cross-encoder.
    ranked = _ok(_post(server, "/rerank", {"query": QUERY, "texts": DOCS, "model": "minilm"}))
    ref = _st_vectors([QUERY, *DOCS])
    cos = _cosines(ref[:1], ref[1:])
    scores = {x["index"]: x["score"] for x in ranked}
    np.testing.assert_allclose([scores[i] for i in range(len(DOCS))], cos, atol=1e-4)
    # /v1/embeddings naming the cross-encoder: its one logit per input.
    logit = _ce_logits(ce_dir, ["the cat"])[0]
    body = _ok(_post(server, "/v1/embeddings", {"input": ["the cat"], "model": "ce"}))
    assert body["model"] == "ce" and len(body["data"][0]["embedding"]) == 1
    assert abs(body["data"][0]["embedding"][0] - logit) <= 1e-4
    # ?model= names the cross-encoder for a TEI route whose body has no model field: it cannot embed.
    r = requests.post(server.base_url + "/embed?model=ce", json={"inputs": "the cat"}, timeout=60)
    assert r.status_code == 424 and "not a embedding model" in r.json()["error"], r.text


@pytest.mark.parametrize(
    "path, payload",
    [
        ("/v1/embeddings", {"input": "hi", "model": "nope"}),
        ("/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "nope"}),
    ],
)
def test_an_unknown_model_is_a_404_naming_the_served_ones(server, path, payload):
    _not_found(_post(server, path, payload), "nope", ["minilm", "ce"])


def test_an_unknown_model_on_a_tei_route_is_answered_in_teis_shape(server):
    for r in (
        _post(server, "/embed", {"inputs": "hi", "model": "nope"}),
        requests.post(server.base_url + "/rerank?model=nope", json={"query": QUERY, "texts": DOCS}, timeout=60),
    ):
        assert r.status_code == 422, r.text  # TEI's status for a request it cannot take
        body = r.json()
        assert set(body) == {"error", "error_type"} and body["error_type"] == "Validation", body
        assert "`nope` does not exist" in body["error"] and "`minilm`, `ce`" in body["error"], body


def test_models_list_health_and_one_card(server):
    cards = {c["id"]: c for c in _ok(requests.get(server.base_url + "/v1/models", timeout=10))["data"]}
    assert set(cards) == {"minilm", "ce", "reranker"}
    assert "embed" in cards["minilm"]["capabilities"] and "rerank" not in cards["minilm"]["capabilities"]
    assert {"rerank", "classify"} <= set(cards["ce"]["capabilities"]) and "embed" not in cards["ce"]["capabilities"]
    assert cards["reranker"]["root"] == "ce"
    card = _ok(requests.get(server.base_url + "/v1/models/ce", timeout=10))
    assert card["id"] == "ce" and card["capabilities"] == cards["ce"]["capabilities"]
    _not_found(requests.get(server.base_url + "/v1/models/nope", timeout=10), "nope", ["minilm", "ce"])
    health = requests.get(server.base_url + "/health", timeout=10)
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "models": {"minilm": {"status": "ok"}, "ce": {"status": "ok"}}}


def test_metrics_are_labelled_by_model(server):
    """Each model's request and batch series count its own requests only (deltas over this test)."""
    series = [
        ("sglang_http_requests_total", dict(model=m, route=r, status="200"))
        for m in ("minilm", "ce")
        for r in ("/v1/embeddings", "/v1/rerank")
    ] + [("sglang_batch_size_count", dict(model=m, dp_rank="0")) for m in ("minilm", "ce")]

    def scrape() -> list[float]:
        fams = parse(requests.get(server.base_url + "/metrics", timeout=10).text)
        return [value(fams, name, **labels) for name, labels in series]

    before = scrape()
    for _ in range(2):
        _ok(_post(server, "/v1/embeddings", {"input": "hi", "model": "minilm"}))
    _ok(_post(server, "/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "ce"}))
    grown = [b - a for a, b in zip(before, scrape())]
    # minilm: 2 embeddings, 0 reranks; ce: 0 embeddings, 1 rerank; a batch or more for each model
    assert grown[:4] == [2, 0, 0, 1], list(zip(series, grown))
    assert grown[4] >= 1 and grown[5] >= 1, list(zip(series, grown))


def test_one_models_overload_is_its_own(server):
    """The cross-encoder's scheduler held (SIGSTOP): past what its queue takes (max-queue-size 8 in
    the models file: each HTTP worker keeps at most 16 of its inputs in flight), it answers 429
    while the embedder answers 200 on both HTTP workers; once it runs again, what it took is
    answered (200, or 429 for what its scheduler's queue had no room for)."""
    ce_pid = _scheduler_pid(server, "ce")
    rerank = {"query": QUERY, "documents": DOCS, "model": "ce"}  # 4 inputs each: 4 per worker fit
    os.kill(ce_pid, signal.SIGSTOP)
    pool = ThreadPoolExecutor(12)
    try:
        held = [pool.submit(_post, server, "/v1/rerank", rerank) for _ in range(12)]
        assert wait_until(lambda: sum(f.done() for f in held) >= 4, 20), "too few reranks were refused"
        refused = [f.result() for f in held if f.done()]
        assert all(r.status_code == 429 for r in refused), [r.text for r in refused]
        assert refused[0].json()["error"]["type"] == "rate_limit_error", refused[0].text

        def check(i: int) -> None:
            r = requests.post(server.base_url + "/v1/embeddings", json={"input": f"busy {i}"}, timeout=10)
            assert r.status_code == 200 and r.json()["model"] == "minilm", r.text

        _answers_on_both_workers(server, check, n=12)
    finally:
        os.kill(ce_pid, signal.SIGCONT)
        pool.shutdown(wait=True)
    answered = [f.result().status_code for f in held]
    assert 200 in answered and set(answered) <= {200, 429}, answered


# ----- one model dies, then the other (runs last: it ends the module's server) -----


def _answers_on_both_workers(server: ServerProcess, check, n: int = 24) -> None:
    """`n` requests, each over a fresh connection (SO_REUSEPORT spreads them over both HTTP
    workers), all pass `check`; the request log shows both workers answered."""
    with open(server.log_path) as f:
        f.seek(0, 2)
        start = f.tell()
    for i in range(n):
        check(i)
    with open(server.log_path) as f:
        f.seek(start)
        lines = [line for line in f if "POST /v1/" in line]
    by_worker = {"http-1" in line.split("]", 1)[0] for line in lines}
    assert by_worker == {True, False}, lines


def test_one_dead_model_fails_only_its_requests_on_both_workers_until_it_serves_again(server, ce_dir):
    """SIGKILL of the cross-encoder's scheduler (its model file held away, so that it stays dead):
    its request in flight and every later one get 503 naming it, on both HTTP workers, while the
    embedder serves; back in place, its engine starts again and both workers rank with it again.
    Then both models dead at once: the server exits 1."""
    minilm_pid, ce_pid = _scheduler_pid(server, "minilm"), _scheduler_pid(server, "ce")
    assert ce_pid != minilm_pid and {ce_pid, minilm_pid} <= set(server.children())
    rerank = {"query": QUERY, "documents": DOCS, "model": "ce"}
    target = _unlinked(server.ce_link)
    os.kill(ce_pid, signal.SIGSTOP)  # holds the next request in its scheduler
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(requests.post, server.base_url + "/v1/rerank", json=rerank, timeout=30)
        assert wait_until(lambda: server.in_flight() >= 1, 10), server.log()
        os.kill(ce_pid, signal.SIGKILL)
        _unavailable(pending.result(), "ce")

    def degraded() -> bool:
        return requests.get(server.base_url + "/health", timeout=5).json()["status"] == "degraded"

    assert wait_until(degraded, 10, interval=0.1), server.log()
    health = requests.get(server.base_url + "/health", timeout=5)
    assert health.status_code == 200 and health.json()["models"]["minilm"] == {"status": "ok"}
    dead = health.json()["models"]["ce"]
    assert dead["status"] == "unavailable" and "SIGKILL" in dead["reason"], dead

    def check_dead(i: int) -> None:
        _unavailable(requests.post(server.base_url + "/v1/rerank", json=rerank, timeout=10), "ce")
        r = requests.post(server.base_url + "/v1/embeddings", json={"input": f"still here {i}"}, timeout=10)
        assert r.status_code == 200 and r.json()["model"] == "minilm", r.text

    _answers_on_both_workers(server, check_dead)
    ids = [c["id"] for c in _ok(requests.get(server.base_url + "/v1/models", timeout=10))["data"]]
    assert ids == ["minilm"]  # what clients can still use
    assert server.proc.poll() is None

    os.symlink(target, server.ce_link)  # its next restart attempt finds the model
    serving = lambda: all(_post(server, "/v1/rerank", rerank).status_code == 200 for _ in range(4))  # noqa: E731
    assert wait_until(serving, 45, interval=0.5), server.log()
    expected = _sigmoid(_ce_logits(ce_dir, [QUERY] * len(DOCS), DOCS))

    def check_back(i: int) -> None:
        scores = {x["index"]: x["relevance_score"] for x in _ok(_post(server, "/v1/rerank", rerank))["results"]}
        np.testing.assert_allclose([scores[i] for i in range(len(DOCS))], expected, atol=1e-5)

    _answers_on_both_workers(server, check_back, n=16)
    assert requests.get(server.base_url + "/health", timeout=5).json()["status"] == "ok"

    _unlinked(server.ce_link)
    os.kill(_scheduler_pid(server, "ce"), signal.SIGKILL)
    assert wait_until(degraded, 10, interval=0.1), server.log()
    os.kill(minilm_pid, signal.SIGKILL)  # every model dead at once: the server gives up
    assert server.proc.wait(30) == 1
    assert "exiting with status 1" in open(server.log_path).read()
    assert wait_until(lambda: not is_running(ce_pid) and not is_running(minilm_pid), 5)


# ----- repeated --model-path; a name claimed twice -----


def test_repeated_model_path_outlives_the_first_models_death_until_it_serves_again(tmp_path, ce_dir):
    """Names default to the paths' last folders (the paths as given answer too). The first model
    (the embedder) dies: its requests get 503 while the cross-encoder still ranks and the routes
    any model answers (/metrics, /v1/models) move to it; its engine does not start again while its
    model is away, and does once it is back, answering as before."""
    minilm = tmp_path / "minilm"  # a link to the bundled model, so that its restart can be held back
    minilm.symlink_to(default_model_path())
    minilm = str(minilm)
    with ServerProcess("--model-path", minilm, "--model-path", ce_dir, *ARGS) as s:
        ce_name = os.path.basename(ce_dir.rstrip("/"))
        ids = [c["id"] for c in _ok(requests.get(s.base_url + "/v1/models", timeout=10))["data"]]
        assert ids == ["minilm", minilm, ce_name, ce_dir]  # each name, then its aliases (as with one model)
        for named in (ce_dir, ce_name):  # the path as given is an alias of the folder's name
            body = _ok(_post(s, "/v1/rerank", {"query": QUERY, "documents": DOCS, "model": named}))
            assert body["model"] == ce_name
        before = _ok(_post(s, "/v1/embeddings", {"input": TEXTS}))
        assert before["model"] == "minilm"
        assert _ok(_post(s, "/v1/embeddings", {"input": TEXTS, "model": minilm}))["model"] == "minilm"
        _not_found(_post(s, "/v1/embeddings", {"input": "hi", "model": "nope"}), "nope", ["minilm", ce_name])

        target = _unlinked(minilm)
        os.kill(_scheduler_pid(s, "minilm"), signal.SIGKILL)
        degraded = lambda: requests.get(s.base_url + "/health", timeout=5).json()["status"] == "degraded"  # noqa: E731
        assert wait_until(degraded, 10, interval=0.1), s.log()
        _unavailable(_post(s, "/v1/embeddings", {"input": "hi"}), "minilm")
        _unavailable(_post(s, "/v1/embeddings", {"input": "hi", "model": minilm}), "minilm")
        ranked = _ok(_post(s, "/v1/rerank", {"query": QUERY, "documents": DOCS}))
        assert ranked["model"] == ce_name and len(ranked["results"]) == len(DOCS)
        metrics = requests.get(s.base_url + "/metrics", timeout=10)
        assert metrics.status_code == 200 and 'model="' in metrics.text
        ids = [c["id"] for c in _ok(requests.get(s.base_url + "/v1/models", timeout=10))["data"]]
        assert ids == [ce_name, ce_dir]
        _not_found(requests.get(s.base_url + "/v1/models/nope", timeout=10), "nope", ["minilm", ce_name])

        # A restart attempt without its model fails and the model stays dead; the next one, with it, serves.
        failed = lambda: "model minilm: restart failed" in open(s.log_path).read()  # noqa: E731
        assert wait_until(failed, 30, interval=0.2), s.log()
        _unavailable(_post(s, "/v1/embeddings", {"input": "hi"}), "minilm")
        os.symlink(target, minilm)
        serving = lambda: _post(s, "/v1/embeddings", {"input": TEXTS}).status_code == 200  # noqa: E731
        assert wait_until(serving, 45, interval=0.5), s.log()
        np.testing.assert_allclose(_vectors(_ok(_post(s, "/v1/embeddings", {"input": TEXTS}))), _vectors(before))
        health = requests.get(s.base_url + "/health", timeout=5)
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        assert s.stop() == 0


def test_two_models_claiming_one_name_refuse_to_start(tmp_path, ce_dir):
    config = tmp_path / "models.yaml"
    config.write_text(
        f"- {{model-path: {ce_dir}, served-model-name: shared}}\n"
        f"- {{model-path: {default_model_path()}, served-model-name: [mine, shared]}}\n"
    )
    cmd = [sys.executable, "-m", "sglang.launch_server", "--models-config", str(config), "--port", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 2, out
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and "'shared'" in lines[0] and "served-model-name" in lines[0], lines
    assert ce_dir in lines[0] and default_model_path() in lines[0], lines
