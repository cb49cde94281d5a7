"""sglang.SentenceTransformer's own logic (constructor prompts, defaults, batching, prompt hand-off)
on a stand-in Engine: no process starts. The real engine against sentence-transformers is
test_engine_st_compat.py."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from sglang.srt.configs.model_info import OutputKind
from sglang.srt.entrypoints import sentence_transformer as st_module
from sglang.srt.entrypoints import st_face
from test.helpers.model_info import make_model_info


class FakeEngine:
    """Records each encode call; the vector of text t is [len(t), 1, 0, ...] (prefix included)."""

    info = make_model_info(embedding_dim=4, prompts=(("query", "q: "), ("document", ""), ("classification", "c: ")))

    max_queue_size = 4096

    def __init__(self, model_path=None, is_embedding=True, **kwargs) -> None:
        self.kwargs = kwargs
        self.server_args = SimpleNamespace(
            max_queue_size=self.max_queue_size, default_prompt=kwargs.get("default_prompt")
        )
        self.active = self.most_active = 0
        self.lock = threading.Lock()
        self.model_info = self.info if model_path is None else dataclasses.replace(self.info, model_path=model_path)
        self.calls: list[tuple[list, str]] = []
        self.closed = False

    def encode(self, texts, prompt_prefix=None):
        with self.lock:
            self.calls.append((list(texts), prompt_prefix))
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        time.sleep(0.02)
        with self.lock:
            self.active -= 1
        return [{"embedding": [float(len(prompt_prefix + t)), 1.0, 0.0, 0.0]} for t in texts]

    def shutdown(self) -> None:
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(st_module, "Engine", FakeEngine)
    return FakeEngine


def test_batches_of_batch_size_carry_the_resolved_prompt(fake):
    model = st_module.SentenceTransformer(device="cpu")
    assert model.engine.kwargs == {"device": "cpu", "allow_auto_truncate": True}
    out = model.encode(["a", "bb", "ccc", "dddd", "e"], batch_size=2, prompt_name="query")
    assert sorted(c[0] for c in model.engine.calls) == [["a", "bb"], ["ccc", "dddd"], ["e"]]
    assert {c[1] for c in model.engine.calls} == {"q: "}
    np.testing.assert_array_equal(out[:, 0], [4, 5, 6, 7, 4])
    model.engine.calls.clear()
    model.encode([])  # nothing to send
    assert model.engine.calls == []


def test_no_prompt_sends_an_empty_prefix_so_the_servers_default_cannot_add_one(fake):
    model = st_module.SentenceTransformer()
    model.encode("x")
    model.encode_document("x")  # "document" is configured empty: no prefix either
    model.encode_query("x")
    assert [c[1] for c in model.engine.calls] == ["", "", "q: "]


def test_constructor_prompts_override_the_checkpoints_and_pick_the_default(fake):
    model = st_module.SentenceTransformer(prompts={"query": "Q> ", "extra": "E> "}, default_prompt_name="extra")
    assert model.prompts == {"query": "Q> ", "document": "", "classification": "c: ", "extra": "E> "}
    model.encode("x")
    model.encode_query("x")
    assert [c[1] for c in model.engine.calls] == ["E> ", "Q> "]


def test_the_checkpoints_default_prompt_name_is_read(fake, tmp_path):
    (tmp_path / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"classification": "c: "}, "default_prompt_name": "classification"})
    )
    model = st_module.SentenceTransformer(str(tmp_path))
    assert model.default_prompt_name == "classification"
    model.encode("x")
    assert model.engine.calls[-1][1] == "c: "
    model.default_prompt_name = None  # as in sentence-transformers: no default any more
    model.encode("x")
    assert model.engine.calls[-1][1] == ""
    model = st_module.SentenceTransformer(default_prompt="raw: ")  # the engine's own option still applies
    model.encode("x")
    assert model.engine.calls[-1][1] == "raw: "


def test_a_bad_default_prompt_name_stops_the_engine_it_started(fake, monkeypatch):
    started = []
    monkeypatch.setattr(st_module, "Engine", lambda **kw: started.append(FakeEngine(**kw)) or started[-1])
    with pytest.raises(ValueError, match="Default prompt name 'nope' not found"):
        st_module.SentenceTransformer(default_prompt_name="nope")
    assert started[0].closed


def test_models_without_dense_vectors_are_refused(fake, monkeypatch):
    monkeypatch.setattr(FakeEngine, "info", make_model_info(embeddings_output=OutputKind.LOGITS, labels=("a", "b")))
    with pytest.raises(ValueError, match="no dense sentence embeddings"):
        st_module.SentenceTransformer()


def test_constructor_truncate_dim_is_the_default_cut(fake):
    model = st_module.SentenceTransformer(truncate_dim=2)
    assert model.encode(["a", "b"]).shape == (2, 2)
    assert model.encode(["a", "b"], truncate_dim=3).shape == (2, 3)
    assert model.get_sentence_embedding_dimension() == model.get_embedding_dimension() == 2


def test_similarity_fn_name_from_the_constructor_the_checkpoint_or_cosine(fake, tmp_path, monkeypatch):
    assert st_module.SentenceTransformer().similarity_fn_name == "cosine"
    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "dot"}))
    model = st_module.SentenceTransformer(str(tmp_path))
    assert model.similarity_fn_name == "dot"
    a = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
    assert model.similarity(a, a)[0, 0].item() == 25.0  # dot, not cosine
    assert (
        st_module.SentenceTransformer(str(tmp_path), similarity_fn_name="euclidean").similarity_fn_name == "euclidean"
    )
    model.similarity_fn_name = "cosine"
    assert abs(model.similarity(a, a)[0, 0].item() - 1.0) < 1e-6
    with pytest.raises(ValueError, match="similarity_fn_name 'maxsim'"):
        model.similarity_fn_name = "maxsim"
    monkeypatch.setattr(st_module, "Engine", None)  # refused before any engine starts
    with pytest.raises(ValueError, match="similarity_fn_name 'bm25'"):
        st_module.SentenceTransformer(similarity_fn_name="bm25")


def test_engine_calls_in_flight_stay_within_the_window_and_the_queue(fake, monkeypatch):
    texts = [f"t{i}" for i in range(40)]
    model = st_module.SentenceTransformer()
    out = model.encode(texts, batch_size=2)  # 20 calls, at most IN_FLIGHT at once, rows in input order
    np.testing.assert_array_equal(out[:, 0], [len(t) for t in texts])
    assert 1 <= model.engine.most_active <= st_face.IN_FLIGHT
    monkeypatch.setattr(FakeEngine, "max_queue_size", 3)  # room for one call of 2 inputs: one at a time
    model = st_module.SentenceTransformer()
    np.testing.assert_array_equal(model.encode(texts, batch_size=2)[:, 0], [len(t) for t in texts])
    assert model.engine.most_active == 1
