"""What a checkpoint answers with: dense vectors, sparse {token_id: weight} maps, or class logits.

Decided once at start-up (ModelConfig.from_server_args), before any process is spawned:
- a *ForSequenceClassification architecture answers with its logits (`/v1/embeddings` returns the
  `[num_labels]` vector; `/v1/classify` and `/v1/rerank` build on it);
- `--sparse-head PATH|splade` adds a sparse head and makes `/v1/embeddings` answer sparse, as
  SGLang does with its sparse-head setting;
- without the flag, a sentence-transformers `SpladePooling` module makes a SPLADE model (sparse
  only), and a `sparse_linear.pt` beside the weights (bge-m3) adds a sparse head that
  `/embed_sparse` serves while `/v1/embeddings` stays dense;
- an LLM reranker (Qwen3-Reranker, configs/llm_reranker.py) answers with logits too: a head of a
  few LM-head rows, and a prompt that the tokenizer side wraps every (query, document) pair in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Optional

from sglang.srt.configs.colbert_config import ColbertConfig, read_colbert_config
from sglang.srt.configs.llm_reranker import LlmReranker, RerankPrompt, TokenScoreConfig
from sglang.srt.configs.model_info import OutputKind
from sglang.srt.configs.sentence_transformers import SentenceTransformersInfo, SpladePoolingSpec
from sglang.srt.errors import ConfigError

BGE_M3_SPARSE_FILE = "sparse_linear.pt"


@dataclass(frozen=True)
class SparseHeadConfig:
    kind: str  # "linear": bge-m3's Linear(hidden, 1) file; "splade": the checkpoint's masked-LM head
    path: Optional[str] = None  # the linear head's file
    mlm_naming: Optional[str] = None  # splade: "bert" (cls.predictions.*) or "roberta" (lm_head.*)
    pooling: SpladePoolingSpec = field(default_factory=SpladePoolingSpec)


@dataclass(frozen=True)
class OutputConfig:
    embeddings_output: OutputKind = OutputKind.DENSE  # what /v1/embeddings (and Engine.encode) return
    sparse: Optional[SparseHeadConfig] = None
    classifier: Optional[str] = None  # registry head kind for *ForSequenceClassification
    labels: tuple[str, ...] = ()  # class names by index (config.json's id2label)
    problem_type: Optional[str] = None  # config.json's, for how /v1/classify turns logits into probs
    # Text pairs (/v1/rerank) carry token_type_ids: the model has a token-type table with a row for
    # the second segment (BERT), unlike RoBERTa / XLM-R (one row) and decoders (none).
    pair_token_types: bool = False
    colbert: Optional[ColbertConfig] = None  # a multi-vector head (configs/colbert_config.py)
    token_scores: Optional[TokenScoreConfig] = None  # classifier "token_logits": LM-head rows (LLM rerankers)
    rerank_prompt: Optional[RerankPrompt] = None  # what each (query, document) pair is wrapped in

    @property
    def has_dense(self) -> bool:
        return self.embeddings_output not in (OutputKind.SPARSE, OutputKind.MULTI_VECTOR)

    def info(self) -> dict:
        """The fields of ModelInfo that the HTTP process routes on."""
        return {
            "embeddings_output": self.embeddings_output,
            "sparse_head": self.sparse.kind if self.sparse else None,
            "labels": self.labels if self.classifier else None,
            "problem_type": self.problem_type,
            "pair_token_types": self.pair_token_types,
            "colbert": self.colbert,
            "rerank_prompt": self.rerank_prompt,
        }


def _labels(config) -> tuple[str, ...]:
    num = int(getattr(config, "num_labels", 0) or 0)
    id2label = getattr(config, "id2label", None) or {}
    by_index = {int(k): str(v) for k, v in id2label.items()}
    return tuple(by_index.get(i, f"LABEL_{i}") for i in range(num))


def _linear_head_path(requested: str, model_dir: str) -> str:
    path = os.path.expanduser(requested)
    if not os.path.isabs(path):
        path = os.path.join(model_dir, path)
    if not os.path.isfile(path):
        raise ConfigError(
            f"--sparse-head {requested}: no such file (relative paths are taken from the model directory {model_dir})"
        )
    return path


def _splade(spec, architecture: str, st_info: SentenceTransformersInfo) -> SparseHeadConfig:
    if spec.mlm_head is None:
        raise ConfigError(
            f"SPLADE needs a masked-LM head; {architecture} checkpoints have none "
            "(supported: BERT, RoBERTa and XLM-RoBERTa families)"
        )
    return SparseHeadConfig("splade", mlm_naming=spec.mlm_head, pooling=st_info.splade or SpladePoolingSpec())


def resolve_output(
    sparse_head: Optional[str],
    model_dir: str,
    text_config,
    spec,
    architecture: str,
    st_info: SentenceTransformersInfo,
    reranker: Optional[LlmReranker] = None,
) -> OutputConfig:
    if reranker is not None and reranker.token_scores is not None:
        return _token_scores_output(sparse_head, architecture, reranker)
    colbert = None if spec.is_classifier else read_colbert_config(model_dir, [architecture], st_info)
    if colbert is not None and colbert.replaces_dense and not sparse_head:
        return OutputConfig(OutputKind.MULTI_VECTOR, colbert=colbert)
    out = _resolve_single_vector(sparse_head, model_dir, text_config, spec, architecture, st_info)
    if reranker is not None:  # a converted LLM reranker: its own score head, plus the prompt
        return replace(out, rerank_prompt=reranker.prompt)
    if colbert is not None and out.embeddings_output is OutputKind.DENSE:
        out = replace(out, colbert=colbert)  # bge-m3: dense answers, multi-vector on request
    return out


def _resolve_single_vector(
    sparse_head: Optional[str], model_dir: str, text_config, spec, architecture: str, st_info: SentenceTransformersInfo
) -> OutputConfig:
    if spec.is_classifier:
        if sparse_head:
            raise ConfigError(f"--sparse-head does not apply to {architecture}, a classification checkpoint")
        labels = _labels(text_config)
        if not labels:
            raise ConfigError(f"{architecture} checkpoint in {model_dir} declares no labels (num_labels)")
        return OutputConfig(
            OutputKind.LOGITS,
            classifier=spec.classifier,
            labels=labels,
            problem_type=getattr(text_config, "problem_type", None),
            pair_token_types=int(getattr(text_config, "type_vocab_size", 0) or 0) > 1,
        )
    if sparse_head == "splade":
        return OutputConfig(OutputKind.SPARSE, sparse=_splade(spec, architecture, st_info))
    if sparse_head:
        return OutputConfig(
            OutputKind.SPARSE, sparse=SparseHeadConfig("linear", _linear_head_path(sparse_head, model_dir))
        )
    if st_info.splade is not None:
        return OutputConfig(OutputKind.SPARSE, sparse=_splade(spec, architecture, st_info))
    bundled = os.path.join(model_dir, BGE_M3_SPARSE_FILE)
    if os.path.isfile(bundled):
        return OutputConfig(OutputKind.DENSE, sparse=SparseHeadConfig("linear", bundled))
    return OutputConfig(OutputKind.DENSE)


def _token_scores_output(sparse_head: Optional[str], architecture: str, reranker: LlmReranker) -> OutputConfig:
    if sparse_head:
        raise ConfigError(f"--sparse-head does not apply to {architecture}, served as an LLM reranker")
    return OutputConfig(
        OutputKind.LOGITS,
        classifier="token_logits",
        labels=reranker.token_scores.labels,
        token_scores=reranker.token_scores,
        rerank_prompt=reranker.prompt,
    )
