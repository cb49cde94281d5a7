"""nomic-embed-text checkpoints' config.json, read whatever library wrote it.

nomic-ai's own checkpoints (nomic-embed-text-v1 / v1.5) name their fields GPT-2 style (`n_embd`,
`n_head`, `n_layer`, `n_inner`, `n_positions`, `rotary_emb_base`, `activation_function`,
`layer_norm_epsilon`) and point `auto_map` at modelling code in another hub repository
(trust_remote_code). transformers >= 5.x has a NomicBertConfig with BERT-style names, which loads
those files but leaves the GPT-2-style fields aside and its own at their defaults. Older
transformers do not know `nomic_bert` at all. So:
- `read_plain_config` gives a config object straight from config.json where AutoConfig cannot;
- `normalize_nomic_config` copies the GPT-2-style fields onto the BERT-style names the engine
  reads (hidden_size, num_attention_heads, ..., max_position_embeddings), and refuses the
  variants the engine does not implement with one line each.
"""

from __future__ import annotations

import json
import os

from sglang.srt.errors import ConfigError

NOMIC_MODEL_TYPE = "nomic_bert"
# GPT-2-style field -> the name the engine reads.
_RENAMES = {
    "n_embd": "hidden_size",
    "n_head": "num_attention_heads",
    "n_layer": "num_hidden_layers",
    "n_inner": "intermediate_size",
    "n_positions": "max_position_embeddings",
    "layer_norm_epsilon": "layer_norm_eps",
}
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu", "silu": "silu", "gelu": "gelu"}


def read_plain_config(model_dir: str):
    """config.json as a transformers PretrainedConfig, without a model-type lookup."""
    from transformers import PretrainedConfig

    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    return PretrainedConfig(**raw)


def declared_model_type(model_dir: str):
    try:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError):
        return None


def normalize_nomic_config(config):
    """The config with BERT-style sizes filled from nomic's GPT-2-style fields (where present)."""
    raw = config.to_dict() if hasattr(config, "to_dict") else dict(vars(config))
    for src, dst in _RENAMES.items():
        if raw.get(src) is not None:
            setattr(config, dst, raw[src])
    if raw.get("n_embd") is not None and raw.get("n_inner") is None:
        config.intermediate_size = 4 * int(raw["n_embd"])  # nomic's default MLP width
    if raw.get("rotary_emb_base") is not None:
        config.rotary_emb_base = float(raw["rotary_emb_base"])
    else:
        params = raw.get("rope_parameters") or {}
        config.rotary_emb_base = float(params.get("rope_theta") or 1000.0)
    act = raw.get("activation_function") or raw.get("hidden_act") or "swiglu"
    if act not in GATED_ACTIVATIONS:
        raise ConfigError(f"NomicBERT with activation '{act}' is not supported (supported: swiglu, geglu)")
    config.gated_activation = GATED_ACTIVATIONS[act]
    unsupported = [
        (raw.get("rotary_emb_fraction", 1.0) not in (None, 1.0), "rotary_emb_fraction < 1"),
        (bool(raw.get("rotary_emb_interleaved")), "interleaved rotary embeddings"),
        (raw.get("rotary_scaling_factor") not in (None, 1, 1.0), "rotary_scaling_factor (dynamic NTK)"),
        (bool(raw.get("prenorm")), "pre-norm layers"),
        (bool(raw.get("parallel_block")), "parallel blocks"),
        (bool(raw.get("causal")), "causal attention"),
    ]
    for bad, what in unsupported:
        if bad:
            raise ConfigError(f"NomicBERT checkpoints with {what} are not supported")
    return config
