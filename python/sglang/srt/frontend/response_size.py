"""How large a per-token answer will be, known from token counts before any model work.

Per-token rows (TEI's /embed_all, vLLM's /pooling `token_embed`, multi-vector /v1/embeddings)
grow with inputs x tokens x width: 128 inputs of 254 tokens of MiniLM's 384 hidden values are
12.5 M numbers, ~150 MB of JSON from a 65 KB request. The tokenizer manager sizes such a request
right after tokenization and refuses it (413, naming --max-response-bytes) before the scheduler
sees it; TEI's /tokenize counts what it renders against the same limit (frontend/tokens.py).
"""

from __future__ import annotations

from typing import Optional, Sequence

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.wire.io_struct import BINARY_FORMATS, FORMAT_BASE64, FORMAT_FLOAT, FORMAT_RAW, EmbeddingReqInput
from sglang.srt.wire.output_spec import DTYPE_BYTES
from sglang.srt.wire.token_kinds import TOKENS_HIDDEN

# A float32 in JSON as orjson writes it, with its comma: 12.1 bytes measured on MiniLM's hidden
# states ("-0.12345678,"); 13 leaves room for larger magnitudes and exponents (at most 15).
JSON_VALUE_BYTES = 13
# Per token beside its vector: `[`, `]`, `,` and, where shown, its id in `token_ids` (~7 bytes).
TOKEN_OVERHEAD_BYTES = 10
ROW_OVERHEAD_BYTES = 96  # per input: the item's envelope ({"object", "index", ...})


def value_bytes(fmt: str, embed_dtype: Optional[str] = None) -> Optional[float]:
    """Bytes one value costs in the answer; None for a format this bound does not apply to."""
    if fmt == FORMAT_FLOAT:
        return JSON_VALUE_BYTES
    if fmt == FORMAT_BASE64:
        return DTYPE_BYTES.get(embed_dtype or "float32", 4) * 4 / 3
    if fmt in BINARY_FORMATS:  # vLLM's bytes: the values bare
        return DTYPE_BYTES.get(embed_dtype or "float32", 4)
    return None


def row_width(token_output: Optional[str], model_info: ModelInfo) -> Optional[int]:
    """Values per token: the hidden size for hidden states, the head's width for multi-vector rows."""
    if token_output is None:
        return None
    return model_info.hidden_size if token_output == TOKENS_HIDDEN else model_info.multi_vector_dim


def per_token_bytes(token_counts: Sequence[int], width: int, per_value: float) -> int:
    """The answer's size for these inputs' per-token rows (an estimate from above for JSON)."""
    tokens = sum(token_counts)
    return int(tokens * (width * per_value + TOKEN_OVERHEAD_BYTES) + len(token_counts) * ROW_OVERHEAD_BYTES)


def check_per_token_size(
    req: EmbeddingReqInput, token_counts: Sequence[int], model_info: ModelInfo, limit: int
) -> None:
    """413 when `req`'s per-token rows would make an answer over `limit` bytes (--max-response-bytes).

    The rows are sized in the format the client gets them in (`req.encoding_format`); raw rows
    that stay in-process (the offline Engine, MaxSim scoring) are not answers and are not bounded here.
    """
    width = row_width(req.token_output, model_info)
    fmt = req.encoding_format
    per_value = value_bytes(fmt, req.embed_dtype) if fmt != FORMAT_RAW else None
    if not width or per_value is None:
        return
    size = per_token_bytes(token_counts, width, per_value)
    if size <= limit:
        return
    tokens = sum(token_counts)
    raise EmbeddingError(
        ErrorKind.TOO_LARGE,
        f"The answer would be about {mib(size)} ({tokens} tokens x {width} values per token as {fmt}); this "
        f"server answers at most {mib(limit)} (--max-response-bytes). Send fewer or shorter inputs"
        + (", or ask for base64." if fmt == FORMAT_FLOAT else "."),
        param="input",
    )


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
