"""The output head: what the runner makes of a batch's final hidden states.

Chosen once at start-up from ModelConfig.output:
- dense: pooling, then the sentence-transformers Dense modules (PooledEmbeddingHead); the rows
  leave unnormalized: the renderer normalizes them as each input's OutputSpec says (the
  checkpoint's Normalize module decides its default, frontend/output_options.py);
- logits: a classification head (layers/classifier_heads.py), or an LLM reranker's few LM-head
  rows (layers/token_score_head.py);
- sparse: bge-m3's token-weight head or SPLADE (layers/sparse_heads.py), run only when some input
  of the batch asked for a sparse format; a model may have a dense head and a sparse one (bge-m3);
- per-token rows (layers/token_outputs.py): hidden states (/embed_all) or a multi-vector ColBERT
  head, run only for the inputs that ask for them.
Heads run eagerly after the backbone (outside any CUDA graph).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.classifier_heads import build_classifier
from sglang.srt.layers.pooler import Pooler
from sglang.srt.layers.sparse_heads import SpladeHead, TokenWeightHead
from sglang.srt.layers.st_dense import STDenseStack
from sglang.srt.layers.token_outputs import MultiVectorHead, TokenOutputs
from sglang.srt.layers.token_score_head import build_token_score_head, token_ids
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.forward_io import ForwardOutput
from sglang.srt.server_args import ServerArgs


class PooledEmbeddingHead(nn.Module):
    """Pool (float32) -> sentence-transformers Dense modules: SentenceTransformer.encode's order, up to
    its Normalize module, which the renderer applies (renderer/vector_render.py)."""

    def __init__(self, model_config: ModelConfig) -> None:
        super().__init__()
        dense = model_config.st_info.dense_layers
        self.pooler = Pooler(model_config.pooling, normalize=False)
        self.dense = STDenseStack(dense) if dense else None

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        x = self.pooler(hidden, fb)
        if self.dense is not None:
            x = self.dense(x)
        return x


class ModelPooledHead(nn.Module):
    """Models that pool themselves (CLIP / SigLIP text towers, pooling "model"): their
    `pool_text(hidden, fb)` in float32 (normalized by the renderer, as every dense row)."""

    def __init__(self, pool_text) -> None:
        super().__init__()
        self.pool_text = pool_text  # a bound method of the model (not registered as a submodule)

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        return self.pool_text(hidden, fb).float()


def special_token_ids(server_args: ServerArgs) -> list[int]:
    """Ids a sparse output must never contain ([CLS], </s>, padding, ...), from the tokenizer."""
    from sglang.srt.utils.hf_tokenizer import load_tokenizer

    tokenizer = load_tokenizer(server_args.tokenizer_path, server_args.trust_remote_code)
    return sorted(set(int(i) for i in tokenizer.all_special_ids))


def _build_sparse(mc: ModelConfig, model: nn.Module, device: torch.device, server_args: ServerArgs) -> nn.Module:
    cfg = mc.output.sparse
    special = special_token_ids(server_args)
    if cfg.kind == "linear":
        return TokenWeightHead(mc.hidden_size, cfg.path, special, mc.vocab_size).to(device, mc.dtype).eval()
    word_embeddings = model.embeddings.word_embeddings.weight
    head = SpladeHead(mc.hf_config, cfg.mlm_naming, cfg.pooling, special, word_embeddings)
    head = head.to(device, mc.dtype).eval()
    head.load(mc.model_path)
    return head


def _build_tokens(mc: ModelConfig, device: torch.device, server_args: ServerArgs) -> TokenOutputs:
    cfg = mc.output.colbert
    if cfg is None:
        return TokenOutputs(None)
    head = MultiVectorHead(cfg, mc.hidden_size, mc.model_path, mc.st_info.dense_layers).to(device).eval()
    skip = []
    if cfg.skiplist_words:
        from sglang.srt.utils.hf_tokenizer import load_tokenizer

        tokenizer = load_tokenizer(server_args.tokenizer_path, server_args.trust_remote_code)
        unk = tokenizer.unk_token_id
        skip = [i for i in tokenizer.convert_tokens_to_ids(list(cfg.skiplist_words)) if i is not None and i != unk]
    return TokenOutputs(head, skip)


def _build_token_scores(mc: ModelConfig, device: torch.device, server_args: ServerArgs) -> nn.Module:
    from sglang.srt.utils.hf_tokenizer import load_tokenizer

    cfg = mc.output.token_scores
    tokenizer = load_tokenizer(server_args.tokenizer_path, server_args.trust_remote_code)
    return build_token_score_head(mc.model_path, mc.hf_config, token_ids(tokenizer, cfg.tokens), cfg.two_way, device)


class OutputHead:
    def __init__(self, dense: Optional[nn.Module], sparse: Optional[nn.Module], tokens: Optional[TokenOutputs] = None):
        self.dense_head = dense
        self.sparse_head = sparse
        self.tokens = tokens or TokenOutputs(None)  # per-token rows: hidden states, multi-vector head

    @classmethod
    def build(
        cls, model_config: ModelConfig, model: nn.Module, device: torch.device, server_args: ServerArgs
    ) -> "OutputHead":
        out = model_config.output
        dense: Optional[nn.Module] = None
        if out.token_scores is not None:
            dense = _build_token_scores(model_config, device, server_args)
        elif out.classifier is not None:
            text_config = (
                model_config.hf_config.get_text_config()
                if hasattr(model_config.hf_config, "get_text_config")
                else model_config.hf_config
            )
            dense = build_classifier(
                out.classifier, text_config, len(out.labels), model_config.model_path, device, model_config.dtype
            )
        elif model_config.pooling == "model":
            dense = ModelPooledHead(model.pool_text)
        elif out.has_dense:
            dense = PooledEmbeddingHead(model_config).to(device)
        sparse = _build_sparse(model_config, model, device, server_args) if out.sparse is not None else None
        return cls(dense, sparse, _build_tokens(model_config, device, server_args))

    def dense(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """float32 [B, dim] vectors or logits; [B, 0] for a model that only has a sparse head."""
        if self.dense_head is None:
            return hidden.new_zeros((fb.batch_size, 0), dtype=torch.float32)
        return self.dense_head(hidden, fb)

    def run(
        self,
        hidden: torch.Tensor,
        fb: ForwardBatch,
        sparse_rows: Sequence[bool],
        token_rows: Optional[Sequence[Optional[str]]] = None,
    ) -> ForwardOutput:
        """The dense output for the batch, plus sparse rows and per-token rows (token_rows[i]: a
        layers/token_outputs kind, or None) when any input asked for them."""
        out = ForwardOutput(self.dense(hidden, fb).to("cpu", torch.float32).numpy())
        wants_tokens = token_rows is not None and any(k is not None for k in token_rows)
        if any(sparse_rows):
            if self.sparse_head is None:  # the HTTP side refuses sparse formats for such models
                raise ValueError("this model has no sparse head")
            out.sparse_indices, out.sparse_values, out.sparse_offsets = (
                t.cpu().numpy() for t in self.sparse_head(hidden, fb)
            )
        if wants_tokens:
            t = self.tokens.run(hidden, fb, token_rows)
            out.token_values, out.token_ids = t.values.cpu().numpy(), t.token_ids.cpu().numpy()
            out.token_offsets, out.token_value_offsets = t.offsets.numpy(), t.value_offsets.numpy()
        return out
