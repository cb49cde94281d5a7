"""Bounds and placement of the tokenizer routes' work (TEI /tokenize and /decode, vLLM's
/tokenize and /detokenize), which run in the HTTP process with no model involved.

One rule for all of them: a request carries at most --max-client-batch-size inputs (413, as
/embed answers it), its work is bounded, and anything bigger than INLINE_WORK characters or ids
runs in a worker thread (utils/off_loop.py, the tokenizer manager's rule too), so /health and
other requests keep being answered. TEI's /tokenize renders each input's tokens a slice at a time straight into the
answer's bytes and stops at --max-response-bytes; /decode takes at most as many ids as an /embed
request could carry (--max-client-batch-size x the model's context length).
"""

from __future__ import annotations

from typing import Sequence, TypeVar

import orjson

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http.response_parts import Parts, release_heap
from sglang.srt.frontend.openai.serving_base import check_batch_size
from sglang.srt.frontend.response_size import mib
from sglang.srt.frontend.tokens import byte_offsets, check_ids, decode, tei_encode, tei_token_dicts
from sglang.srt.server_args import ServerArgs

T = TypeVar("T")
SLICE_TOKENS = 4_096  # /tokenize renders this many tokens' dicts at a time
# The smallest SimpleToken as orjson writes it, with its comma ({"id":0,"text":"","special":false,
# "start":0,"stop":0},): an input of n tokens adds at least n times this to the answer.
MIN_TOKEN_BYTES = 53


def max_total_ids(args: ServerArgs, max_input_length: int) -> int:
    """The most token ids one request may carry: as many as the largest /embed request."""
    return min(args.max_client_batch_size, args.max_queue_size) * max_input_length


def too_large(message: str, param: str) -> EmbeddingError:
    return EmbeddingError(ErrorKind.TOO_LARGE, message, param=param)


def check_ids_work(lists: Sequence[Sequence[int]], args: ServerArgs, max_input_length: int, param: str) -> None:
    """/decode, /detokenize: at most --max-client-batch-size id lists and max_total_ids ids (413)."""
    check_batch_size(len(lists), args, param)
    total = sum(len(one) for one in lists)
    limit = max_total_ids(args, max_input_length)
    if total > limit:
        raise too_large(
            f"The request has {total} token ids; this server decodes at most {limit} per request "
            f"(--max-client-batch-size x the model's {max_input_length}-token context).",
            param,
        )


def decode_all(tokenizer, lists: Sequence[Sequence[int]], vocab_size: int, skip_special: bool, param: str) -> bytes:
    """Every id list checked against the vocabulary and decoded: TEI's `["text", ...]` as bytes."""
    for one in lists:
        check_ids(one, vocab_size, param)
    return orjson.dumps([decode(tokenizer, one, skip_special) for one in lists])


def tei_tokenize_answer(
    tokenizer, texts: Sequence[str], prefix: str, add_special_tokens: bool, lower: bool, max_bytes: int
) -> Parts:
    """TEI's /tokenize answer (`[[SimpleToken, ...], ...]`) as parts, each input rendered a slice
    of SLICE_TOKENS at a time; 413 as soon as it would pass `max_bytes` (--max-response-bytes),
    before an over-long input's dicts are built. A refused answer's parts (up to the limit) are
    freed and their pages given back before the error leaves (they stayed +71 MB otherwise)."""
    try:
        return _tokenize_parts(tokenizer, texts, prefix, add_special_tokens, lower, max_bytes)
    except EmbeddingError as e:
        err = e.with_traceback(None)  # the traceback's frames would keep the parts alive
    release_heap()
    raise err


def _tokenize_parts(
    tokenizer, texts: Sequence[str], prefix: str, add_special_tokens: bool, lower: bool, max_bytes: int
) -> Parts:
    parts = Parts([b"["])
    size = 2
    for i, t in enumerate(texts):
        text = prefix + t
        enc = tei_encode(tokenizer, text, add_special_tokens, lower)
        n = len(enc["input_ids"])
        if size + n * MIN_TOKEN_BYTES > max_bytes:
            raise _tokenize_too_large(size + n * MIN_TOKEN_BYTES, max_bytes, i)
        raw, byte_at = text.encode("utf-8", "surrogatepass"), byte_offsets(text)
        parts.append(b",[" if i else b"[")
        for lo in range(0, n, SLICE_TOKENS):
            rendered = orjson.dumps(tei_token_dicts(tokenizer, enc, raw, byte_at, lo, lo + SLICE_TOKENS))
            if lo:
                parts.append(b",")
            parts.append(rendered[1:-1])
            size += len(rendered)
            if size > max_bytes:
                raise _tokenize_too_large(size, max_bytes, i)
        parts.append(b"]")
        size += 2
    parts.append(b"]")
    return parts


def _tokenize_too_large(size: int, limit: int, index: int) -> EmbeddingError:
    return too_large(
        f"The answer would be more than {mib(size)} (at input {index}); this server answers at most "
        f"{mib(limit)} (--max-response-bytes). Send fewer or shorter inputs.",
        "inputs",
    )
