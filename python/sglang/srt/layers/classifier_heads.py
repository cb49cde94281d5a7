"""Sequence-classification heads: a backbone's hidden states -> float32 logits [B, num_labels].

Each reproduces one transformers head and reads its own tensors from the checkpoint (the
backbone's loader skips them):
- "bert_pooler": BertForSequenceClassification, classifier(tanh(pooler.dense(h[CLS])));
- "roberta": (XLM-)RobertaForSequenceClassification, out_proj(tanh(dense(h[<s>]))) (no pooler);
- "score": the decoders' *ForSequenceClassification, score(h[last token that is not padding]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from sglang.srt.errors import ConfigError
from sglang.srt.model_loader.weight_utils import fill_parameters, read_tensors

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch


def _first_tokens(hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
    return hidden.index_select(0, fb.cu_seqlens[:-1].long())


class _Dense(nn.Module):
    """Holds `dense` so parameter names match the checkpoint's (`pooler.dense.weight`, ...)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)


class BertPoolerClassifier(nn.Module):
    prefixes = ("bert.pooler.", "classifier.")

    def __init__(self, config, num_labels: int) -> None:
        super().__init__()
        self.pooler = _Dense(config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, num_labels)

    @staticmethod
    def rename(name: str) -> str:
        return name[len("bert.") :] if name.startswith("bert.") else name

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        return self.classifier(torch.tanh(self.pooler.dense(_first_tokens(hidden, fb)))).float()


class RobertaClassifier(nn.Module):
    prefixes = ("classifier.",)

    def __init__(self, config, num_labels: int) -> None:
        super().__init__()
        self.classifier = _Dense(config.hidden_size)
        self.classifier.out_proj = nn.Linear(config.hidden_size, num_labels)

    @staticmethod
    def rename(name: str) -> str:
        return name

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        x = torch.tanh(self.classifier.dense(_first_tokens(hidden, fb)))
        return self.classifier.out_proj(x).float()


class LastTokenScore(nn.Module):
    """transformers' GenericForSequenceClassification: the rightmost token whose id is not
    `pad_token_id` (position 0 when there is none), or simply the last token without a pad id."""

    prefixes = ("score.",)

    def __init__(self, config, num_labels: int) -> None:
        super().__init__()
        self.score = nn.Linear(config.hidden_size, num_labels, bias=False)
        pad = getattr(config, "pad_token_id", None)
        self.pad_token_id = int(pad) if isinstance(pad, int) else None

    @staticmethod
    def rename(name: str) -> str:
        return name

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        if self.pad_token_id is None:
            rows = fb.cu_seqlens[1:].long() - 1
        else:
            index = torch.arange(hidden.shape[0], device=hidden.device)
            candidates = torch.where(fb.input_ids != self.pad_token_id, index, -1)
            rows = torch.full((fb.batch_size,), -1, dtype=torch.long, device=hidden.device)
            rows.scatter_reduce_(0, fb.seq_ids, candidates, "amax", include_self=True)
            rows = torch.where(rows >= 0, rows, fb.cu_seqlens[:-1].long())
        return self.score(hidden.index_select(0, rows)).float()


_HEADS = {"bert_pooler": BertPoolerClassifier, "roberta": RobertaClassifier, "score": LastTokenScore}


def build_classifier(
    kind: str, config, num_labels: int, model_dir: str, device: torch.device, dtype: torch.dtype
) -> nn.Module:
    """The head named by the registry, filled from the checkpoint, in the model's dtype."""
    if kind not in _HEADS:
        raise ConfigError(f"unknown classifier head '{kind}'")
    cls = _HEADS[kind]
    head = cls(config, num_labels).to(device=device, dtype=dtype).eval().requires_grad_(False)
    tensors = read_tensors(model_dir, cls.prefixes)
    fill_parameters(
        head,
        {cls.rename(n): t for n, t in tensors.items()},
        f"The classification head of the checkpoint in {model_dir}",
    )
    return head
