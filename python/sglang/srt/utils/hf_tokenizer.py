"""Loading a Hugging Face tokenizer: the tokenizer side tokenizes with it, the detokenizer renders
sparse token strings with it, the output head asks it for special token ids."""

from __future__ import annotations

from sglang.srt.errors import ConfigError


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
