"""The text inputs' tokenization without the Hugging Face wrapper around the Rust tokenizer.

Why: for one short text, transformers' `tokenizer(texts, ...)` spends a third of its time outside
the Rust tokenizer (issue #32: ~180 CPU-us per corpus text through the wrapper, ~125 without on
the 2-core benchmark VM): it re-checks its arguments, re-applies the truncation and padding settings
to the backend, builds per-encoding dicts and a BatchEncoding. For text, the wrapper's work is:
set the backend's truncation (none, or `max_length` on the tokenizer's side with the
"longest_first" strategy), set its `encode_special_tokens` to the tokenizer's
`split_special_tokens`, then `encode_batch`. This does the same on private copies of the backend,
one per truncation setting (set once, never changed, so threads can share them), and reads only
the ids. Tokenizers that are not transformers' Rust-backed class, or that override its encoding,
always take the wrapper.

A BERT tokenizer's ASCII texts go one step further: normalized in Python (bert_ascii.py) and read
by a copy without the normalizer, 40-60 CPU-us less per corpus text for the same ids; and where
that copy is BERT's WordPiece, word by word from a cache of the words' ids (bert_words.py), ~45
CPU-us less again. The cache is Python and holds the GIL, where the Rust tokenizer releases it, so
it reads only requests small enough to be tokenized on the event loop (utils/off_loop.py's
INLINE_WORK characters): a bigger one is tokenized in a worker thread by Rust while the loop
answers other requests.
"""

from __future__ import annotations

import copy
import functools
import threading
from typing import Any, Optional

from sglang.srt.frontend.bert_ascii import AsciiBertNormalizer
from sglang.srt.frontend.bert_words import BertWordIds
from sglang.srt.utils.off_loop import INLINE_WORK

try:
    from transformers.tokenization_utils_tokenizers import TokenizersBackend
except ImportError:  # an older transformers: no fast path
    TokenizersBackend = None

MAX_SETTINGS = 8  # truncation settings kept (the context, a few max_tokens); others take the wrapper


class PlainEncoder:
    """`encode(texts, add_special_tokens, max_length, side)`: the ids the wrapper would give with
    `truncation=max_length is not None` on that side, or None when the setting is not kept."""

    def __init__(self, backend: Any, split_special_tokens: bool) -> None:
        self._source = backend
        self._split = split_special_tokens
        self._ascii = AsciiBertNormalizer.of(backend)
        self._copies: dict[tuple[Optional[int], str, bool], Any] = {}  # (max_length, side, normalized)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, tokenizer: Any) -> Optional["PlainEncoder"]:
        """The fast path for `tokenizer`, or None when its encoding is not the base class's."""
        if TokenizersBackend is None or not isinstance(tokenizer, TokenizersBackend):
            return None
        kind = type(tokenizer)
        for name in ("__call__", "_encode_plus", "set_truncation_and_padding"):
            if getattr(kind, name) is not getattr(TokenizersBackend, name):
                return None
        if hasattr(tokenizer, "_switch_to_input_mode"):  # seq2seq tokenizers swap the backend's post-processor
            return None
        backend = getattr(tokenizer, "_tokenizer", None)
        if backend is None or not hasattr(backend, "encode_batch"):
            return None
        return cls(backend, bool(tokenizer.split_special_tokens))

    def _backend(self, max_length: Optional[int], side: str, normalized: bool = False) -> Optional[Any]:
        """The copy for a truncation setting; `normalized`: the one without a normalizer, for texts
        bert_ascii.py normalized already."""
        setting = (max_length, side if max_length is not None else "right")
        key = (*setting, normalized)
        found = self._copies.get(key)
        if found is not None:
            return found
        with self._lock:
            if key not in self._copies:
                settings = {k[:2] for k in self._copies}  # a setting's two copies count once
                if setting not in settings and len(settings) >= MAX_SETTINGS:
                    return None
                self._copies[key] = self._copy(max_length, side, normalized)
            return self._copies[key]

    def _copy(self, max_length: Optional[int], side: str, normalized: bool) -> Any:
        own = copy.deepcopy(self._source)  # ours alone: the wrapper mutates its own per call
        own.no_padding()
        if max_length is None:
            own.no_truncation()
        else:
            own.enable_truncation(max_length, stride=0, strategy="longest_first", direction=side)
        own.encode_special_tokens = self._split
        if normalized:
            own.normalizer = None
        return own

    def encode(
        self, texts: list[str], add_special_tokens: bool, max_length: Optional[int], side: str = "right"
    ) -> Optional[list[list[int]]]:
        backend = self._backend(max_length, side)
        if backend is None:
            return None
        ready = [self._ascii.normalize(t) for t in texts] if self._ascii is not None else []
        fast = [i for i, t in enumerate(ready) if t is not None]
        if not fast:
            return _ids(backend, texts, add_special_tokens)
        out: list[Any] = [None] * len(texts)
        words = self._words if sum(map(len, texts)) <= INLINE_WORK else None
        if words is not None:  # the common request: English text, through the words' cache
            for i in fast:
                out[i] = words.ids(ready[i], add_special_tokens, max_length, side)
        full = [i for i, t in enumerate(ready) if t is None]
        normalized = [i for i in fast if out[i] is None]
        for rows, source, skip_normalizer in ((full, texts, False), (normalized, ready, True)):
            if rows:  # the Rust tokenizer, normalizing or not (the setting's copy exists: `backend`)
                own = self._backend(max_length, side, skip_normalizer)
                for i, ids in zip(rows, _ids(own, [source[i] for i in rows], add_special_tokens)):
                    out[i] = ids
        return out

    @functools.cached_property
    def _words(self) -> Optional[BertWordIds]:
        """The words' cache over a copy without normalizer or truncation, made on first use (its
        own copy: it is not one of the truncation settings MAX_SETTINGS counts)."""
        return BertWordIds.of(self._copy(None, "right", True)) if self._ascii is not None else None


def _ids(backend: Any, texts: list, add_special_tokens: bool) -> list[list[int]]:
    fast = getattr(backend, "encode_batch_fast", None)  # no character offsets (tokenizers >= 0.21)
    encodings = (fast or backend.encode_batch)(texts, add_special_tokens=add_special_tokens)
    return [e.ids for e in encodings]
