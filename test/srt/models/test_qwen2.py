"""Our Qwen2 decoder (bias on q/k/v) against transformers' Qwen2Model on tiny random checkpoints."""

from __future__ import annotations

import json
import os

import numpy as np

from test.helpers.parity import (
    MIXED_TEXTS as TEXTS,
)
from test.helpers.parity import (
    hf_decoder_embeddings,
    make_runner,
    relative_error_rows,
    tokenize_for_runner,
)
from test.helpers.tiny_models import build_tiny_qwen2


def test_qwen2_for_causal_lm_matches_transformers(tmp_path):
    d = build_tiny_qwen2(str(tmp_path / "qwen2"))
    runner = make_runner(d, is_embedding=True)
    assert runner.model_config.architecture == "Qwen2ForCausalLM"
    assert runner.model_config.pooling == "lasttoken" and runner.model_config.normalize
    ids = tokenize_for_runner(d, TEXTS)
    ours = runner.embed(ids)
    assert relative_error_rows(ours, hf_decoder_embeddings(d, TEXTS)).max() <= 1e-4
    single = np.concatenate([runner.embed([x]) for x in ids])
    assert np.abs(ours - single).max() <= 1e-5


def test_qwen2_model_checkpoint_without_prefix(tmp_path):
    # gte-Qwen2 ships a bare Qwen2Model: tensor names lack `model.` and there is no LM head.
    from transformers import AutoModel

    src = build_tiny_qwen2(str(tmp_path / "causal"), seed=3)
    d = str(tmp_path / "bare")
    AutoModel.from_pretrained(src).save_pretrained(d)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(src, name)) as f_in, open(os.path.join(d, name), "w") as f_out:
            f_out.write(f_in.read())
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f)["architectures"] == ["Qwen2Model"]
    runner = make_runner(d, is_embedding=True)
    ours = runner.embed(tokenize_for_runner(d, TEXTS))
    assert relative_error_rows(ours, hf_decoder_embeddings(src, TEXTS)).max() <= 1e-4
