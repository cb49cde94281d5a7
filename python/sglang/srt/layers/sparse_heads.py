"""Sparse lexical heads: hidden states -> {token_id: weight} per sequence, as packed tensors.

Both return (indices int32 [N], values float32 [N], offsets int64 [B + 1]): sequence b owns
entries offsets[b]:offsets[b + 1], sorted by token id, all weights > 0. Special tokens ([CLS],
</s>, padding, ...) never appear in the output.

- TokenWeightHead (bge-m3's `sparse_linear.pt`): w_t = relu(linear(h_t)) for each token t, then
  the largest weight per (sequence, token id), as FlagEmbedding's BGE-M3 computes it; special-token
  positions are skipped.
- SpladeHead (SPLADE, a masked-LM checkpoint): log(1 + relu(mlm_logits)) of every token, max- (or
  sum-) pooled over the sequence as sentence-transformers' SpladePooling does (special positions
  take part, as in training), then the special-token ids are dropped from the vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.configs.sentence_transformers import SpladePoolingSpec
from sglang.srt.errors import ConfigError
from sglang.srt.layers.activation import get_activation
from sglang.srt.model_loader.weight_utils import fill_parameters, read_tensors

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

SparseTensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

# [tokens, vocab] float32 logits are computed in chunks of about this many elements (256 MiB).
_LOGIT_CHUNK_ELEMENTS = 1 << 26


def _offsets(rows: torch.Tensor, batch_size: int) -> torch.Tensor:
    offsets = torch.zeros(batch_size + 1, dtype=torch.int64, device=rows.device)
    offsets[1:] = torch.cumsum(torch.bincount(rows, minlength=batch_size), 0)
    return offsets


class TokenWeightHead(nn.Module):
    def __init__(self, hidden_size: int, path: str, special_ids: Sequence[int], vocab_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        self.vocab_size = vocab_size
        self.register_buffer("special_ids", torch.tensor(sorted(set(special_ids)), dtype=torch.long), persistent=False)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise ConfigError(f"Cannot read the sparse head {path}: {e}") from e
        if not isinstance(state, dict):
            raise ConfigError(f"The sparse head {path} is not a state dict of a Linear(hidden, 1)")
        # torch.save(linear.state_dict()) gives weight/bias; some exports keep a module prefix.
        state = {k.rsplit(".", 1)[-1]: v for k, v in state.items()}
        fill_parameters(self, {f"linear.{k}": v for k, v in state.items()}, f"The sparse head {path}")
        self.requires_grad_(False)

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> SparseTensors:
        weights = F.relu(self.linear(hidden.to(self.linear.weight.dtype)).float()).squeeze(-1)  # [T]
        ids = fb.input_ids
        keep = (weights > 0) & ~torch.isin(ids, self.special_ids)
        seq, ids, weights = fb.seq_ids[keep], ids[keep], weights[keep]
        keys, inverse = torch.unique(seq * self.vocab_size + ids, return_inverse=True)  # sorted
        values = torch.zeros(keys.shape[0], dtype=torch.float32, device=hidden.device)
        values.scatter_reduce_(0, inverse, weights, "amax", include_self=False)
        rows = torch.div(keys, self.vocab_size, rounding_mode="floor")
        return (keys - rows * self.vocab_size).to(torch.int32), values, _offsets(rows, fb.batch_size)


class SpladeHead(nn.Module):
    """The masked-LM head (transform -> decoder over the vocabulary) plus SPLADE pooling."""

    # (checkpoint prefix, transform LayerNorm name, activation or None for the config's)
    _NAMING = {"bert": ("cls.predictions.", "transform.LayerNorm", None), "roberta": ("lm_head.", "layer_norm", "gelu")}

    def __init__(
        self, config, naming: str, pooling: SpladePoolingSpec, special_ids: Sequence[int], word_embeddings: torch.Tensor
    ) -> None:
        super().__init__()
        if pooling.pooling_strategy not in ("max", "sum") or pooling.activation not in ("relu", "log1p_relu"):
            raise ConfigError(
                f"SpladePooling with pooling_strategy={pooling.pooling_strategy!r}, "
                f"activation_function={pooling.activation!r} is not supported"
            )
        self.prefix, norm_name, act = self._NAMING[naming]
        self.naming = naming
        hidden = config.hidden_size
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.norm_name = norm_name
        self.act = get_activation(act or config.hidden_act)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size), requires_grad=False)
        # Tied to the backbone's word embeddings unless the checkpoint has its own decoder matrix
        # (a plain tensor, not a parameter of this head).
        self.decoder_weight = word_embeddings.detach()
        self.pooling = pooling
        self.register_buffer("special_ids", torch.tensor(sorted(set(special_ids)), dtype=torch.long), persistent=False)

    def load(self, model_dir: str) -> None:
        tensors = read_tensors(model_dir, (self.prefix,))
        p = self.prefix + ("transform." if self.naming == "bert" else "")
        state = {
            "dense.weight": tensors.get(p + "dense.weight"),
            "dense.bias": tensors.get(p + "dense.bias"),
            "norm.weight": tensors.get(f"{self.prefix}{self.norm_name}.weight"),
            "norm.bias": tensors.get(f"{self.prefix}{self.norm_name}.bias"),
            "bias": tensors.get(self.prefix + "bias", tensors.get(self.prefix + "decoder.bias")),
        }
        fill_parameters(
            self,
            {k: v for k, v in state.items() if v is not None},
            f"The masked-LM (SPLADE) head of the checkpoint in {model_dir}",
        )
        decoder = tensors.get(self.prefix + "decoder.weight")
        if decoder is not None:
            self.decoder_weight = decoder.to(self.dense.weight.device, self.dense.weight.dtype)
        self.requires_grad_(False)

    def _activations(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.act(self.dense(hidden)))
        x = torch.log1p(F.relu(F.linear(h, self.decoder_weight, self.bias).float()))
        return torch.log1p(x) if self.pooling.activation == "log1p_relu" else x

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> SparseTensors:
        vocab = self.bias.shape[0]
        pooled = torch.zeros(fb.batch_size, vocab, dtype=torch.float32, device=hidden.device)
        step = max(1, _LOGIT_CHUNK_ELEMENTS // vocab)
        for start in range(0, hidden.shape[0], step):  # [chunk, vocab] logits at a time
            x = self._activations(hidden[start : start + step])
            seq = fb.seq_ids[start : start + step]
            if self.pooling.pooling_strategy == "max":  # all values >= 0, so 0 is a neutral start
                pooled.scatter_reduce_(0, seq[:, None].expand_as(x), x, "amax", include_self=True)
            else:
                pooled.index_add_(0, seq, x)
        pooled[:, self.special_ids] = 0.0
        rows, cols = pooled.nonzero(as_tuple=True)  # row-major: by sequence, then token id
        return cols.to(torch.int32), pooled[rows, cols], _offsets(rows, fb.batch_size)
