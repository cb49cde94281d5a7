"""RoPE: frequencies against transformers' own initializers, rotation against apply_rotary_pos_emb."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.layers.rotary_embedding import RotaryEmbedding, inv_frequencies, rope_parameters
from sglang.srt.server_args import ConfigError

SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 1024},
}


def _config(scaling=None):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=128, rope_theta=500000.0,
                       max_position_embeddings=4096, rope_scaling=scaling)


@pytest.mark.parametrize("kind", ["default", "linear", "llama3"])
def test_frequencies_match_transformers(kind):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _config(SCALINGS.get(kind))
    params = rope_parameters(config)
    assert params["rope_type"] == kind and params["rope_theta"] == 500000.0
    ours = inv_frequencies(128, params)
    if kind == "default":
        ref = 1.0 / (500000.0 ** (torch.arange(0, 128, 2).float() / 128))
    else:
        ref, _ = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    torch.testing.assert_close(ours, ref.float(), rtol=1e-6, atol=0)


def test_rotation_matches_transformers():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = _config(SCALINGS["llama3"])
    rope = RotaryEmbedding.from_config(config, 128, max_positions=3000)
    positions = torch.tensor([0, 1, 2, 700, 2999])
    q = torch.randn(5, 4 * 128)
    k = torch.randn(5, 2 * 128)
    cos_sin = rope.lookup(positions)
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None])
    q_ref, k_ref = apply_rotary_pos_emb(q.view(1, 5, 4, 128), k.view(1, 5, 2, 128), cos, sin, unsqueeze_dim=2)
    torch.testing.assert_close(rope.rotate(q, cos_sin), q_ref.reshape(5, -1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rope.rotate(k, cos_sin), k_ref.reshape(5, -1), rtol=1e-5, atol=1e-5)


def test_unknown_scaling_is_a_config_error():
    with pytest.raises(ConfigError, match="'yarn' is not supported"):
        inv_frequencies(64, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0})
