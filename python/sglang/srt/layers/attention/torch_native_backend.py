"""CPU / reference attention with torch's scaled_dot_product_attention over packed sequences.

Linear layers run on the packed tokens; only attention needs a [batch, heads, len, dim] layout.
Per batch we sort the sequences by length and cut them into groups whose padding stays under
`max_padding`: each group is one SDPA call over a [group, len] grid, and a group of one sequence is
a plain view of the packed tokens. With the default `max_padding=0`, only sequences of identical
length share a call, so there is no padding and no mask at all; padding the whole batch to its
longest sequence was several times slower on mixed lengths (quadratic waste, and the masked SDPA
path is slower on CPU). benchmark/bench_attention_cpu.py measures the options; benchmark/NOTES.md
keeps the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F

from sglang.srt.layers.attention.base import AttentionBackend

if TYPE_CHECKING:
    from sglang.srt.layers.attention.layer import AttentionLayer
    from sglang.srt.layers.attention.position_bias import PositionBias
    from sglang.srt.model_executor.forward_batch import ForwardBatch


@dataclass
class AttnGroup:
    """Sequences attended together in one padded SDPA call."""

    num_seqs: int
    max_len: int
    span: Optional[tuple[int, int]]  # a lone sequence: its [start, end) in the packed tokens
    gather: Optional[torch.Tensor] = None  # [num_seqs * max_len] packed-token index per grid slot
    scatter: Optional[torch.Tensor] = None  # [n_real] packed index of each real token, grid order
    real_slots: Optional[torch.Tensor] = None  # [n_real] grid slot of each real token (None: no pads)
    key_valid: Optional[torch.Tensor] = None  # [num_seqs, max_len] bool (None: every slot is a key)
    masks: dict = field(default_factory=dict)  # (causal, window, bias) -> mask, built once per batch


def plan_groups(lengths: list[int], max_padding: float = 0.0) -> list[list[int]]:
    """Sequence indices grouped longest-first so that padded slots <= (1 + max_padding) * real."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    real = 0
    for i in order:
        if groups:
            cur = groups[-1]
            longest = lengths[cur[0]]
            if (len(cur) + 1) * longest <= (1.0 + max_padding) * (real + lengths[i]):
                cur.append(i)
                real += lengths[i]
                continue
        groups.append([i])
        real = lengths[i]
    return groups


class TorchNativeAttnBackend(AttentionBackend):
    name = "torch_native"
    supports_position_bias = True
    supports_key_lens = True

    def __init__(self, max_padding: float = 0.0) -> None:
        self.max_padding = max_padding

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        lens = forward_batch.seq_lens_cpu
        keys = forward_batch.key_lens_cpu or lens
        starts = [0] * len(lens)
        for i in range(1, len(lens)):
            starts[i] = starts[i - 1] + lens[i - 1]
        device = forward_batch.input_ids.device
        groups = []
        for members in plan_groups(lens, self.max_padding):
            if len(members) == 1:
                b = members[0]
                s = starts[b]
                limited = None
                if keys[b] < lens[b]:  # a lone sequence whose trailing tokens are not keys
                    limited = (torch.arange(lens[b], device=device) < keys[b])[None]
                groups.append(AttnGroup(1, lens[b], (s, s + lens[b]), key_valid=limited))
                continue
            groups.append(self._padded_group(members, lens, keys, starts, device))
        forward_batch.attn_metadata = groups

    @staticmethod
    def _padded_group(members: list[int], lens: list[int], keys: list[int], starts: list[int], device) -> AttnGroup:
        g, lmax = len(members), lens[members[0]]
        seq_len = torch.tensor([lens[i] for i in members], dtype=torch.long)
        key_len = torch.tensor([keys[i] for i in members], dtype=torch.long)
        seq_start = torch.tensor([starts[i] for i in members], dtype=torch.long)
        pos = torch.arange(lmax, dtype=torch.long)
        valid = pos[None, :] < seq_len[:, None]  # [g, lmax]
        # Pad slots read the sequence's first token: finite values, masked out as keys, dropped as queries.
        gather = seq_start[:, None] + torch.where(valid, pos[None, :], torch.zeros_like(pos)[None, :])
        slots = torch.nonzero(valid.flatten(), as_tuple=False).squeeze(1)
        padded = bool((~valid).any())
        key_valid = pos[None, :] < key_len[:, None]
        return AttnGroup(
            g,
            lmax,
            None,
            gather=gather.flatten().to(device),
            scatter=gather.flatten()[slots].to(device),
            real_slots=slots.to(device) if padded else None,
            key_valid=key_valid.to(device) if bool((~key_valid).any()) else None,
        )

    @staticmethod
    def _mask(
        group: AttnGroup, layer: "AttentionLayer", device, bias: Optional["PositionBias"] = None
    ) -> Optional[torch.Tensor]:
        """Boolean mask (True: attend), a float mask (added to the scores, -inf where not
        allowed) when there is a position bias, or None when SDPA needs none / only is_causal."""
        key = (layer.causal, layer.sliding_window, None if bias is None else id(bias.table))
        if key in group.masks:
            return group.masks[key]
        mask = group.key_valid[:, None, None, :] if group.key_valid is not None else None
        needs_pattern = layer.sliding_window is not None or (layer.causal and (mask is not None or bias is not None))
        if needs_pattern:
            i = torch.arange(group.max_len, device=device)
            rel = i[None, :] - i[:, None]  # key index - query index
            allowed = torch.ones(group.max_len, group.max_len, dtype=torch.bool, device=device)
            if layer.causal:
                allowed &= rel <= 0
            if layer.sliding_window is not None:
                allowed &= rel.abs() < layer.sliding_window
            mask = allowed[None, None] if mask is None else mask & allowed[None, None]
        if bias is not None:
            scores = bias.dense(group.max_len).to(device)[None]  # [1, heads, L, L]
            mask = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
        group.masks[key] = mask
        return mask

    def forward(
        self, q, k, v, layer: "AttentionLayer", forward_batch: "ForwardBatch", position_bias=None
    ) -> torch.Tensor:
        return self.run_groups(q, k, v, layer, forward_batch.attn_metadata, torch.empty_like(q), position_bias)

    def run_groups(
        self,
        q,
        k,
        v,
        layer: "AttentionLayer",
        groups: list[AttnGroup],
        out: torch.Tensor,
        position_bias: Optional["PositionBias"] = None,
    ) -> torch.Tensor:
        """SDPA for each group, written into its rows of `out` (other rows are left as they are)."""
        h, hk, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
        gqa = hk != h
        for group in groups:
            g, lmax = group.num_seqs, group.max_len
            if group.span is not None:
                s, e = group.span
                qg, kg, vg = q[s:e], k[s:e], v[s:e]
            else:
                qg, kg, vg = (x.index_select(0, group.gather) for x in (q, k, v))
            mask = self._mask(group, layer, q.device, position_bias)
            if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
                mask = mask.to(q.dtype)
            og = (
                F.scaled_dot_product_attention(
                    qg.view(g, lmax, h, d).transpose(1, 2),
                    kg.view(g, lmax, hk, d).transpose(1, 2),
                    vg.view(g, lmax, hk, d).transpose(1, 2),
                    attn_mask=mask,
                    is_causal=layer.causal and mask is None,
                    scale=layer.scaling,
                    enable_gqa=gqa,
                )
                .transpose(1, 2)
                .reshape(g * lmax, h * d)
            )
            if group.span is not None:
                out[group.span[0] : group.span[1]] = og
            else:
                real = og if group.real_slots is None else og.index_select(0, group.real_slots)
                out.index_copy_(0, group.scatter, real)
        return out
