"""Read what a sentence-transformers checkpoint says about pooling, normalization and length."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

POOLING_METHODS = ("cls", "mean", "lasttoken", "max")


@dataclass(frozen=True)
class DenseLayerSpec:
    """One sentence-transformers `Dense` module (EmbeddingGemma's 2_Dense, 3_Dense, ...)."""

    path: str
    in_features: int
    out_features: int
    bias: bool
    activation: str
    use_residual: bool = False  # sentence-transformers >= 5.7: out = act(linear(x)) + x (or a projection of x)


@dataclass(frozen=True)
class SpladePoolingSpec:
    """A sentence-transformers `SpladePooling` module: the checkpoint is a SPLADE sparse encoder."""

    pooling_strategy: str = "max"  # max | sum over the sequence's tokens
    activation: str = "relu"  # relu: log1p(relu(x)); log1p_relu: log1p(log1p(relu(x)))


@dataclass(frozen=True)
class SentenceTransformersInfo:
    pooling: Optional[str] = None  # None: the checkpoint does not say
    normalize: bool = False
    max_seq_length: Optional[int] = None
    do_lower_case: bool = False
    include_prompt: bool = True
    dense_layers: tuple = field(default_factory=tuple)
    splade: Optional[SpladePoolingSpec] = None
    # config_sentence_transformers.json: named prompts (prefixes) and the one used by default.
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt_name: Optional[str] = None

    @property
    def declares_pooling(self) -> bool:
        return self.pooling is not None


def _read_json(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def pooling_from_st_config(cfg: dict) -> str:
    """Map a `1_Pooling/config.json` onto one of POOLING_METHODS."""
    mode = cfg.get("pooling_mode")
    if isinstance(mode, str):
        mode = {"mean": "mean", "cls": "cls", "lasttoken": "lasttoken", "max": "max"}.get(mode, mode)
        if mode in POOLING_METHODS:
            return mode
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if cfg.get("pooling_mode_lasttoken"):
        return "lasttoken"
    if cfg.get("pooling_mode_mean_tokens"):
        return "mean"
    if cfg.get("pooling_mode_max_tokens"):
        return "max"
    raise ValueError(f"unsupported sentence-transformers pooling config: {cfg}")


def read_sentence_transformers_info(model_dir: str) -> SentenceTransformersInfo:
    modules = _read_json(os.path.join(model_dir, "modules.json")) or []
    pooling = None
    normalize = False
    include_prompt = True
    dense: list[DenseLayerSpec] = []
    splade: Optional[SpladePoolingSpec] = None
    for module in modules:
        kind = module.get("type", "")
        sub = os.path.join(model_dir, module.get("path", ""))
        if kind.endswith(".Pooling"):
            cfg = _read_json(os.path.join(sub, "config.json")) or {}
            pooling = pooling_from_st_config(cfg)
            include_prompt = cfg.get("include_prompt", True)
        elif kind.endswith(".Normalize"):
            normalize = True
        elif kind.endswith(".Dense"):
            cfg = _read_json(os.path.join(sub, "config.json")) or {}
            dense.append(
                DenseLayerSpec(
                    path=sub,
                    in_features=int(cfg["in_features"]),
                    out_features=int(cfg["out_features"]),
                    bias=bool(cfg.get("bias", True)),
                    # sentence-transformers' Dense defaults to Tanh when its config names no activation.
                    activation=str(cfg.get("activation_function", "torch.nn.modules.activation.Tanh")),
                    use_residual=bool(cfg.get("use_residual", False)),
                )
            )
        elif kind.endswith(".SpladePooling"):
            cfg = _read_json(os.path.join(sub, "config.json")) or {}
            splade = SpladePoolingSpec(
                pooling_strategy=str(cfg.get("pooling_strategy", "max")),
                activation=str(cfg.get("activation_function", "relu")),
            )
    prompts, default_prompt_name = _read_prompts(model_dir)
    st_cfg = _read_json(os.path.join(model_dir, "sentence_bert_config.json")) or {}
    max_len = st_cfg.get("max_seq_length")
    return SentenceTransformersInfo(
        pooling=pooling,
        normalize=normalize,
        max_seq_length=int(max_len) if max_len else None,
        do_lower_case=bool(st_cfg.get("do_lower_case", False)),
        include_prompt=include_prompt,
        dense_layers=tuple(dense),
        splade=splade,
        prompts=prompts,
        default_prompt_name=default_prompt_name,
    )


def _read_prompts(model_dir: str) -> tuple[tuple[tuple[str, str], ...], Optional[str]]:
    """(name, prefix) pairs and default_prompt_name from config_sentence_transformers.json."""
    cfg = _read_json(os.path.join(model_dir, "config_sentence_transformers.json")) or {}
    raw = cfg.get("prompts") or {}
    prompts = tuple((str(k), str(v)) for k, v in raw.items() if isinstance(raw, dict) and isinstance(v, str))
    default = cfg.get("default_prompt_name")
    return prompts, (str(default) if default else None)
