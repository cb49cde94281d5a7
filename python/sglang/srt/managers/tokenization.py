"""Turn validated request inputs into token arrays, enforcing vocabulary and length limits."""

from __future__ import annotations

from typing import Optional

import numpy as np

from sglang.srt.managers.errors import EmbeddingError
from sglang.srt.managers.io_struct import EmbeddingReqInput
from sglang.srt.server_args import ConfigError, ServerArgs

TokenizedItem = tuple[np.ndarray, Optional[np.ndarray]]  # (input_ids, token_type_ids)


def load_tokenizer(path: str, trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except ValueError as e:
        if "trust_remote_code" in str(e) and not trust_remote_code:
            raise ConfigError(f"The tokenizer at {path} ships custom code; add --trust-remote-code to load it") from e
        raise
    # We enforce the context length ourselves; silence the tokenizer's own over-length warning.
    tok.model_max_length = 1 << 30
    return tok


def too_long_message(n: int, limit: int) -> str:
    return f"The input ({n} tokens) is longer than the model's context length ({limit} tokens)."


class InputTokenizer:
    def __init__(self, server_args: ServerArgs, model_info: dict, tokenizer=None) -> None:
        self.tokenizer = tokenizer or load_tokenizer(server_args.tokenizer_path, server_args.trust_remote_code)
        self.context_length = int(model_info["max_input_length"])
        self.vocab_size = int(model_info["vocab_size"])
        self.do_lower_case = bool(model_info.get("do_lower_case", False))
        self.truncate = server_args.allow_auto_truncate
        self.max_num_tokens = server_args.max_num_tokens

    def tokenize(self, req: EmbeddingReqInput) -> list[TokenizedItem]:
        if req.batch_size == 0:
            raise EmbeddingError(400, "Input cannot be empty.", param="input")
        items = self._from_text(req.text) if req.text is not None else self._from_ids(req.input_ids)
        for ids, _ in items:
            if len(ids) > self.max_num_tokens:
                raise EmbeddingError(
                    400,
                    f"The input ({len(ids)} tokens) is longer than the server's per-batch token budget "
                    f"(--max-num-tokens {self.max_num_tokens}).",
                    param="input",
                )
        return items

    def _limit(self, ids: list[int]) -> list[int]:
        if len(ids) <= self.context_length:
            return ids
        if self.truncate:
            return ids[: self.context_length]
        raise EmbeddingError(400, too_long_message(len(ids), self.context_length), param="input")

    def _from_text(self, texts: list[str]) -> list[TokenizedItem]:
        for i, t in enumerate(texts):
            if not t or not t.strip():
                where = "" if len(texts) == 1 else f" at index {i}"
                raise EmbeddingError(400, f"Input{where} is empty or whitespace only.", param="input")
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        enc = self.tokenizer(
            texts,
            add_special_tokens=True,
            truncation=self.truncate,
            max_length=self.context_length if self.truncate else None,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return [(np.asarray(self._limit(ids), dtype=np.int32), None) for ids in enc["input_ids"]]

    def _from_ids(self, batches: list[list[int]]) -> list[TokenizedItem]:
        out = []
        for i, ids in enumerate(batches):
            where = "" if len(batches) == 1 else f" at index {i}"
            if not ids:
                raise EmbeddingError(400, f"Token-id input{where} is empty.", param="input")
            arr = np.asarray(ids, dtype=np.int64)
            if arr.min() < 0 or arr.max() >= self.vocab_size:
                bad = int(arr[(arr < 0) | (arr >= self.vocab_size)][0])
                raise EmbeddingError(
                    400, f"Token id {bad}{where} is outside the vocabulary [0, {self.vocab_size}).", param="input"
                )
            out.append((self._limit(arr).astype(np.int32), None))
        return out
