"""Run our ModelRunner on a checkpoint directory and compare with a reference, vector by vector."""

from __future__ import annotations

import numpy as np
import torch


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def relative_error_rows(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.linalg.norm(ours - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-12)


def make_runner(model_dir: str, **kwargs):
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    kwargs.setdefault("device", "cpu")
    return ModelRunner(ServerArgs(model_path=model_dir, **kwargs))


def hf_pool(hidden: torch.Tensor, mask: torch.Tensor, method: str) -> torch.Tensor:
    """Reference pooling over a padded [B, L, H] batch (right padding)."""
    if method == "cls":
        return hidden[:, 0]
    if method == "lasttoken":
        last = mask.sum(1) - 1
        return hidden[torch.arange(hidden.shape[0]), last]
    if method == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1)
    raise ValueError(method)
