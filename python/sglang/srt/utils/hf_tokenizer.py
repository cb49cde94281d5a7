"""Loading a Hugging Face tokenizer: the tokenizer side tokenizes with it, the detokenizer renders
sparse token strings with it, the output head asks it for special token ids.

AutoTokenizer picks the class by reading the model's config through transformers' configuration
module, which imports torch (transformers 5). The tokenizer classes themselves do not, so the
server resolves the class once, in its model check (entrypoints/model_check.py), and the processes
without torch (HTTP, detokenizer) load that class directly: `ServerArgs.tokenizer_class`.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from sglang.srt.errors import ConfigError


def load_tokenizer(path: str, trust_remote_code: bool, tokenizer_class: Optional[str] = None) -> Any:
    """The tokenizer at `path`: of `tokenizer_class` ("module:Class", see tokenizer_class_of) when
    given, else of the class AutoTokenizer picks."""
    if tokenizer_class is not None:
        module, _, name = tokenizer_class.partition(":")
        cls = getattr(importlib.import_module(module), name)
    else:
        from transformers import AutoTokenizer

        cls = AutoTokenizer
    try:
        tok = cls.from_pretrained(path, trust_remote_code=trust_remote_code)
    except ValueError as e:
        if "trust_remote_code" in str(e) and not trust_remote_code:
            raise ConfigError(f"The tokenizer at {path} ships custom code; add --trust-remote-code to load it") from e
        raise
    # We enforce the context length ourselves; silence the tokenizer's own over-length warning.
    tok.model_max_length = 1 << 30
    return tok


def tokenizer_class_of(tokenizer: Any) -> Optional[str]:
    """The importable name of a loaded tokenizer's class ("module:Class"); None for a class that is
    not transformers' own (custom code from the checkpoint), which only AutoTokenizer can load."""
    cls = type(tokenizer)
    if not cls.__module__.startswith("transformers."):
        return None
    return f"{cls.__module__}:{cls.__qualname__}"
