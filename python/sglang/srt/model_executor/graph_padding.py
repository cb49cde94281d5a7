"""Which captured CUDA graph serves a batch, and how the batch is padded to fit it.

Pure Python so it is tested on CPU. A graph is captured per token bucket with a fixed number of
sequence slots; a batch of T real tokens in B sequences uses the smallest bucket with >= T tokens
and >= B + 1 slots. The extra slot holds a dummy sequence made of the padding tokens: it attends
only to itself, so nothing a real sequence computes depends on it. Unused slots are zero-length
sequences. Padding is bounded: a batch the bucket would more than double runs eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

MAX_PADDING_RATIO = 2.0
_SMALL_BUCKETS_BELOW = 16  # powers of two below this, then steps of x1.5 and x4/3


def token_buckets(max_tokens: int) -> list[int]:
    """1, 2, 4, 8, 16, 24, 32, 48, 64, 96, ... below `max_tokens`, then `max_tokens` itself.

    Below 16 tokens powers of two keep padding under 2x; above, alternating 2^k and 1.5 * 2^k keep
    it under 1.5x with only two graphs per doubling.
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    out: list[int] = []
    t = 1
    while t < min(max_tokens, _SMALL_BUCKETS_BELOW):
        out.append(t)
        t *= 2
    base = _SMALL_BUCKETS_BELOW
    while base < max_tokens:
        out.extend(x for x in (base, base * 3 // 2) if x < max_tokens)
        base *= 2
    out.append(max_tokens)
    return out


@dataclass(frozen=True)
class GraphBucket:
    num_tokens: int
    num_seqs: int  # sequence slots: real inputs plus the dummy padding sequence

    @property
    def max_real_seqs(self) -> int:
        return self.num_seqs - 1


def graph_buckets(max_tokens: int, max_seqs: int) -> list[GraphBucket]:
    """Every bucket takes up to `max_seqs` inputs (fewer when it has fewer tokens than that)."""
    if max_seqs < 1:
        raise ValueError("max_seqs must be at least 1")
    return [GraphBucket(t, min(max_seqs, t) + 1) for t in token_buckets(max_tokens)]


@dataclass(frozen=True)
class PaddingPlan:
    bucket: GraphBucket
    num_real_tokens: int
    num_real_seqs: int

    @property
    def pad_tokens(self) -> int:
        return self.bucket.num_tokens - self.num_real_tokens

    def padded_seq_lens(self, seq_lens: Sequence[int]) -> list[int]:
        """Real lengths, then the dummy sequence (all padding; may be empty), then empty slots."""
        empty = self.bucket.num_seqs - self.num_real_seqs - 1
        return [*seq_lens, self.pad_tokens, *([0] * empty)]


def choose_bucket(seq_lens: Sequence[int], buckets: Sequence[GraphBucket]) -> Optional[PaddingPlan]:
    """The padding plan for a batch, or None when it must run eagerly (too big, too many inputs,
    or too much padding). `buckets` must be sorted by token count."""
    tokens, seqs = sum(seq_lens), len(seq_lens)
    if seqs == 0:
        return None
    for bucket in buckets:
        if bucket.num_tokens >= tokens and bucket.max_real_seqs >= seqs:
            if bucket.num_tokens > MAX_PADDING_RATIO * tokens:
                return None
            return PaddingPlan(bucket, tokens, seqs)
    return None
