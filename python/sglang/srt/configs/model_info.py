"""ModelInfo: what the scheduler tells the rest of the server about the model it loaded.

Made once by ModelRunner.model_info() after the weights are in, sent to the server process through
the READY pipe, handed to every HTTP worker, and read by the tokenizer side (context length,
vocabulary, image inputs), the routes (output kind, labels, Matryoshka widths) and `/model_info`,
which renders `to_dict()`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.llm_reranker import RerankPrompt


class OutputKind(str, Enum):
    """What /v1/embeddings (and Engine.encode) answer with for this model."""

    DENSE = "dense"  # one float vector per input
    SPARSE = "sparse"  # {token_id: weight} per input (SPLADE, --sparse-head)
    LOGITS = "logits"  # a classifier's or cross-encoder's scores, one per label
    MULTI_VECTOR = "multi_vector"  # one vector per token (ColBERT checkpoints)


class ImagePath(str, Enum):
    """How a model takes images, decided once from its architecture (`image_path_of`); the value is
    what `/model_info` shows as `vision.kind`."""

    LM_TOKENS = "qwen2_vl"  # image patches become tokens of the language model (Qwen2-VL / GME)
    TOWER = "image_text"  # a separate image tower: each item is a text or an image (CLIP, SigLIP)


def image_path_of(spec: Any) -> Optional[ImagePath]:
    """The image path of a model registry entry (configs/model_registry.ModelSpec); None: text only."""
    if spec.image_text:
        return ImagePath.TOWER
    return ImagePath.LM_TOKENS if spec.image_inputs else None


class Capability(str, Enum):
    """What a served model can answer. Computed once, when its ModelInfo is made; every route asks
    `ModelInfo.capabilities` instead of re-deriving it from the output kind, labels and heads."""

    EMBED = "embed"  # one pooled dense vector per input (TEI /embed, Cohere /v2/embed)
    CLASSIFY = "classify"  # class logits per input (/v1/classify, TEI /predict)
    RERANK = "rerank"  # one relevance logit per (query, document) pair: a one-label cross-encoder
    SPARSE = "sparse"  # {token_id: weight} rows from a sparse head (/embed_sparse)
    MULTI_VECTOR = "multi_vector"  # a ColBERT head's per-token vectors; /v1/rerank ranks by MaxSim
    TOKEN_EMBED = "token_embed"  # every token's hidden state (/embed_all, vLLM's token_embed)
    IMAGE = "image"  # image inputs (see ModelInfo.image_path for which way they go)


@dataclass(frozen=True)
class VisionInfo:
    """What the tokenizer side needs to turn images into model inputs."""

    model_dir: str  # where the image processor's preprocessor_config.json lives
    image_token_id: Optional[int] = None  # Qwen2-VL
    spatial_merge_size: Optional[int] = None  # Qwen2-VL
    kind: ImagePath = ImagePath.LM_TOKENS
    # Image towers (ImagePath.TOWER): patch size in pixels, and whether a class token leads the
    # patches (CLIP); an image counts 1 + patches (or patches) tokens.
    patch_size: Optional[int] = None
    class_token: bool = False
    image_tokens: Optional[int] = None  # every image's sequence length, where fixed (not SigLIP 2)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ImagePath(self.kind))  # "image_text" as given in JSON -> the enum


@dataclass(frozen=True, kw_only=True)
class ReplicaInfo:
    """Where one scheduler replica (`--dp-size`) runs."""

    dp_rank: int
    device: str  # "cpu", "cuda:1"
    cpu_cores: Optional[tuple[int, ...]] = None  # the cores it may use (CPU)
    cpu_threads: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "cpu_cores": _list(self.cpu_cores)}


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    model_path: str
    served_model_name: str
    architecture: str
    embedding_dim: int  # vector width (a classifier: its number of labels; sparse: the vocabulary)
    is_matryoshka: bool = False  # requests may ask for fewer `dimensions`
    matryoshka_dimensions: Optional[tuple[int, ...]] = None  # the widths they may ask for (None: any)
    pooling: str
    normalize: bool
    max_input_length: int  # the served context length, in tokens
    vocab_size: int
    do_lower_case: bool = False  # the tokenizer side lower-cases text first (sentence-transformers)
    dtype: str
    quantization: Optional[str] = None  # "int8": the linear layers run in int8 (--quantization)
    int8_activation_bits: Optional[int] = None  # 8 with VNNI / AMX, 7 without
    device: str
    attention_backend: str
    cuda_graph: bool = False
    cpu_threads: Optional[int] = None
    cpu_bf16_units: Optional[str] = None
    vision: Optional[VisionInfo] = None  # None: the model takes no images
    embeddings_output: OutputKind = OutputKind.DENSE
    sparse_head: Optional[str] = None  # "linear" (bge-m3) or "splade": /embed_sparse is served
    labels: Optional[tuple[str, ...]] = None  # a classifier's class names by index
    problem_type: Optional[str] = None  # config.json's, for how /v1/classify turns logits into probabilities
    pair_token_types: bool = False  # text pairs (/v1/rerank) carry token_type_ids
    # The multi-vector (ColBERT) head, None: none; its vectors' width; the backbone's hidden size
    # (the width of /embed_all's per-token hidden states).
    colbert: Optional[ColbertConfig] = None
    multi_vector_dim: Optional[int] = None
    hidden_size: Optional[int] = None
    # Prompts (configs/prompts.py): (name, prefix) pairs requests may name, the prefix of requests
    # naming none, and whether pooling covers the prompt's tokens (sentence-transformers' include_prompt).
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt: Optional[str] = None
    prompt_in_pooling: bool = True
    # Data parallelism: `device` and `cpu_threads` above are replica 0's; every replica's are here.
    dp_size: int = 1
    replicas: tuple[ReplicaInfo, ...] = ()
    memory: Optional[dict[str, Any]] = None  # the scheduler's allocator set-up (utils/allocator.py)
    # LLM rerankers (Qwen3-Reranker): the prompt /v1/rerank wraps each pair in (None: pairs as given).
    rerank_prompt: Optional[RerankPrompt] = None
    # Derived from the fields above in __post_init__ (also after dataclasses.replace), never passed.
    capabilities: frozenset[Capability] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", derive_capabilities(self))

    @property
    def is_classifier(self) -> bool:
        return Capability.CLASSIFY in self.capabilities

    @property
    def image_path(self) -> Optional[ImagePath]:
        """None: the model takes no images."""
        return self.vision.kind if self.vision is not None else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (lists, strings), as `/model_info` and Engine.get_model_info() show them."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["matryoshka_dimensions"] = _list(self.matryoshka_dimensions)
        out["labels"] = _list(self.labels)
        out["vision"] = dataclasses.asdict(self.vision) if self.vision is not None else None
        if self.vision is not None:
            out["vision"]["kind"] = self.vision.kind.value
        out["capabilities"] = sorted(c.value for c in self.capabilities)
        out["embeddings_output"] = self.embeddings_output.value
        out["rerank_prompt"] = self.rerank_prompt.name if self.rerank_prompt is not None else None
        if self.colbert is not None:
            colbert = dataclasses.asdict(self.colbert)
            out["colbert"] = {k: list(v) if isinstance(v, tuple) else v for k, v in colbert.items()}
        out["prompts"] = dict(self.prompts)
        out["replicas"] = [r.to_dict() for r in self.replicas]
        return out


def derive_capabilities(info: ModelInfo) -> frozenset[Capability]:
    """The one place that reads the output kind, labels, heads and vision info as capabilities."""
    caps: set[Capability] = set()
    kind = info.embeddings_output
    if kind is OutputKind.DENSE:
        caps.add(Capability.EMBED)
    if kind is OutputKind.LOGITS:
        caps.add(Capability.CLASSIFY)
        if len(info.labels or ()) == 1:
            caps.add(Capability.RERANK)
    if info.sparse_head is not None:
        caps.add(Capability.SPARSE)
    if info.colbert is not None and kind is not OutputKind.LOGITS:
        caps.add(Capability.MULTI_VECTOR)
    if kind is not OutputKind.LOGITS and info.image_path is not ImagePath.TOWER:
        caps.add(Capability.TOKEN_EMBED)
    if info.vision is not None:
        caps.add(Capability.IMAGE)
    return frozenset(caps)


def _list(values: Optional[tuple]) -> Optional[list]:
    return list(values) if values is not None else None
