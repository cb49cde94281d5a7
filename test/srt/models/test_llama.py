"""Llama and Mistral through the shared decoder: RoPE scaling, biases, sliding windows."""

from __future__ import annotations

import numpy as np
import pytest

from test.helpers.parity import (
    MIXED_TEXTS as TEXTS,
)
from test.helpers.parity import (
    hf_decoder_embeddings,
    make_runner,
    relative_error_rows,
    tokenize_for_runner,
)
from test.helpers.tiny_models import build_tiny_decoder, build_tiny_llama

ROPE_VARIANTS = {
    "default": {},
    "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    # original_max_position_embeddings of 64 puts head_dim 16's wavelengths in all three bands.
    "llama3": {
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
    },
}


@pytest.mark.parametrize("rope", list(ROPE_VARIANTS))
def test_llama_matches_transformers(tmp_path, rope):
    d = build_tiny_llama(str(tmp_path / "llama"), attention_bias=True, mlp_bias=True, **ROPE_VARIANTS[rope])
    runner = make_runner(d, is_embedding=True)
    ours = runner.embed(tokenize_for_runner(d, TEXTS))
    assert relative_error_rows(ours, hf_decoder_embeddings(d, TEXTS)).max() <= 1e-4


def test_unsupported_rope_scaling_is_a_config_error(tmp_path):
    from sglang.srt.errors import ConfigError

    d = build_tiny_llama(str(tmp_path / "llama"), rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ConfigError, match="RoPE scaling type 'dynamic' is not supported"):
        make_runner(d, is_embedding=True)


def test_mistral_sliding_window_matches_transformers(tmp_path):
    d = build_tiny_decoder(str(tmp_path / "mistral"), "mistral", sliding_window=4)
    runner = make_runner(d, is_embedding=True)
    assert runner.model_config.architecture == "MistralForCausalLM"
    ids = tokenize_for_runner(d, TEXTS)
    ours = runner.embed(ids)
    assert relative_error_rows(ours, hf_decoder_embeddings(d, TEXTS)).max() <= 1e-4
    # The window is really applied: without it the longer texts come out different.
    for layer in runner.model.layers:
        layer.self_attn.attn.sliding_window = None
    unwindowed = runner.embed(ids)
    assert np.abs(unwindowed - ours).max() > 1e-3
