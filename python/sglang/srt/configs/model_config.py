"""What the engine needs to know about a checkpoint: architecture, sizes, pooling, context length."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Optional

import torch

from sglang.srt.configs.chat_template import load_chat_template
from sglang.srt.configs.llm_reranker import is_rerank_prompt_name, resolve_llm_reranker
from sglang.srt.configs.model_info import OutputKind
from sglang.srt.configs.nomic_bert_config import (
    NOMIC_MODEL_TYPE,
    declared_model_type,
    normalize_nomic_config,
    read_plain_config,
)
from sglang.srt.configs.output_config import OutputConfig, resolve_output
from sglang.srt.configs.pooler_overrides import check_chunk_count, resolve_pooling
from sglang.srt.configs.prompts import default_prompt, known_prompts
from sglang.srt.configs.sentence_transformers import (
    SentenceTransformersInfo,
    read_sentence_transformers_info,
)
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

NOT_EMBEDDING_MESSAGE = (
    "This model does not appear to be an embedding model by default. Please add `--is-embedding` "
    "when launching the server or try another model."
)

_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
}


def load_hf_config(model_dir: str, trust_remote_code: bool, overrides: dict):
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    except ValueError as e:
        msg = str(e)
        if declared_model_type(model_dir) == NOMIC_MODEL_TYPE:  # transformers without NomicBERT
            config = read_plain_config(model_dir)
            return _apply_overrides(normalize_nomic_config(config), overrides)
        if "trust_remote_code" in msg:
            raise ConfigError(
                f"The checkpoint at {model_dir} ships custom code; add --trust-remote-code to load it"
            ) from e
        raise ConfigError(f"Could not read the model config in {model_dir}: {msg.splitlines()[0]}") from e
    except OSError as e:
        raise ConfigError(f"No usable config.json in {model_dir}: {str(e).splitlines()[0]}") from e
    except Exception as e:  # e.g. transformers' strict config validation: not a ValueError
        reason = str(e.__cause__ or e).strip().splitlines() or [type(e).__name__]
        raise ConfigError(f"Could not read the model config in {model_dir}: {reason[0]}") from e
    if getattr(config, "model_type", None) == NOMIC_MODEL_TYPE:
        config = normalize_nomic_config(config)
    return _apply_overrides(config, overrides)


def _apply_overrides(config, overrides: dict):
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@dataclass
class ModelConfig:
    model_path: str
    hf_config: object
    architecture: str
    hidden_size: int
    vocab_size: int
    context_length: int
    pooling: str
    normalize: bool
    dtype: torch.dtype
    st_info: SentenceTransformersInfo
    is_encoder: bool
    # Matryoshka: whether requests may ask for fewer `dimensions`, and which widths they may ask for
    # (None: any width from 1 to embedding_dim). See matryoshka_settings.
    is_matryoshka: bool = False
    matryoshka_dimensions: Optional[list[int]] = None
    output: OutputConfig = field(default_factory=OutputConfig)  # dense / sparse / logits
    # Named prompts (config_sentence_transformers.json plus the standard empty query/document)
    # and the prefix requests naming none get (--default-prompt(-name) or the checkpoint's default).
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt: Optional[str] = None
    projection_dim: Optional[int] = None  # CLIP / SigLIP: the shared text-image space's width

    @property
    def embedding_dim(self) -> int:
        if self.output.embeddings_output is OutputKind.LOGITS:
            return len(self.output.labels)
        if self.output.embeddings_output is OutputKind.SPARSE:
            return self.vocab_size  # the sparse vectors' index space
        if self.output.embeddings_output is OutputKind.MULTI_VECTOR:
            return self.output.colbert.dim or self.hidden_size  # the runner reports the head's real width
        if self.projection_dim is not None:
            return self.projection_dim
        dense = self.st_info.dense_layers
        return dense[-1].out_features if dense else self.hidden_size

    @classmethod
    def from_server_args(cls, args: ServerArgs, model_dir: str, device: str) -> "ModelConfig":
        from sglang.srt.configs.model_registry import ModelRegistry

        hf_config = load_hf_config(model_dir, args.trust_remote_code, args.model_override_args)
        architectures = list(getattr(hf_config, "architectures", None) or [])
        architectures = architectures or ModelRegistry.architectures_for_model_type(
            getattr(hf_config, "model_type", None)
        )
        if not architectures:
            raise ConfigError(f"config.json in {model_dir} names no architecture")
        architecture = ModelRegistry.resolve(architectures)
        spec = ModelRegistry.spec(architecture)
        reranker = resolve_llm_reranker(
            architecture, spec.module == "decoder", hf_config, (args.model_path, model_dir), args.chat_template
        )
        if reranker is not None and reranker.token_scores is not None:
            spec = replace(spec, classifier="token_logits")  # LM-head rows, not the registry's head
        st_info = read_sentence_transformers_info(model_dir)
        # Vision-language configs (Qwen2-VL) keep the decoder's sizes in a nested text config.
        text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        # Encoders, bidirectional decoders (EmbeddingGemma) and classifiers need no flag.
        is_encoder = spec.is_bidirectional(text_config)
        if not (is_encoder or spec.is_classifier or args.is_embedding or st_info.declares_pooling):
            raise ConfigError(NOT_EMBEDDING_MESSAGE)
        output = resolve_output(args.sparse_head, model_dir, text_config, spec, architecture, st_info, reranker)

        pooling = "model" if spec.image_text else st_info.pooling or spec.default_pooling_for(text_config)
        # Without sentence-transformers files we follow the model family's convention; with them,
        # exactly what sentence-transformers would do, so vectors match its `encode`. Logits never.
        normalize = st_info.normalize if st_info.declares_pooling else output.embeddings_output is not OutputKind.LOGITS
        dense = output.embeddings_output is OutputKind.DENSE  # --pooler-config / --max-embed-len
        pooling, normalize = resolve_pooling(args, pooling, normalize, dense)
        hidden = text_config.hidden_size
        config = cls(
            model_path=model_dir,
            hf_config=hf_config,
            architecture=architecture,
            hidden_size=int(hidden),
            vocab_size=int(getattr(text_config, "vocab_size")),
            context_length=_context_length(args.context_length, text_config, st_info, spec),
            pooling=pooling,
            normalize=normalize,
            dtype=_resolve_dtype(args.dtype, hf_config, device),
            st_info=st_info,
            is_encoder=is_encoder,
            output=output,
            projection_dim=image_text_dim(hf_config) if spec.image_text else None,
        )
        check_chunk_count(args, config.context_length)
        config.prompts = known_prompts(st_info.prompts)
        config.default_prompt = default_prompt(
            config.prompts, st_info.default_prompt_name, args.default_prompt_name, args.default_prompt
        )
        config.is_matryoshka, config.matryoshka_dimensions = matryoshka_settings(hf_config, config.embedding_dim)
        return config


def image_text_dim(hf_config) -> int:
    """Width of a CLIP / SigLIP model's shared space: CLIP's projection_dim; SigLIP's text head
    (projection_size) and pooled image width, which must agree."""
    if hasattr(hf_config, "projection_dim"):
        return int(hf_config.projection_dim)
    text = hf_config.text_config
    text_dim = int(getattr(text, "projection_size", None) or text.hidden_size)
    image_dim = int(hf_config.vision_config.hidden_size)
    if text_dim != image_dim:
        raise ConfigError(f"The text tower embeds into {text_dim} dimensions but the image tower into {image_dim}")
    return text_dim


def check_model(args: ServerArgs, model_dir: Optional[str] = None) -> ModelConfig:
    """Resolve the checkpoint (unless the caller did: `model_dir`) and read its config in the
    calling process.

    Run before any child process runs, so that an unknown --chat-template, an uncached hub id, an
    unsupported architecture, a missing --is-embedding or --trust-remote-code ends start-up with one
    ConfigError line.
    """
    from sglang.srt.utils.hub import resolve_model_path

    if args.chat_template is not None and not is_rerank_prompt_name(args.chat_template):
        load_chat_template(args.chat_template)  # an unknown name or a bad file
    if model_dir is None:
        model_dir = resolve_model_path(args.model_path, args.revision, args.download_dir)
    return ModelConfig.from_server_args(args, model_dir, device="cpu")


def matryoshka_settings(hf_config, width: int) -> tuple[bool, Optional[list[int]]]:
    """(is_matryoshka, allowed widths) from `matryoshka_dimensions` / `is_matryoshka` in the config
    (config.json or --json-model-override-args). A list makes a model Matryoshka and limits
    requests to its widths, also when `is_matryoshka` is true (SGLang's rule); `is_matryoshka: true`
    without a list allows any width up to the embedding size."""
    flag = getattr(hf_config, "is_matryoshka", None)
    dims = getattr(hf_config, "matryoshka_dimensions", None)
    if flag is not None and not isinstance(flag, bool):
        raise ConfigError(f"is_matryoshka must be true or false, not {flag!r}")
    if dims is not None:
        valid = (
            isinstance(dims, (list, tuple))
            and len(dims) > 0
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
        )
        if not valid:
            raise ConfigError(f"matryoshka_dimensions must be a non-empty list of positive integers, not {dims!r}")
        if max(dims) > width:  # SGLang's own documented example lists 1536 for a 1024-wide model
            logger.warning(
                "matryoshka_dimensions %s lists widths above the model's embedding size %d; requests for them get 400",
                dims,
                width,
            )
        dims = sorted(set(dims))
    return bool(flag) or dims is not None, dims


def _context_length(requested: Optional[int], hf_config, st_info: SentenceTransformersInfo, spec) -> int:
    position_limit = getattr(hf_config, "max_position_embeddings", None)
    if position_limit is not None:
        position_limit = int(position_limit) - spec.position_offset(hf_config)
    if requested is not None:
        if position_limit is not None and requested > position_limit:
            if spec.absolute_positions:
                raise ConfigError(
                    f"--context-length {requested} exceeds the model's {position_limit} position embeddings"
                )
            logger.warning(
                "--context-length %d is beyond the %d positions the model was trained on", requested, position_limit
            )
        return requested
    candidates = [x for x in (st_info.max_seq_length, position_limit) if x]
    if not candidates:
        raise ConfigError("Cannot tell the model's context length; pass --context-length")
    return min(candidates)


def _resolve_dtype(requested: str, hf_config, device: str) -> torch.dtype:
    if requested != "auto":
        return _DTYPES[requested]
    if device == "cpu":
        return torch.float32
    declared = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if isinstance(declared, str):
        declared = _DTYPES.get(declared)
    if declared in (torch.float16, torch.bfloat16):
        return declared
    return torch.bfloat16
