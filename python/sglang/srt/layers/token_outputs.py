"""Per-token outputs: every token's final hidden state (TEI's /embed_all) or a ColBERT-style
multi-vector head (configs/colbert_config.py), for the rows of a batch that ask for them.

`TokenOutputs.run` returns the rows packed end to end, the way sparse rows travel: float32 values
(flat), the token id each vector belongs to, and per-row offsets, so a batch mixing pooled,
hidden-state and multi-vector rows needs no padding and one buffer.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.sentence_transformers import DenseLayerSpec
from sglang.srt.errors import ConfigError
from sglang.srt.layers.st_dense import STDenseStack
from sglang.srt.model_loader.weight_utils import fill_parameters, read_tensors
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_HIDDEN, TOKENS_QUERY

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch


@dataclass
class TokenTensors:
    values: torch.Tensor  # float32 [E]: every row's [n_i, dim_i] vectors, flattened, end to end
    token_ids: torch.Tensor  # int32 [N]: the token of each vector
    offsets: torch.Tensor  # int64 [B + 1]: row i owns token_ids[offsets[i]:offsets[i + 1]]
    value_offsets: torch.Tensor  # int64 [B + 1]: and values[value_offsets[i]:value_offsets[i + 1]]


def _load_linear_file(path: str, hidden: int) -> nn.Linear:
    """bge-m3's colbert_linear.pt: torch.save(Linear.state_dict()), perhaps under a module prefix."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConfigError(f"Cannot read the multi-vector head {path}: {e}") from e
    if not isinstance(state, dict) or not any(k.endswith("weight") for k in state):
        raise ConfigError(f"The multi-vector head {path} is not a state dict of a Linear layer")
    state = {k.rsplit(".", 1)[-1]: v for k, v in state.items()}
    linear = nn.Linear(hidden, state["weight"].shape[0], bias="bias" in state, dtype=torch.float32)
    fill_parameters(linear, state, f"The multi-vector head {path}")
    return linear


def _load_checkpoint_linear(model_dir: str, hidden: int) -> nn.Linear:
    """Stanford ColBERT's `linear.weight` [dim, hidden] (no bias), read from the checkpoint."""
    tensors = {k.removeprefix("model."): v for k, v in read_tensors(model_dir, ("linear.", "model.linear.")).items()}
    if "linear.weight" not in tensors:
        raise ConfigError(f"The ColBERT checkpoint in {model_dir} has no `linear.weight` projection")
    weight = tensors["linear.weight"]
    linear = nn.Linear(hidden, weight.shape[0], bias="linear.bias" in tensors, dtype=torch.float32)
    fill_parameters(linear, {k.removeprefix("linear."): v for k, v in tensors.items()}, "The ColBERT projection")
    return linear


class MultiVectorHead(nn.Module):
    """hidden [n, H] -> L2-normalized float32 vectors [n, dim]."""

    def __init__(self, cfg: ColbertConfig, hidden: int, model_dir: str, dense: Sequence[DenseLayerSpec]) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.projection == "file":
            self.projection: nn.Module = _load_linear_file(cfg.path or os.path.join(model_dir, ""), hidden)
        elif cfg.projection == "checkpoint":
            self.projection = _load_checkpoint_linear(model_dir, hidden)
        else:
            if not dense:
                raise ConfigError(f"The PyLate checkpoint in {model_dir} has no Dense module")
            self.projection = STDenseStack(dense)
        self.requires_grad_(False)
        self.dim = int(self.projection(torch.zeros(1, hidden)).shape[-1])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.projection(hidden.float()), p=2, dim=-1)


class TokenOutputs:
    def __init__(self, head: Optional[MultiVectorHead], skiplist_ids: Sequence[int] = ()) -> None:
        self.head = head
        self.skiplist = torch.tensor(sorted(set(skiplist_ids)), dtype=torch.long)

    def _rows(self, fb: ForwardBatch, kind: str, start: int, end: int) -> torch.Tensor:
        """Packed indices of the tokens [start, end) of one row that get a vector."""
        idx = torch.arange(start, end, device=fb.input_ids.device)
        if kind == TOKENS_HIDDEN:
            return idx
        if self.head.cfg.skip_first_token:
            idx = idx[1:]
        if kind == TOKENS_DOCUMENT and self.skiplist.numel():
            skip = self.skiplist.to(idx.device)
            idx = idx[~torch.isin(fb.input_ids[idx], skip)]
        return idx

    def run(self, hidden: torch.Tensor, fb: ForwardBatch, kinds: Sequence[Optional[str]]) -> TokenTensors:
        if self.head is None and any(k in (TOKENS_QUERY, TOKENS_DOCUMENT) for k in kinds):
            raise ValueError("this model has no multi-vector head")  # the HTTP side refuses such requests
        pieces: list[Optional[torch.Tensor]] = [None] * len(kinds)
        ids: list[torch.Tensor] = []
        empty = torch.zeros(0, dtype=torch.long, device=hidden.device)
        starts = list(itertools.accumulate(fb.seq_lens_cpu, initial=0))
        rows = [self._rows(fb, k, starts[i], starts[i + 1]) if k is not None else empty for i, k in enumerate(kinds)]
        multi = [i for i, k in enumerate(kinds) if k in (TOKENS_QUERY, TOKENS_DOCUMENT)]
        if multi:  # one projection for every multi-vector row of the batch
            projected = self.head(hidden.index_select(0, torch.cat([rows[i] for i in multi])))
            for i, part in zip(multi, projected.split([len(rows[i]) for i in multi])):
                pieces[i] = part
        for i, k in enumerate(kinds):
            if k == TOKENS_HIDDEN:
                pieces[i] = hidden.index_select(0, rows[i]).float()
            ids.append(fb.input_ids.index_select(0, rows[i]))
        counts = torch.tensor([len(r) for r in rows], dtype=torch.int64)
        sizes = torch.tensor([p.numel() if p is not None else 0 for p in pieces], dtype=torch.int64)
        flat = [p.reshape(-1) for p in pieces if p is not None]
        return TokenTensors(
            values=torch.cat(flat) if flat else hidden.new_zeros(0, dtype=torch.float32),
            token_ids=torch.cat(ids).to(torch.int32),
            offsets=torch.cat([counts.new_zeros(1), counts.cumsum(0)]),
            value_offsets=torch.cat([sizes.new_zeros(1), sizes.cumsum(0)]),
        )
