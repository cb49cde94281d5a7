"""ModernBERT against sentence-transformers on both CPU backends: GeGLU, bias-free norms, RoPE
with a base per layer kind, and local layers whose window the longer texts reach past."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sglang.srt.models.modernbert import FULL, SLIDING, layer_types_of, rope_theta_of
from test.helpers.parity import MIXED_TEXTS, make_runner, relative_error_rows, tokenize_for_runner
from test.helpers.tiny_encoders import build_tiny_modernbert


@pytest.fixture(scope="module")
def modernbert_dir(tmp_path_factory) -> str:
    return build_tiny_modernbert(str(tmp_path_factory.mktemp("modernbert") / "st"))


@pytest.mark.parametrize("backend", ["cpu_varlen", "torch_native"])
def test_matches_sentence_transformers(modernbert_dir, backend):
    from sentence_transformers import SentenceTransformer

    runner = make_runner(modernbert_dir, attention_backend=backend)  # no flags
    mc = runner.model_config
    assert (mc.architecture, mc.pooling, mc.is_encoder) == ("ModernBertModel", "mean", True)
    windows = [layer.attn.attn.sliding_window for layer in runner.model.layers]
    assert windows == [None, 5, 5]  # |q - k| <= local_attention / 2 = 4
    ids = tokenize_for_runner(modernbert_dir, MIXED_TEXTS)
    assert max(len(x) for x in ids) > 9  # past the local window
    ours = runner.embed(ids)
    ref = SentenceTransformer(modernbert_dir, device="cpu").encode(MIXED_TEXTS, batch_size=8)
    assert relative_error_rows(ours, ref).max() <= 1e-4
    single = np.concatenate([runner.embed([x]) for x in ids])
    assert np.abs(ours - single).max() <= 1e-5


def test_window_and_local_theta_really_apply(modernbert_dir):
    runner = make_runner(modernbert_dir)
    ids = tokenize_for_runner(modernbert_dir, MIXED_TEXTS)
    base = runner.embed(ids)
    longest = int(np.argmax([len(x) for x in ids]))
    attn = runner.model.layers[1].attn.attn
    attn.sliding_window = None
    try:
        assert np.abs(runner.embed(ids)[longest] - base[longest]).max() > 1e-3
    finally:
        attn.sliding_window = 5
    local, full = runner.model.rotary_local, runner.model.rotary_global
    assert not np.allclose(local.cos_sin_cache[5].numpy(), full.cos_sin_cache[5].numpy())


def test_reads_transformers_4_configs():
    old = SimpleNamespace(
        num_hidden_layers=6, global_attn_every_n_layers=3, global_rope_theta=160000.0, local_rope_theta=10000.0
    )
    assert layer_types_of(old) == [FULL, SLIDING, SLIDING, FULL, SLIDING, SLIDING]
    assert (rope_theta_of(old, FULL), rope_theta_of(old, SLIDING)) == (160000.0, 10000.0)
    new = SimpleNamespace(
        layer_types=[FULL, SLIDING],
        rope_parameters={FULL: {"rope_theta": 5.0e5}, SLIDING: {"rope_theta": 2.0e4}},
    )
    assert (rope_theta_of(new, FULL), rope_theta_of(new, SLIDING)) == (5.0e5, 2.0e4)


def test_masked_lm_checkpoint(tmp_path):
    from transformers import ModernBertForMaskedLM

    d = build_tiny_modernbert(str(tmp_path / "mlm"), seed=3, st_pooling="cls")
    ModernBertForMaskedLM.from_pretrained(d).save_pretrained(d)  # model. prefix, head, decoder
    from sentence_transformers import SentenceTransformer

    runner = make_runner(d)
    assert runner.model_config.architecture == "ModernBertForMaskedLM" and runner.model_config.pooling == "cls"
    ours = runner.embed(tokenize_for_runner(d, MIXED_TEXTS))
    ref = SentenceTransformer(d, device="cpu").encode(MIXED_TEXTS)
    assert relative_error_rows(ours, ref).max() <= 1e-4
