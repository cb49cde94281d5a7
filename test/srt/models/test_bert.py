"""Our BERT encoder against transformers' BertModel on tiny random checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from test.helpers.parity import hf_pool, make_runner, relative_error_rows
from test.helpers.tiny_models import build_tiny_bert

TEXTS = [
    "the cat",
    "a fast embedding server returns one vector for every query and document",
    "river",
    "the dog and the cat in the house by the river with a green tree and red light",
    "three blue books",
]


def _reference(model_dir: str, texts: list[str], pooling: str, normalize: bool) -> np.ndarray:
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    pooled = hf_pool(hidden, enc["attention_mask"], pooling)
    return (F.normalize(pooled, dim=-1) if normalize else pooled).numpy()


def _token_ids(model_dir: str, texts: list[str]) -> list[np.ndarray]:
    from transformers import AutoTokenizer

    return [np.asarray(x, dtype=np.int32) for x in AutoTokenizer.from_pretrained(model_dir)(texts)["input_ids"]]


def _ours(runner, model_dir: str, texts: list[str]) -> np.ndarray:
    return runner.embed(_token_ids(model_dir, texts))


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_bert_matches_transformers(tmp_path, pooling):
    d = build_tiny_bert(str(tmp_path / "bert"), st_pooling=pooling)
    runner = make_runner(d)
    ours = _ours(runner, d, TEXTS)
    ref = _reference(d, TEXTS, pooling, normalize=True)
    assert ours.shape == ref.shape
    assert relative_error_rows(ours, ref).max() <= 1e-4


def test_bert_without_st_files_defaults_to_cls_normalized(tmp_path):
    d = build_tiny_bert(str(tmp_path / "bert"))
    runner = make_runner(d)
    assert runner.model_config.pooling == "cls" and runner.model_config.normalize
    ref = _reference(d, TEXTS, "cls", normalize=True)
    assert relative_error_rows(_ours(runner, d, TEXTS), ref).max() <= 1e-4


def test_bert_loads_pytorch_bin(tmp_path):
    d = build_tiny_bert(str(tmp_path / "bert"), st_pooling="mean", safe_serialization=False)
    runner = make_runner(d)
    ref = _reference(d, TEXTS, "mean", normalize=True)
    assert relative_error_rows(_ours(runner, d, TEXTS), ref).max() <= 1e-4


def test_batch_equals_one_at_a_time(tmp_path):
    d = build_tiny_bert(str(tmp_path / "bert"), st_pooling="mean")
    runner = make_runner(d)
    ids = _token_ids(d, TEXTS)
    batched = runner.embed(ids)
    single = np.concatenate([runner.embed([x]) for x in ids])
    assert np.abs(batched - single).max() <= 1e-5


def test_batch_past_the_row_chunk_matches_transformers(tmp_path):
    # One forward of more tokens than ROW_CHUNK: the feed-forward half runs in row chunks on CPU.
    from sglang.srt.layers.row_chunks import ROW_CHUNK

    d = build_tiny_bert(str(tmp_path / "bert"), st_pooling="mean")
    runner = make_runner(d)
    tokens = sum(len(x) for x in _token_ids(d, TEXTS))
    copies = ROW_CHUNK // tokens + 2
    assert tokens * copies > ROW_CHUNK
    ours = _ours(runner, d, TEXTS * copies).reshape(copies, len(TEXTS), -1)
    ref = _reference(d, TEXTS, "mean", normalize=True)
    for copy in ours:
        assert relative_error_rows(copy, ref).max() <= 1e-4


def test_token_type_ids_are_used(tmp_path):
    d = build_tiny_bert(str(tmp_path / "bert"), st_pooling="mean")
    runner = make_runner(d)
    ids = np.asarray([2, 10, 11, 3, 12, 3], dtype=np.int32)
    types = np.asarray([0, 0, 0, 0, 1, 1], dtype=np.int32)
    with_types = runner.embed([ids], [types])
    without = runner.embed([ids])
    assert np.abs(with_types - without).max() > 1e-4
    from transformers import AutoModel

    model = AutoModel.from_pretrained(d, attn_implementation="eager").eval()
    with torch.no_grad():
        h = model(
            input_ids=torch.from_numpy(ids).long()[None], token_type_ids=torch.from_numpy(types).long()[None]
        ).last_hidden_state
    ref = F.normalize(h.mean(1), dim=-1).numpy()
    assert relative_error_rows(with_types, ref).max() <= 1e-4
