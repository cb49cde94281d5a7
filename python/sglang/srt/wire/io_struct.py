"""Messages between the processes: one family per link, all registered with the frame codec.

The links:
    HTTP / Engine --EmbeddingReqInput--> TokenizerManager
    TokenizerManager --BatchTokenizedEmbeddingReqInput--> Scheduler (one of the --dp-size replicas)
    Scheduler (every replica) --BatchEmbeddingOutput--> Detokenizer
    Detokenizer --BatchEmbeddingResult--> TokenizerManager (the worker that asked)
    TokenizerManager --AbortReq--> Scheduler (the replica holding the inputs)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Union

import numpy as np

from sglang.srt.errors import ErrorKind
from sglang.srt.wire.forward_output import ForwardOutput
from sglang.srt.wire.msgcodec import message
from sglang.srt.wire.output_spec import BYTE_ORDERS, DTYPES, OutputSpec, Task

# A request's `encoding_format` (frontend/output_options.output_spec turns it into a Format).
FORMAT_FLOAT = "float"  # JSON array of numbers
FORMAT_BASE64 = "base64"  # little-endian float32, base64 (what the openai client asks for)
FORMAT_RAW = "raw"  # the numbers as a float32 array, for a route that computes on them (Format.ARRAY)
FORMAT_BYTES = "bytes"  # vLLM's binary response: the values' bytes as the body, a `metadata` header
FORMAT_BYTES_ONLY = "bytes_only"  # the same body without the header
ENCODING_FORMATS = (FORMAT_FLOAT, FORMAT_BASE64)
BINARY_FORMATS = (FORMAT_BYTES, FORMAT_BYTES_ONLY)
# Sparse outputs ({token_id: weight}); asking for one of these runs the sparse head.
FORMAT_SPARSE_DICT = "sparse_dict"  # JSON object {"<token id>": weight} (SGLang's /v1/embeddings)
FORMAT_SPARSE_TEI = "sparse_tei"  # JSON [{"index": id, "value": w}] (TEI's /embed_sparse)
FORMAT_SPARSE_TEI_TEXT = "sparse_tei_text"  # the same plus "text": the token's vocabulary string
SPARSE_FORMATS = (FORMAT_SPARSE_DICT, FORMAT_SPARSE_TEI, FORMAT_SPARSE_TEI_TEXT)
# base64 / raw payloads may carry another element type and byte order (vLLM's embed_dtype, endianness).
EMBED_DTYPES = DTYPES
ENDIANNESS = BYTE_ORDERS
TRUNCATION_SIDES = ("left", "right")


@dataclass
class MultimodalItem:
    """One `{"text": ..., "image": ...}` input (at least one of the two): one embedding, rendered
    through the chat template; `image` is a URL, data URI, base64 string or allowed local path."""

    text: Optional[str] = None
    image: Optional[str] = None


@dataclass
class EmbeddingReqInput:
    """What the HTTP route or Engine hands to the tokenizer manager; may hold many inputs."""

    text: Optional[list[str]] = None
    input_ids: Optional[list[list[int]]] = None
    dimensions: Optional[int] = None
    encoding_format: str = FORMAT_FLOAT
    items: Optional[list[MultimodalItem]] = None  # instead of text / input_ids (frontend/multimodal/)
    text_pairs: Optional[list[tuple[str, str]]] = None  # (query, document) pairs for cross-encoders
    instruction: Optional[str] = None  # an LLM reranker's task instruction for text_pairs (None: its default)
    # Per-token output (layers/token_outputs.py: "hidden", "query", "document"); None: pooled.
    token_output: Optional[str] = None
    # Per-request tokenization (frontend/tokenization.py): over-long inputs are cut when `truncate`
    # (None: --allow-auto-truncate) on `truncation_side`, at `max_tokens` (None: the context length),
    # else refused; `prompt` is prefixed to every text input (sentence-transformers' prompts).
    truncate: Optional[bool] = None
    truncation_side: str = "right"
    max_tokens: Optional[int] = None
    add_special_tokens: bool = True
    prompt: Optional[str] = None
    # Per-request output: L2-normalize (None: as the checkpoint says), base64 element type and byte order.
    normalize: Optional[bool] = None
    embed_dtype: str = "float32"
    endianness: str = "little"

    @property
    def batch_size(self) -> int:
        if self.items is not None:
            return len(self.items)
        if self.text_pairs is not None:
            return len(self.text_pairs)
        return len(self.text) if self.text is not None else len(self.input_ids or [])

    def split(self, size: int) -> list["EmbeddingReqInput"]:
        """Consecutive parts of at most `size` inputs each (the offline Engine queues big calls in parts)."""
        if self.batch_size <= size:
            return [self]
        fields = ("text", "input_ids", "items", "text_pairs")
        return [
            replace(self, **{f: getattr(self, f)[i : i + size] for f in fields if getattr(self, f) is not None})
            for i in range(0, self.batch_size, size)
        ]


@message
@dataclass
class TokenizedEmbeddingReqInput:
    """One input, tokenized. `rid` is unique per input; `worker_id` routes the answer home."""

    rid: str
    worker_id: int
    input_ids: np.ndarray  # int32 [n]
    token_type_ids: Optional[np.ndarray] = None  # int32 [n], BERT-style pairs
    # What the answer looks like, resolved by the front end (the scheduler reads only its task).
    output: OutputSpec = field(default_factory=OutputSpec)
    arrival_time: float = 0.0  # time.monotonic() when tokenized (same clock in every process)
    # Images (Qwen2-VL), filled by frontend/multimodal/ for an input that has one:
    pixel_values: Optional[np.ndarray] = None  # float32 [patches, C * T * P * P]
    image_grid_thw: Optional[np.ndarray] = None  # int64 [images, 3]: (t, h, w) in patches
    mrope_positions: Optional[np.ndarray] = None  # int64 [3, n]: M-RoPE (t, h, w) position per token
    # Per-token output kind (EmbeddingReqInput.token_output), and for ColBERT query expansion the
    # number of leading tokens that are keys (None: all of them).
    token_output: Optional[str] = None
    key_len: Optional[int] = None
    # A long input cut into chunks (--max-embed-len, frontend/chunking.py): input_ids holds them end
    # to end, this their lengths (int32 [k]); the scheduler runs each and answers with their
    # token-weighted mean (scheduler/chunk_merge.py). None: one sequence.
    chunk_lens: Optional[np.ndarray] = None
    # W3C traceparent of the request's span when tracing is on (utils/tracing.py); None: untraced.
    trace_context: Optional[str] = None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def is_sparse(self) -> bool:
        return self.output.task is Task.SPARSE


@message
@dataclass
class BatchTokenizedEmbeddingReqInput:
    """The inputs of one HTTP request, or of the requests one HTTP process dispatched to a replica
    in one event-loop turn (frontend/turn_outbox.py), sent as one multipart message."""

    reqs: list[TokenizedEmbeddingReqInput] = field(default_factory=list)
    # Several requests: how many consecutive inputs of `reqs` each one has (the scheduler accepts
    # or refuses each request whole). None: all of `reqs` is one request.
    group_sizes: Optional[list[int]] = None

    def groups(self) -> list[list[TokenizedEmbeddingReqInput]]:
        """Each request's inputs, in order."""
        if self.group_sizes is None:
            return [self.reqs]
        if any(n < 1 for n in self.group_sizes) or sum(self.group_sizes) != len(self.reqs):
            raise ValueError(f"group sizes {self.group_sizes} do not split {len(self.reqs)} inputs")
        out, start = [], 0
        for n in self.group_sizes:
            out.append(self.reqs[start : start + n])
            start += n
        return out


@message
@dataclass
class AbortReq:
    rids: list[str] = field(default_factory=list)


@message
@dataclass(kw_only=True)
class BatchEmbeddingOutput(ForwardOutput):
    """Column-wise results of one forward pass (plus any requests rejected without one): the
    runner's rows as it made them (wire/forward_output.ForwardOutput's fields) and the
    scheduler's own per-row columns below.

    `embeddings` holds one float32 row per rid, as pooled (the renderer cuts and normalizes it
    as the row's OutputSpec says); rows of failed rids are zeros and carry an `error_codes` entry
    other than 0 (an errors.ErrorKind) with the message beside it.
    """

    rids: list[str]
    worker_ids: list[int]
    prompt_tokens: list[int]
    outputs: list[OutputSpec]  # per row: its input's output options
    error_codes: list[int]
    error_messages: list[Optional[str]]
    queue_times: list[float]  # seconds waiting before the forward began
    inference_time: float = 0.0  # seconds of the forward pass
    # The forward's shape (0 when answered without one), for the scheduler process's own batch
    # metrics and memory watch; the renderer does not read them.
    batch_size: int = 0
    batch_tokens: int = 0
    # Per row: the request's traceparent, for the detokenizer's render spans. None: nothing traced.
    trace_contexts: Optional[list[Optional[str]]] = None
    # The forward pass's id (request_tracing.new_batch_id) when tracing is on: its spans and log lines.
    batch_id: Optional[str] = None

    @staticmethod
    def failure(reqs: list[TokenizedEmbeddingReqInput], kind: ErrorKind, msg: str) -> "BatchEmbeddingOutput":
        n = len(reqs)
        return BatchEmbeddingOutput(
            rids=[r.rid for r in reqs],
            worker_ids=[r.worker_id for r in reqs],
            embeddings=np.zeros((n, 0), dtype=np.float32),
            prompt_tokens=[r.num_tokens for r in reqs],
            outputs=[r.output for r in reqs],
            error_codes=[int(kind)] * n,
            error_messages=[msg] * n,
            queue_times=[0.0] * n,
        )


@message
@dataclass
class BatchEmbeddingResult:
    """Rendered results for one tokenizer worker: each payload is a ready JSON value or bare bytes
    (bytes), or for Format.ARRAY rows the numbers as a float32 array ([n] or per-token [tokens, dim])."""

    rids: list[str]
    payloads: list[Union[bytes, np.ndarray]]
    prompt_tokens: list[int]
    error_codes: list[int]
    error_messages: list[Optional[str]]
    queue_times: list[float]
    inference_time: float = 0.0
    # Per-token rows: the JSON array of the token ids their vectors belong to (b"" for other rows);
    # None when no row of this result has per-token output.
    token_ids: Optional[list[bytes]] = None
