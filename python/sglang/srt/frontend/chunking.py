"""Long inputs (--max-embed-len, vLLM's chunked processing): an input over the context length is
cut into context-sized chunks that travel as one input.

The chunks are laid end to end in the input's `input_ids`, their lengths in `chunk_lens`; the
scheduler runs each as an input of its own (in whatever batches the token budget makes) and
answers the input with the token-weighted mean of their pooled rows (scheduler/chunk_merge.py),
which the renderer then normalizes like any other row. Keeping the chunks in one input keeps them
on one replica and under one rid: placement, aborts and retries treat it as any input.

Each chunk carries the model's special tokens (BERT's [CLS] ... [SEP], a decoder's BOS / EOS as its
tokenizer adds them) when the input had them at its ends; an input without them (token ids sent
bare, add_special_tokens false) is cut into plain slices. vLLM cuts plain slices always, so its
first chunk alone has [CLS] and its last alone [SEP].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from sglang.srt.wire.io_struct import EmbeddingReqInput

Split = tuple[np.ndarray, Optional[np.ndarray]]  # (input ids, chunk lengths or None)


@dataclass(frozen=True)
class ChunkPlan:
    """How long inputs are cut: at most `chunk_len` tokens a chunk, inputs up to `max_len` tokens."""

    chunk_len: int
    max_len: int

    def applies(self, req: Optional[EmbeddingReqInput]) -> bool:
        """Only pooled dense vectors of single texts or token ids are chunked: pairs, images,
        per-token and sparse answers keep their limits."""
        if req is None:
            return True
        if req.items is not None or req.text_pairs is not None or req.token_output is not None:
            return False
        return not str(req.encoding_format).startswith("sparse")

    def split(
        self, ids: np.ndarray, pre: Sequence[int], post: Sequence[int]
    ) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """(ids, None) for an input that fits; else (the chunks end to end, int32 chunk lengths).

        `pre` / `post`: the special tokens the tokenizer puts around a text; when `ids` starts and
        ends with them, they are put around every chunk instead.
        """
        n = len(ids)
        if n <= self.chunk_len:
            return ids, None
        pre, post = list(pre), list(post)
        wrapped = (pre or post) and _starts_with(ids, pre) and _ends_with(ids, post)
        room = self.chunk_len - len(pre) - len(post)
        if not wrapped or room < 1:
            pieces = [ids[i : i + self.chunk_len] for i in range(0, n, self.chunk_len)]
        else:
            body = ids[len(pre) : n - len(post)]
            head, tail = np.asarray(pre, dtype=ids.dtype), np.asarray(post, dtype=ids.dtype)
            pieces = [np.concatenate([head, body[i : i + room], tail]) for i in range(0, len(body), room)]
        lens = np.fromiter((len(p) for p in pieces), dtype=np.int32, count=len(pieces))
        return np.ascontiguousarray(np.concatenate(pieces), dtype=np.int32), lens


def _starts_with(ids: np.ndarray, part: list[int]) -> bool:
    return not part or (len(ids) >= len(part) and ids[: len(part)].tolist() == part)


def _ends_with(ids: np.ndarray, part: list[int]) -> bool:
    return not part or (len(ids) >= len(part) and ids[len(ids) - len(part) :].tolist() == part)


def too_long_for_chunks(n: int, limit: int, index: Optional[int] = None) -> str:
    where = "" if index is None else f" at index {index}"
    return (
        f"The input{where} ({n} tokens) is longer than the server's maximum embedding input length "
        f"({limit} tokens, --max-embed-len); shorten it."
    )
