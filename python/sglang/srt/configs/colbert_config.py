"""ColBERT-style multi-vector heads: which one a checkpoint has, and how its inputs are built.

Three layouts are recognised without flags:
- bge-m3: `colbert_linear.pt` beside the weights (a Linear(hidden, hidden) state dict). Every token
  but the first ([CLS]) gets normalize(colbert_linear(h)); FlagEmbedding scores a pair by MaxSim
  averaged over the query's vectors. The model stays a dense embedding model; multi-vector output
  is asked for per request.
- Stanford ColBERT (`architectures: ["HF_ColBERT"]`, e.g. colbert-ir/colbertv2.0,
  answerdotai/answerai-colbert-small-v1): BERT plus `linear.weight` (no bias) in the checkpoint,
  settings in `artifact.metadata` (query_token_id / doc_token_id markers, query_maxlen, doc_maxlen,
  attend_to_mask_tokens).
- PyLate (`pylate.models.Dense` in modules.json, or `query_prefix` in
  config_sentence_transformers.json): a sentence-transformers Transformer + Dense pipeline with the
  same settings in config_sentence_transformers.json.
For the last two the checkpoint's answer is multi-vector: queries are `[CLS] <query marker> ...
[SEP]`, padded with [MASK] up to query_length (query expansion; the [MASK] tokens are queries but
not keys unless attend_to_expansion_tokens), documents `[CLS] <document marker> ... [SEP]`
truncated to document_length with punctuation tokens (skiplist_words) dropped from the output,
every vector L2-normalized; MaxSim sums over the query's vectors (ColBERT, PyLate).
"""

from __future__ import annotations

import json
import os
import string
from dataclasses import dataclass, field
from typing import Optional

from sglang.srt.configs.sentence_transformers import SentenceTransformersInfo

BGE_M3_COLBERT_FILE = "colbert_linear.pt"
STANFORD_ARCHITECTURE = "HF_ColBERT"
STANFORD_METADATA = "artifact.metadata"
# PyLate's and Stanford's defaults where a checkpoint leaves a setting out.
DEFAULT_QUERY_LENGTH = 32
DEFAULT_DOCUMENT_LENGTH = 180


@dataclass(frozen=True)
class ColbertConfig:
    projection: str  # "file" (bge-m3's .pt), "checkpoint" (HF_ColBERT's linear.weight), "st_dense" (PyLate)
    path: Optional[str] = None  # projection == "file": the state dict
    dim: Optional[int] = None  # vector width, where the checkpoint's files say it up front
    skip_first_token: bool = False  # bge-m3: no vector for [CLS]
    query_marker: Optional[str] = None  # token inserted after the first token of a query
    document_marker: Optional[str] = None
    query_length: Optional[int] = None  # queries: truncated / padded (expansion) to this many tokens
    document_length: Optional[int] = None  # documents: truncated to this many tokens
    query_expansion: bool = False  # pad queries with [MASK] up to query_length
    attend_to_expansion: bool = False  # the [MASK] padding is also attended to (a key)
    skiplist_words: tuple[str, ...] = field(default_factory=tuple)  # document tokens with no vector
    maxsim: str = "sum"  # how MaxSim reduces over query vectors: "sum" (ColBERT) or "mean" (bge-m3)

    @property
    def replaces_dense(self) -> bool:
        """The checkpoint is a ColBERT model: multi-vector is its answer (not a per-request extra)."""
        return self.projection != "file"


def _read_json(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _pylate_modules(model_dir: str) -> bool:
    modules = _read_json(os.path.join(model_dir, "modules.json")) or []
    return any(str(m.get("type", "")).startswith("pylate.") for m in modules)


def _settings(
    source: dict, keys: dict[str, str], defaults: dict
) -> dict:  # source keys -> ColbertConfig field names, first present wins
    out = dict(defaults)
    for src, dst in keys.items():
        if source.get(src) is not None:
            out[dst] = source[src]
    return out


def read_colbert_config(
    model_dir: str, architectures: list[str], st_info: SentenceTransformersInfo
) -> Optional[ColbertConfig]:
    """The checkpoint's multi-vector head, or None."""
    st_cfg = _read_json(os.path.join(model_dir, "config_sentence_transformers.json")) or {}
    pylate = _pylate_modules(model_dir) or "query_prefix" in st_cfg
    stanford = STANFORD_ARCHITECTURE in architectures
    if not (pylate or stanford):
        bundled = os.path.join(model_dir, BGE_M3_COLBERT_FILE)
        if os.path.isfile(bundled):
            return ColbertConfig("file", path=bundled, skip_first_token=True, maxsim="mean")
        return None
    common = dict(
        query_length=DEFAULT_QUERY_LENGTH,
        document_length=DEFAULT_DOCUMENT_LENGTH,
        query_expansion=True,
        attend_to_expansion=False,
        skiplist_words=tuple(string.punctuation),
        maxsim="sum",
    )
    if pylate:
        dims = [d.out_features for d in st_info.dense_layers]
        settings = _settings(
            st_cfg,
            {
                "query_prefix": "query_marker",
                "document_prefix": "document_marker",
                "query_length": "query_length",
                "document_length": "document_length",
                "do_query_expansion": "query_expansion",
                "attend_to_expansion_tokens": "attend_to_expansion",
                "skiplist_words": "skiplist_words",
            },
            {**common, "query_marker": "[Q] ", "document_marker": "[D] "},
        )
        projection, dim = "st_dense", (dims[-1] if dims else None)
    else:
        meta = _read_json(os.path.join(model_dir, STANFORD_METADATA)) or {}
        settings = _settings(
            meta,
            {
                "query_token_id": "query_marker",
                "doc_token_id": "document_marker",
                "query_maxlen": "query_length",
                "doc_maxlen": "document_length",
                "attend_to_mask_tokens": "attend_to_expansion",
            },
            {**common, "query_marker": "[unused0]", "document_marker": "[unused1]"},
        )
        if meta.get("mask_punctuation") is False:
            settings["skiplist_words"] = ()
        projection, dim = "checkpoint", meta.get("dim")
    if not settings["query_expansion"]:
        settings["attend_to_expansion"] = False
    settings["skiplist_words"] = tuple(settings["skiplist_words"])
    for key in ("query_marker", "document_marker"):
        settings[key] = settings[key] or None  # "" means no marker
    return ColbertConfig(projection, dim=int(dim) if dim else None, **settings)
