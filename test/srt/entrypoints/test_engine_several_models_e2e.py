"""sglang.Engine with several models: each call picks its model by name, vectors and scores match the
references, an unknown name is the HTTP API's 404 error, and one model's engine dying fails only that
model's calls until the Engine has started it again."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest

import sglang
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.server_args import default_model_path
from test.helpers.tiny_task_models import build_tiny_bert_task
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

TEXTS = ["the river by the mountain", "three blue books"]


def _hf_logits(model_dir: str, texts: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(**tok(texts, padding=True, return_tensors="pt")).logits.numpy()


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine-models")
    ce = build_tiny_bert_task(str(root / "ce"), "seq_cls", num_labels=1, id2label={0: "relevant"})
    config = root / "models.json"
    entries = [
        {"model-path": default_model_path(), "served-model-name": ["minilm", "embedder"]},
        {"model_path": ce, "served_model_name": "ce", "max_batch_size": 4},
    ]
    config.write_text(json.dumps(entries))
    with sglang.Engine(models_config=str(config), cpu_threads=1) as e:
        e.ce_dir = ce
        yield e


def test_each_call_reaches_its_model(engine):
    from sentence_transformers import SentenceTransformer

    assert set(engine.models) == {"minilm", "embedder", "ce"}
    assert engine.server_args.served_model_name == "minilm"  # the first model's, as with one model
    ref = SentenceTransformer(default_model_path(), device="cpu").encode(TEXTS, normalize_embeddings=True)
    for name in (None, "minilm", "embedder"):
        got = np.array([o["embedding"] for o in engine.encode(TEXTS, model=name)])
        cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() > 0.9999, (name, cos)
    logits = np.array([o["embedding"] for o in engine.encode(TEXTS, model="ce")])
    np.testing.assert_allclose(logits, _hf_logits(engine.ce_dir, TEXTS), atol=1e-4)
    assert engine.get_model_info(model="ce")["served_model_name"] == "ce"
    assert engine.get_model_info()["embedding_dim"] == 384


def test_unknown_model_is_model_not_found(engine):
    with pytest.raises(EmbeddingError) as e:
        engine.encode("x", model="nope")
    assert e.value.kind is ErrorKind.MODEL_NOT_FOUND
    assert "`minilm`" in str(e.value) and "`ce`" in str(e.value)
    with pytest.raises(TypeError):
        engine.encode(["x"], model="ce", normalize_embeddings=True)  # sentence-transformers' face: first model


def test_one_dead_model_fails_alone_and_comes_back(engine):
    before = engine.encode(TEXTS, model="ce")
    ce_engine = engine._processes.engines[1]
    scheduler = next(p for p in ce_engine.procs if p.name.startswith("sglang-sched"))
    os.kill(scheduler.pid, signal.SIGKILL)

    def ce_fails() -> bool:
        try:
            engine.encode("x", model="ce")
        except EmbeddingError as e:
            return e.kind is ErrorKind.UNAVAILABLE and "model ce" in str(e)
        return False

    assert wait_until(ce_fails, 10, interval=0.05)
    assert len(engine.encode(TEXTS)) == 2  # the embedder keeps serving meanwhile

    def ce_serves() -> bool:
        try:
            return engine.encode(TEXTS, model="ce") == before
        except EmbeddingError:
            return False

    assert wait_until(ce_serves, 60, interval=0.2), "the model's engine was not started again"
    assert engine._processes.engines[1] is not ce_engine
