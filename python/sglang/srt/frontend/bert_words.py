"""A BERT tokenizer's ids for normalized ASCII text, word by word from a cache of the words' ids.

Why: after bert_ascii.py normalizes a corpus text in Python, the Rust tokenizer still spends ~60
CPU-us on it (~350 characters, ~66 tokens, the 2-core benchmark VM), most of it in crossing into
Rust, splitting, and building an Encoding with offsets for every token. WordPiece reads each word
on its own (BERT's pre-tokenizer splits at whitespace and at every punctuation character, and a
word's pieces do not depend on its neighbours), so the ids of a text are its words' ids in order,
between the post-processor's special tokens. A regular expression splits the text (~8 us), a dict
gives each word's ids, and the words the dict lacks go to the Rust tokenizer together, as one
pre-tokenized sequence: ~14 us per corpus text once the common words are known, the same ids.

The split only has to be no finer than the pre-tokenizer's: a piece that the Rust pre-tokenizer
would cut further (a control character kept because the normalizer does not clean) is cut by it
when that piece is tokenized, so the cached ids are still what the whole text would give.
Tokenizers whose pre-tokenizer is not BertPreTokenizer, or whose model is not WordPiece, are not
handled here. The cache holds at most MAX_WORDS words and starts over when full, so hostile text
(every word new) costs one extra Rust call per text, not memory.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from tokenizers import models, pre_tokenizers

MAX_WORDS = 1 << 16  # ~10 MB of words and their ids; English text needs a few thousand

# BertPreTokenizer splits at Unicode whitespace (for ASCII: space, \t, \n, \v, \f, \r) and isolates
# every punctuation character (for ASCII: the 32 of string.punctuation).
_PUNCT = re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_WORDS = re.compile(f"[^ \\t\\n\\x0b\\x0c\\r{_PUNCT}]+|[{_PUNCT}]")


class BertWordIds:
    """`ids(text, add_special_tokens, max_length, side)` for text a BERT normalizer already read,
    from `words`, a copy of the tokenizer without normalizer, truncation or padding."""

    def __init__(self, words: Any, pre: list[int], post: list[int]) -> None:
        self._words = words
        self._pre, self._post = pre, post
        self._cache: dict[str, tuple[int, ...]] = {}

    @classmethod
    def of(cls, words: Any) -> Optional["BertWordIds"]:
        """For a copy whose pre-tokenizer is BertPreTokenizer and whose model is WordPiece, with
        the special tokens its post-processor puts around a single text; else None (also for a
        copy that pads or truncates: this class does the truncation itself)."""
        if not isinstance(words.pre_tokenizer, pre_tokenizers.BertPreTokenizer):
            return None
        if not isinstance(words.model, models.WordPiece):
            return None
        if words.padding is not None or words.truncation is not None:
            return None
        try:
            core = words.encode("a", add_special_tokens=False).ids
            full = words.encode("a", add_special_tokens=True).ids
        except Exception:  # noqa: BLE001 - a tokenizer this cannot read takes the Rust path
            return None
        places = [k for k in range(len(full) - len(core) + 1) if full[k : k + len(core)] == core]
        if len(places) != 1 or not core:
            return None
        k = places[0]
        return cls(words, full[:k], full[k + len(core) :])

    def ids(self, text: str, add_special_tokens: bool, max_length: Optional[int], side: str) -> Optional[list[int]]:
        """The ids the tokenizer gives `text` (normalized ASCII), truncated like its "longest_first"
        truncation to `max_length` on `side`; None when max_length leaves no room for the text."""
        added = len(self._pre) + len(self._post) if add_special_tokens else 0
        if max_length is not None and max_length <= added:
            return None
        words = _WORDS.findall(text)
        get = self._cache.get
        found = [get(w) for w in words]
        if None in found:
            missing = list(dict.fromkeys(w for w, f in zip(words, found) if f is None))
            learned = dict(zip(missing, self._tokenize(missing)))
            self._remember(learned)
            found = [learned[w] if f is None else f for w, f in zip(words, found)]
        core: list[int] = []
        for f in found:
            core += f
        if max_length is not None and len(core) > max_length - added:
            keep = max_length - added
            core = core[:keep] if side != "left" else core[len(core) - keep :]
        return [*self._pre, *core, *self._post] if add_special_tokens else core

    def _remember(self, learned: dict[str, tuple[int, ...]]) -> None:
        if len(self._cache) + len(learned) > MAX_WORDS:
            self._cache = {}
        self._cache.update(learned)

    def _tokenize(self, words: list[str]) -> list[tuple[int, ...]]:
        """Each word's ids, in one call: the words as one pre-tokenized sequence, its tokens
        grouped by the word they came from."""
        encoding = self._words.encode(words, is_pretokenized=True, add_special_tokens=False)
        per: list[list[int]] = [[] for _ in words]
        for token, word in zip(encoding.ids, encoding.word_ids):
            per[word].append(token)
        return [tuple(p) for p in per]
