"""RoPE: frequencies against transformers' own initializers, rotation against apply_rotary_pos_emb."""

from __future__ import annotations

import pytest
import torch

from sglang.srt.errors import ConfigError
from sglang.srt.layers.rotary_embedding import RotaryEmbedding, inv_frequencies, rope_parameters

SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    },
}


def _config(scaling=None):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=512,
        num_attention_heads=4,
        head_dim=128,
        rope_theta=500000.0,
        max_position_embeddings=4096,
        rope_scaling=scaling,
    )


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


def _qwen2_vl_text_config():
    from transformers import Qwen2VLConfig

    return Qwen2VLConfig(
        text_config=dict(
            hidden_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6], "rope_theta": 10000.0},
        )
    ).text_config


def test_mrope_matches_transformers_qwen2_vl():
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding, apply_rotary_pos_emb

    from sglang.srt.layers.rotary_embedding import MRotaryEmbedding

    config = _qwen2_vl_text_config()
    rope = MRotaryEmbedding.from_config(config, 32, max_positions=512)
    gen = torch.Generator().manual_seed(0)
    positions = torch.randint(0, 500, (3, 9), generator=gen)  # t, h, w rows all different
    q = torch.randn(9, 4 * 32, generator=gen)
    cos, sin = Qwen2VLRotaryEmbedding(config)(q, positions[:, None, :])  # [3, batch 1, 9]
    q_ref, _ = apply_rotary_pos_emb(q.view(1, 9, 4, 32), q.view(1, 9, 4, 32), cos, sin, unsqueeze_dim=2)
    torch.testing.assert_close(rope.rotate(q, rope.lookup(positions)), q_ref.reshape(9, -1), rtol=1e-5, atol=1e-5)


def test_mrope_with_equal_rows_is_plain_rope():
    from sglang.srt.layers.rotary_embedding import MRotaryEmbedding

    rope = MRotaryEmbedding.from_config(_qwen2_vl_text_config(), 32, max_positions=512)
    positions = torch.tensor([0, 3, 7, 500])
    torch.testing.assert_close(rope.lookup(positions.expand(3, -1)), rope.lookup(positions), rtol=0, atol=0)


def test_mrope_section_must_cover_half_the_head():
    from sglang.srt.layers.rotary_embedding import MRotaryEmbedding

    with pytest.raises(ConfigError, match="summing to head_dim / 2 = 16"):
        MRotaryEmbedding(32, 64, {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 4, 4]})


def test_pre_v5_mrope_scaling_means_default_frequencies():
    from types import SimpleNamespace

    old = SimpleNamespace(rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]}, rope_theta=1000000.0)
    params = rope_parameters(old)
    assert params["rope_type"] == "default" and params["mrope_section"] == [16, 24, 24]
    torch.testing.assert_close(inv_frequencies(128, params), 1.0 / (1e6 ** (torch.arange(0, 128, 2).float() / 128)))
