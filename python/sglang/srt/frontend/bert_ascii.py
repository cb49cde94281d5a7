"""What a BERT tokenizer's normalizer does to ASCII text, done with `str.translate` and `str.lower`.

Why: for a corpus text (~350 characters, ~66 tokens) the Rust `BertNormalizer` is about 40% of
the tokenizer's time (~60 of ~160 CPU-us on the 2-core benchmark VM): a Unicode category lookup
per character (control characters, Chinese characters, accents) and the alignment bookkeeping
of every change. On ASCII text most of that has nothing to do, and what is left is two C loops in
Python: control characters dropped (tab, newline and carriage return become spaces, as the Rust
code does), then lower case when the normalizer lowercases. The tokenizer copy that reads the
result has no normalizer; its pre-tokenizer, model and post-processor are the original's, so the
ids are the same.

The one place where normalizing first could change ids is the tokenizer's added tokens ([CLS],
[MASK], ...): the Rust tokenizer finds those in the text before normalizing (or after, per token),
and lower case would hide "[MASK]". So a text that holds the first character of any added token,
as written or lowercased, is left to the full tokenizer; for BERT's five special tokens that is a
text with a "[". Non-ASCII text, and normalizers other than a lone BertNormalizer, take the full
tokenizer too.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

# BertNormalizer's clean_text on ASCII: NUL and the other control characters (Unicode Cc: 0x00-0x1F
# and 0x7F) are removed, except tab, newline and carriage return, which become spaces.
_CLEAN = {c: None for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)}
_CLEAN.update({0x09: " ", 0x0A: " ", 0x0D: " "})


class AsciiBertNormalizer:
    """`normalize(text)`: what the tokenizer's BertNormalizer makes of `text`, or None when the text
    must take the full tokenizer (not ASCII, or it may hold an added token)."""

    def __init__(self, clean_text: bool, lowercase: bool, guard: Optional[re.Pattern]) -> None:
        self._clean = clean_text
        self._lower = lowercase
        self._guard = guard

    @classmethod
    def of(cls, backend: Any) -> Optional["AsciiBertNormalizer"]:
        """For a `tokenizers.Tokenizer` whose normalizer is a BertNormalizer, else None."""
        normalizer = getattr(backend, "normalizer", None)
        try:
            state = json.loads(normalizer.__getstate__())
        except (AttributeError, TypeError, ValueError):
            return None
        if not isinstance(state, dict) or state.get("type") != "BertNormalizer":
            return None
        added = getattr(backend, "get_added_tokens_decoder", None)
        contents = [t.content for t in added().values()] if added is not None else []
        firsts = {c[0] for c in contents if c} | {c[0].lower() for c in contents if c}
        guard = re.compile("[" + "".join(re.escape(ch) for ch in sorted(firsts)) + "]") if firsts else None
        return cls(bool(state.get("clean_text", True)), bool(state.get("lowercase", True)), guard)

    def normalize(self, text: str) -> Optional[str]:
        guard = self._guard
        if not text.isascii() or (guard is not None and guard.search(text) is not None):
            return None
        out = text.translate(_CLEAN) if self._clean else text
        if self._lower:
            out = out.lower()
        if guard is not None and guard.search(out) is not None:  # an added token's first letter, lowercased
            return None
        return out
