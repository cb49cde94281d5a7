"""What one input's answer looks like, decided once in the front end and carried with the input.

The front end (frontend/output_options.py) builds one `OutputSpec` per request from the route and
the model's capabilities. The scheduler reads only its `task` (which heads to run); the renderer
(renderer/detokenizer_manager.py) reads the rest: it alone cuts (Matryoshka), normalizes,
converts the element type and renders. A new output option is a field here, a line in the
builder and a branch in the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from sglang.srt.wire.msgcodec import message


class Task(str, Enum):
    """Which output the forward pass makes for the input."""

    DENSE = "dense"  # one pooled vector
    SPARSE = "sparse"  # {token_id: weight} from the sparse head
    TOKENS = "tokens"  # one vector per token (hidden states or a multi-vector head)
    SCORES = "scores"  # a classifier's or reranker's logits, one per label


class Format(str, Enum):
    """What the renderer makes of the row."""

    FLOAT = "float"  # JSON numbers (float32 values)
    BASE64 = "base64"  # a JSON string: base64 of the values as `dtype` in `endianness` order
    BYTES = "bytes"  # those values' bytes, bare (vLLM's binary responses)
    ARRAY = "array"  # a float32 numpy array, for a route that computes on the numbers (scores, Engine)
    SPARSE_DICT = "sparse_dict"  # JSON {"<token id>": weight} (SGLang's /v1/embeddings)
    SPARSE_TEI = "sparse_tei"  # JSON [{"index": id, "value": w}] (TEI's /embed_sparse)
    SPARSE_TEI_TEXT = "sparse_tei_text"  # the same plus "text": the token's vocabulary string


SPARSE_FORMATS = (Format.SPARSE_DICT, Format.SPARSE_TEI, Format.SPARSE_TEI_TEXT)
# Element types of BASE64 / BYTES payloads (vLLM's embed_dtype) with their sizes, and byte orders.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPES = tuple(DTYPE_BYTES)
BYTE_ORDERS = ("little", "big")


@message
@dataclass(frozen=True)
class OutputSpec:
    """One input's output options, fully resolved (no "as the checkpoint says" left to decide).

    `dimensions`: keep the first n values of each vector (None: all); `normalize`: L2-normalize
    each vector (after the cut); `dtype` / `endianness`: element type and byte order of BASE64 and
    BYTES payloads.
    """

    task: Task = Task.DENSE
    format: Format = Format.FLOAT
    dimensions: Optional[int] = None
    normalize: bool = False
    dtype: str = "float32"
    endianness: str = "little"

    def __post_init__(self) -> None:
        # Decoded from a socket the enums arrive as their values.
        object.__setattr__(self, "task", Task(self.task))
        object.__setattr__(self, "format", Format(self.format))
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}")
        if self.endianness not in BYTE_ORDERS:
            raise ValueError(f"unknown byte order {self.endianness!r}")
        if self.dimensions is not None and self.dimensions < 1:
            raise ValueError(f"dimensions must be at least 1, got {self.dimensions}")
        if (self.task is Task.SPARSE) != (self.format in SPARSE_FORMATS):
            raise ValueError(f"format {self.format.value!r} does not fit task {self.task.value!r}")
