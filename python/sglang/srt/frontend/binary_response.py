"""vLLM's binary embeddings responses (`encoding_format: "bytes"` / `"bytes_only"`).

The body is every input's vector bytes, concatenated in input order (the renderer made each row
in the request's `embed_dtype` and byte order, Format.BYTES), sent as application/octet-stream.
With `bytes` a `metadata` response header holds JSON that describes them the way vLLM does:

    {"id": ..., "created": ..., "model": ...,
     "data": [{"index": i, "embed_dtype": "float16", "endianness": "little",
               "start": byte offset, "end": byte offset, "shape": [dim] or [tokens, dim]}, ...],
     "usage": {"prompt_tokens": n, "total_tokens": n}}

`endianness` there is the order the bytes are in (a request's `native` is resolved to this
machine's). `bytes_only` sends the same body without the header.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Optional

import orjson

from sglang.srt.frontend.http.response_parts import BinaryParts
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_BYTES
from sglang.srt.wire.output_spec import DTYPE_BYTES


def byte_order(endianness: Optional[str]) -> str:
    """A request's `endianness` as the order the bytes are written in."""
    return sys.byteorder if endianness in (None, "native") else endianness


def row_shape(payload: bytes, item_bytes: int, token_ids: Optional[bytes]) -> list[int]:
    """[dim] for a pooled row, [tokens, dim] for per-token rows (counted from their token ids)."""
    values = len(payload) // item_bytes
    if token_ids is None:
        return [values]
    tokens = len(orjson.loads(token_ids))
    return [tokens, values // tokens if tokens else 0]


def binary_body(
    result: EmbeddingResult,
    model: str,
    encoding_format: str,
    embed_dtype: Optional[str],
    endianness: Optional[str],
    request_id: str,
) -> BinaryParts:
    """The rendered rows as the body; with `bytes`, the `metadata` header that says where each one is."""
    dtype = embed_dtype or "float32"
    order = byte_order(endianness)
    token_ids = result.token_ids or [None] * len(result.payloads)
    items, offset = [], 0
    for i, (payload, tid) in enumerate(zip(result.payloads, token_ids)):
        size = len(payload)
        shape = row_shape(payload, DTYPE_BYTES[dtype], tid)
        item = {"index": i, "embed_dtype": dtype, "endianness": order, "start": offset, "end": offset + size}
        items.append({**item, "shape": shape})
        offset += size
    headers = {}
    if encoding_format == FORMAT_BYTES:
        tokens = sum(result.prompt_tokens)
        meta = {
            "id": request_id,
            "created": int(time.time()),
            "model": model,
            "data": items,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        headers["metadata"] = json.dumps(meta, separators=(",", ":"))  # ASCII only, as a header must be
    return BinaryParts(result.payloads, headers)


def request_id(prefix: str, rid: Optional[str]) -> str:
    return f"{prefix}-{rid or uuid.uuid4().hex}"
