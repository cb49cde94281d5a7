"""sentence-transformers' `similarity` / `similarity_pairwise` for sglang.SentenceTransformer.

The scores its four functions give, as torch tensors: `cosine` (rows L2-normalized, then dot
products), `dot`, and the negated `euclidean` / `manhattan` distances, so that a higher score is
always closer. `similarity(a, b)` is the [len(a), len(b)] matrix (a 1-D vector counts as one row);
`similarity_pairwise(a, b)` scores a[i] with b[i]. Inputs are numpy arrays, tensors or lists of
either; floats narrower than float32 and integer (quantized) vectors are scored in float32.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import numpy as np
import torch

SIMILARITY_FN_NAMES = ("cosine", "dot", "euclidean", "manhattan")


def check_similarity_fn_name(name: Any) -> str:
    """The name as a string (a SimilarityFunction enum gives its value); ValueError for others."""
    value = getattr(name, "value", name)
    if value not in SIMILARITY_FN_NAMES:
        raise ValueError(f"similarity_fn_name {value!r} is not supported; use one of {list(SIMILARITY_FN_NAMES)}.")
    return value


def checkpoint_similarity_fn_name(model_dir: str) -> Optional[str]:
    """config_sentence_transformers.json's `similarity_fn_name` (None: not set)."""
    path = os.path.join(model_dir, "config_sentence_transformers.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("similarity_fn_name")


def _tensor(x: Any) -> torch.Tensor:
    if isinstance(x, list):
        x = torch.stack([torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v for v in x])
    t = torch.as_tensor(x)
    if not torch.is_floating_point(t) or torch.finfo(t.dtype).bits < 32:
        t = t.to(torch.float32)
    return t


def _rows(x: Any) -> torch.Tensor:
    t = _tensor(x)
    return t.unsqueeze(0) if t.dim() == 1 else t


def similarity(a: Any, b: Any, name: str) -> torch.Tensor:
    """[len(a), len(b)] scores under `name`."""
    a, b = _rows(a), _rows(b)
    if name == "cosine":
        a, b = torch.nn.functional.normalize(a, p=2, dim=-1), torch.nn.functional.normalize(b, p=2, dim=-1)
    if name in ("cosine", "dot"):
        return a @ b.T
    return -torch.cdist(a, b, p=2.0 if name == "euclidean" else 1.0)


def similarity_pairwise(a: Any, b: Any, name: str) -> torch.Tensor:
    """Scores of a[i] with b[i] under `name`."""
    a, b = _tensor(a), _tensor(b)
    if name == "cosine":
        a, b = torch.nn.functional.normalize(a, p=2, dim=-1), torch.nn.functional.normalize(b, p=2, dim=-1)
    if name in ("cosine", "dot"):
        return (a * b).sum(dim=-1)
    if name == "manhattan":
        return -(a - b).abs().sum(dim=-1)
    return -torch.linalg.vector_norm(a - b, dim=-1)
