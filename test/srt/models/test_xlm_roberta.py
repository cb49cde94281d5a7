"""XLM-RoBERTa (bge-m3 dense, multilingual-e5) against transformers, and RoBERTa's position offset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from test.helpers.parity import MIXED_TEXTS, hf_pool, make_runner, relative_error_rows, tokenize_for_runner
from test.helpers.tiny_task_models import build_tiny_xlm_roberta


def _reference(model_dir: str, texts: list[str], pooling: str) -> np.ndarray:
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    return F.normalize(hf_pool(hidden, enc["attention_mask"], pooling), dim=-1).numpy()


@pytest.mark.parametrize("pooling", ["cls", "mean"])  # bge-m3, multilingual-e5
def test_xlm_roberta_matches_transformers(tmp_path, pooling):
    d = build_tiny_xlm_roberta(str(tmp_path / "xlmr"), st_pooling=pooling)
    runner = make_runner(d)  # no flags
    mc = runner.model_config
    assert mc.architecture == "XLMRobertaModel" and mc.is_encoder and mc.pooling == pooling
    ours = runner.embed(tokenize_for_runner(d, MIXED_TEXTS))
    assert relative_error_rows(ours, _reference(d, MIXED_TEXTS, pooling)).max() <= 1e-4


def test_positions_start_after_padding_idx(tmp_path):
    # 66 position rows, padding_idx 1: token i reads row i + 2, so 64 tokens fit and no more.
    d = build_tiny_xlm_roberta(str(tmp_path / "xlmr"), st_pooling="mean", seed=1)
    runner = make_runner(d)
    assert runner.model_config.context_length == 64
    assert runner.model.embeddings.position_offset == 2
    ids = np.random.default_rng(0).integers(5, runner.model_config.vocab_size, size=64).astype(np.int32)
    ids[0], ids[-1] = 0, 2  # <s> ... </s>
    from transformers import AutoModel

    model = AutoModel.from_pretrained(d, attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(ids).long()[None]).last_hidden_state
    ref = F.normalize(hidden.mean(1), dim=-1).numpy()
    assert relative_error_rows(runner.embed([ids]), ref).max() <= 1e-4
    from sglang.srt.errors import ConfigError

    with pytest.raises(ConfigError, match="exceeds the model's 64 position embeddings"):
        make_runner(d, context_length=65)
