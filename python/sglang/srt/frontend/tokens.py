"""Tokenize and decode for the peers' tokenizer routes, in the HTTP process (no model involved).

- TEI `/tokenize` -> per input `[{"id", "text", "special", "start", "stop"}]`: `start`/`stop` are
  byte offsets into the UTF-8 input (with its prompt), `text` the input's slice between them;
  special tokens have their vocabulary string and null offsets. TEI `/decode` -> one string per
  id list.
- vLLM `/tokenize` -> `{"count", "max_model_len", "tokens", "token_strs"}`, `/detokenize` ->
  `{"prompt"}`.
The tokenizer is the one the server embeds with, so ids and counts match what /v1/embeddings uses.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.errors import EmbeddingError, ErrorKind


def byte_offsets(text: str) -> list[int]:
    """byte offset of every character position 0..len(text)."""
    if text.isascii():
        return list(range(len(text) + 1))
    out = [0]
    for ch in text:
        out.append(out[-1] + len(ch.encode("utf-8", "surrogatepass")))
    return out


def tei_tokens(tokenizer, text: str, add_special_tokens: bool, lower: bool = False) -> list[dict]:
    """One input as TEI's SimpleToken list (`text` already carries any prompt)."""
    enc = tei_encode(tokenizer, text, add_special_tokens, lower)
    raw = text.encode("utf-8", "surrogatepass")
    return tei_token_dicts(tokenizer, enc, raw, byte_offsets(text), 0, len(enc["input_ids"]))


def tei_encode(tokenizer, text: str, add_special_tokens: bool, lower: bool = False):
    """The tokenizer's ids, special-token mask and offsets of one input."""
    return tokenizer(
        text.lower() if lower else text,
        add_special_tokens=add_special_tokens,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
        return_attention_mask=False,
        return_token_type_ids=False,
    )


def tei_token_dicts(tokenizer, enc, raw: bytes, byte_at: list[int], lo: int, hi: int) -> list[dict]:
    """Tokens lo..hi of an encoded input as SimpleToken dicts (`raw`: the input's UTF-8 bytes,
    `byte_at`: byte_offsets of it), so a long input is rendered a slice at a time."""
    ids = enc["input_ids"][lo:hi]
    specials = enc["special_tokens_mask"][lo:hi]
    offsets = enc["offset_mapping"][lo:hi]
    names = tokenizer.convert_ids_to_tokens(ids)
    out = []
    for tid, special, (start, stop), name in zip(ids, specials, offsets, names):
        if special:
            out.append({"id": int(tid), "text": name, "special": True, "start": None, "stop": None})
            continue
        b0, b1 = byte_at[start], byte_at[stop]
        piece = raw[b0:b1].decode("utf-8", "replace")
        out.append({"id": int(tid), "text": piece, "special": False, "start": b0, "stop": b1})
    return out


def check_ids(ids: list[int], vocab_size: int, param: str) -> None:
    bad = [i for i in ids if i < 0 or i >= vocab_size]
    if bad:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, f"Token id {bad[0]} is outside the vocabulary [0, {vocab_size}).", param=param
        )


def decode(tokenizer, ids: list[int], skip_special_tokens: bool = True) -> str:
    return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def vllm_tokenize(
    tokenizer,
    prompt: str,
    add_special_tokens: bool,
    return_token_strs: bool,
    max_model_len: int,
    lower: bool = False,
) -> dict:
    ids = tokenizer(
        prompt.lower() if lower else prompt,
        add_special_tokens=add_special_tokens,
        return_attention_mask=False,
        return_token_type_ids=False,
    )["input_ids"]
    strs: Optional[list[str]] = tokenizer.convert_ids_to_tokens(ids) if return_token_strs else None
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": list(ids), "token_strs": strs}
