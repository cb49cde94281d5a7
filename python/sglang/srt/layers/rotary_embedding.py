"""Rotary position embeddings (RoPE) for decoder-style models, computed in float32.

The cos/sin table is built once for every position the server may see; a batch then costs one
`index_select` on its packed positions, shared by all layers (no host syncs, so it can sit inside a
captured CUDA graph).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Sequence

import torch
from torch import nn

from sglang.srt.errors import ConfigError

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def rope_parameters(config) -> dict:
    """`rope_type`, `rope_theta` and scaling keys from a HF config, old (`rope_scaling` +
    `rope_theta`, transformers 4.x) or new (`rope_parameters`, transformers 5) style."""
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    params.setdefault("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    params["rope_type"] = params.get("rope_type") or params.get("type") or "default"
    if params["rope_type"] == "mrope":  # Qwen2-VL before transformers 5: plain frequencies, 3-D positions
        params["rope_type"] = "default"
    return params


def inv_frequencies(head_dim: int, params: dict) -> torch.Tensor:
    """Per-pair inverse frequencies [head_dim / 2] in float32, with the checkpoint's scaling."""
    rope_type = params["rope_type"]
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(
            f"RoPE scaling type '{rope_type}' is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ConfigError("partial rotary embeddings (partial_rotary_factor < 1) are not supported")
    base = float(params["rope_theta"])
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if rope_type == "linear":
        return inv_freq / float(params["factor"])
    if rope_type == "llama3":
        return _llama3_scaling(inv_freq, params)
    return inv_freq


def _llama3_scaling(inv_freq: torch.Tensor, params: dict) -> torch.Tensor:
    """Llama 3.1: stretch long wavelengths by `factor`, keep short ones, blend in between."""
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_len = float(params["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, blended, scaled)


class RotaryEmbedding(nn.Module):
    """Neox-style RoPE (rotate the two halves of each head), as Llama / Qwen / Mistral use."""

    def __init__(self, head_dim: int, max_positions: int, params: dict) -> None:
        super().__init__()
        self.head_dim = head_dim
        inv_freq = inv_frequencies(head_dim, params)
        positions = torch.arange(max_positions, dtype=torch.float32, device=inv_freq.device)
        freqs = torch.outer(positions, inv_freq.to(positions.device))
        # [P, head_dim]: cos of every pair, then sin of every pair. float32 whatever the model dtype.
        cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1)
        self.register_buffer("cos_sin_cache", cache.to(torch.float32), persistent=False)

    @classmethod
    def from_config(cls, config, head_dim: int, max_positions: Optional[int] = None) -> "RotaryEmbedding":
        return cls(head_dim, max_positions or int(config.max_position_embeddings), rope_parameters(config))

    def lookup(self, positions: torch.Tensor) -> torch.Tensor:
        """[T, head_dim] cos|sin rows for the batch's packed positions (once per batch)."""
        return self.cos_sin_cache.index_select(0, positions)

    def rotate(self, x: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
        """x: [T, heads * head_dim] -> the same shape and dtype, rotated per position."""
        return apply_rotary(x, cos_sin, self.head_dim)


def run_local_global(
    layers: Sequence[nn.Module], hidden: torch.Tensor, fb: ForwardBatch, local: RotaryEmbedding, full: RotaryEmbedding
) -> torch.Tensor:
    """Run `layers` in order, each with the RoPE table of its kind: `local` for a sliding-window
    layer (`layer.sliding`), `full` for the others; each table is looked up once per batch. For the
    models that give the two kinds their own RoPE base (Gemma 3, ModernBERT)."""
    tables = {True: (local.lookup(fb.positions), local), False: (full.lookup(fb.positions), full)}
    for layer in layers:
        cos_sin, rotary = tables[bool(layer.sliding)]
        hidden = layer(hidden, cos_sin, rotary, fb)
    return hidden


def apply_rotary(x: torch.Tensor, cos_sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Neox-style rotation of x [T, heads * head_dim] by cos_sin [T, head_dim] (cos | sin per pair),
    in float32; shared by the decoders' RoPE and the Qwen2-VL vision tower's 2-D RoPE."""
    t = x.shape[0]
    xf = x.reshape(t, -1, head_dim).float()
    cos, sin = cos_sin.unsqueeze(1).chunk(2, dim=-1)
    x1, x2 = xf.chunk(2, dim=-1)
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return out.reshape(t, -1).to(x.dtype)


class MRotaryEmbedding(RotaryEmbedding):
    """Qwen2-VL's multimodal RoPE (M-RoPE): each token has a (temporal, height, width) position and
    the rotary pairs are split into three sections (`mrope_section`, summing to head_dim / 2), each
    turned by one of the three coordinates.

    Text tokens have three equal coordinates, which makes M-RoPE exactly plain RoPE: a batch
    without images keeps 1-D positions [T] (the ordinary lookup, CUDA-graph friendly); a batch with
    images passes positions [3, T] and pays for three lookups and one gather.
    """

    def __init__(self, head_dim: int, max_positions: int, params: dict) -> None:
        super().__init__(head_dim, max_positions, params)
        section = [int(s) for s in params.get("mrope_section") or ()]
        if len(section) != 3 or sum(section) != head_dim // 2:
            raise ConfigError(
                f"mrope_section {section} must be three numbers summing to head_dim / 2 = {head_dim // 2}"
            )
        # Which coordinate (0: t, 1: h, 2: w) turns each column of a cos|sin row.
        per_pair = torch.repeat_interleave(torch.arange(3), torch.tensor(section))
        self.register_buffer("section_of_column", torch.cat([per_pair, per_pair]), persistent=False)

    def lookup(self, positions: torch.Tensor) -> torch.Tensor:
        if positions.dim() == 1:
            return super().lookup(positions)
        rows = self.cos_sin_cache[positions]  # [3, T, head_dim]
        index = self.section_of_column.view(1, 1, -1).expand(1, rows.shape[1], -1)
        return rows.gather(0, index).squeeze(0)
