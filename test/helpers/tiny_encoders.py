"""Tiny random checkpoints of the encoder families of issue #16: MPNet, ModernBERT, NomicBERT,
and ColBERT heads (bge-m3's colbert_linear.pt, Stanford/PyLate ColBERT).

Each is saved by transformers (and sentence-transformers files written as those libraries write
them), so the reference and our loader read the very same files. Every weight is random
(randomize), so a bias or norm loaded into the wrong place changes the output.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import torch

from test.helpers.tiny_models import build_wordpiece_tokenizer, write_st_pooling
from test.helpers.tiny_task_models import build_roberta_tokenizer, randomize


def build_tiny_mpnet(out_dir: str, seed: int = 0, st_pooling: Optional[str] = "mean", **overrides) -> str:
    """A 2-layer random MPNetModel (hidden 32, 4 heads, 32 relative buckets) with an MPNet-style
    tokenizer (<s>=0, <pad>=1, </s>=2) and, by default, all-mpnet-base-v2's mean + Normalize."""
    from transformers import MPNetConfig, MPNetModel

    os.makedirs(out_dir, exist_ok=True)
    vocab = build_roberta_tokenizer(out_dir)
    cfg = dict(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=514,
        relative_attention_num_buckets=32,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = MPNetModel(MPNetConfig(**cfg), add_pooling_layer=False).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir)
    if st_pooling:
        write_st_pooling(out_dir, cfg["hidden_size"], st_pooling)
    return out_dir


def build_tiny_modernbert(out_dir: str, seed: int = 0, st_pooling: Optional[str] = "mean", **overrides) -> str:
    """A 3-layer random ModernBertModel (hidden 32, 4 heads, GeGLU 48): layer 0 global, layers 1-2
    local with local_attention 8 (|q - k| <= 4), RoPE bases 160k / 10k, norms without bias."""
    from transformers import ModernBertConfig, ModernBertModel

    os.makedirs(out_dir, exist_ok=True)
    vocab = build_wordpiece_tokenizer(out_dir, lowercase=True)  # [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4
    cfg = dict(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=256,
        local_attention=8,
        pad_token_id=0,
        bos_token_id=2,
        cls_token_id=2,
        eos_token_id=3,
        sep_token_id=3,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = ModernBertModel(ModernBertConfig(**cfg)).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir)
    if st_pooling:
        write_st_pooling(out_dir, cfg["hidden_size"], st_pooling)
    return out_dir


def build_tiny_nomic_bert(
    out_dir: str, seed: int = 0, hub_config: bool = True, st_pooling: Optional[str] = "mean"
) -> str:
    """A 2-layer random NomicBERT (hidden 32, 4 heads, SwiGLU 48, rotary base 1000).

    transformers writes the tensors under nomic's names; with `hub_config` the config.json is
    rewritten the way nomic-ai's checkpoints spell it (n_embd, n_head, activation_function,
    rotary_emb_base, auto_map to remote code), which is what users download."""
    from transformers import NomicBertConfig, NomicBertModel

    os.makedirs(out_dir, exist_ok=True)
    vocab = build_wordpiece_tokenizer(out_dir)
    cfg = NomicBertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=512,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = NomicBertModel(cfg).eval()
    randomize(model, seed)
    model.save_pretrained(out_dir)
    if hub_config:
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(nomic_hub_config(len(vocab)), f)
    if st_pooling:
        write_st_pooling(out_dir, 32, st_pooling)
    return out_dir


def nomic_hub_config(vocab: int) -> dict:
    """The fields of nomic-embed-text-v1.5's config.json, at the tiny sizes."""
    return {
        "architectures": ["NomicBertModel"],
        "auto_map": {
            "AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
            "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
        },
        "model_type": "nomic_bert",
        "activation_function": "swiglu",
        "causal": False,
        "layer_norm_epsilon": 1e-12,
        "max_trained_positions": 2048,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "n_embd": 32,
        "n_head": 4,
        "n_inner": 48,
        "n_layer": 2,
        "n_positions": 512,
        "pad_vocab_size_multiple": 64,
        "parallel_block": False,
        "prenorm": False,
        "qkv_proj_bias": False,
        "rotary_emb_base": 1000,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_scaling_factor": None,
        "type_vocab_size": 2,
        "vocab_size": vocab,
    }


# ----- ColBERT / multi-vector heads -----

COLBERT_DIM = 8
COLBERT_QUERY_LENGTH = 12
COLBERT_DOCUMENT_LENGTH = 16


def _tiny_bert(out_dir: str, seed: int, extra_tokens=()):
    from transformers import BertConfig, BertModel

    os.makedirs(out_dir, exist_ok=True)
    vocab = build_wordpiece_tokenizer(out_dir, extra_tokens=extra_tokens)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_act="gelu",
    )
    torch.manual_seed(seed)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    randomize(model, seed)
    return model, cfg


def _projection(seed: int, out: int, hidden: int = 32) -> torch.Tensor:
    return torch.randn(out, hidden, generator=torch.Generator().manual_seed(seed + 7)) * 0.3


def build_tiny_stanford_colbert(out_dir: str, seed: int = 0) -> str:
    """A Stanford-format ColBERT (answerai-colbert-small-v1 / colbertv2.0 layout): HF_ColBERT
    config, `bert.*` tensors plus `linear.weight` [dim, hidden], artifact.metadata settings."""
    from safetensors.torch import save_file

    model, cfg = _tiny_bert(out_dir, seed, extra_tokens=("[unused0]", "[unused1]"))
    state = {f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()}
    state["linear.weight"] = _projection(seed, COLBERT_DIM)
    save_file(state, os.path.join(out_dir, "model.safetensors"))
    config = cfg.to_dict()
    config["architectures"] = ["HF_ColBERT"]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f)
    meta = {
        "query_token_id": "[unused0]",
        "doc_token_id": "[unused1]",
        "query_token": "[Q]",
        "doc_token": "[D]",
        "query_maxlen": COLBERT_QUERY_LENGTH,
        "doc_maxlen": COLBERT_DOCUMENT_LENGTH,
        "dim": COLBERT_DIM,
        "mask_punctuation": True,
        "attend_to_mask_tokens": False,
        "similarity": "cosine",
    }
    with open(os.path.join(out_dir, "artifact.metadata"), "w") as f:
        json.dump(meta, f)
    return out_dir


def build_tiny_pylate(out_dir: str, seed: int = 0, attend_to_expansion: bool = False) -> str:
    """A PyLate-format ColBERT (GTE-ModernColBERT / PyLate-trained layout): a plain BertModel,
    modules.json with pylate.models.Dense, config_sentence_transformers.json with the prefixes."""
    from safetensors.torch import save_file

    model, _ = _tiny_bert(out_dir, seed, extra_tokens=("[Q] ", "[D] "))
    model.save_pretrained(out_dir)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense"},
    ]
    with open(os.path.join(out_dir, "modules.json"), "w") as f:
        json.dump(modules, f)
    os.makedirs(os.path.join(out_dir, "1_Dense"), exist_ok=True)
    dense = {
        "in_features": 32,
        "out_features": COLBERT_DIM,
        "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity",
    }
    with open(os.path.join(out_dir, "1_Dense", "config.json"), "w") as f:
        json.dump(dense, f)
    save_file({"linear.weight": _projection(seed, COLBERT_DIM)}, os.path.join(out_dir, "1_Dense", "model.safetensors"))
    st = {
        "query_prefix": "[Q] ",
        "document_prefix": "[D] ",
        "query_length": COLBERT_QUERY_LENGTH,
        "document_length": COLBERT_DOCUMENT_LENGTH,
        "do_query_expansion": True,
        "attend_to_expansion_tokens": attend_to_expansion,
        "skiplist_words": [".", ",", "!", "?"],
        "similarity_fn_name": "MaxSim",
    }
    with open(os.path.join(out_dir, "config_sentence_transformers.json"), "w") as f:
        json.dump(st, f)
    return out_dir


def write_colbert_linear(out_dir: str, hidden: int, seed: int = 0) -> str:
    """bge-m3's colbert_linear.pt: torch.save of a Linear(hidden, hidden) state dict (with bias)."""
    linear = torch.nn.Linear(hidden, hidden)
    with torch.no_grad():
        linear.weight.copy_(_projection(seed, hidden, hidden))
        linear.bias.copy_(torch.randn(hidden, generator=torch.Generator().manual_seed(seed + 9)) * 0.1)
    path = os.path.join(out_dir, "colbert_linear.pt")
    torch.save(linear.state_dict(), path)
    return path
