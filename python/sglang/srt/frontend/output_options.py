"""The one place a request's output options become its OutputSpec (wire/output_spec.py).

Routes fill the request-level fields of EmbeddingReqInput (encoding_format, dimensions,
normalize, embed_dtype, endianness, token_output) after checking them; this turns them, with the
model's info, into the resolved spec every input of the request carries to the scheduler and the
renderer. Nothing downstream falls back to a default of its own.
"""

from __future__ import annotations

from sglang.srt.configs.model_info import ModelInfo, OutputKind
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.wire.io_struct import FORMAT_BYTES, FORMAT_BYTES_ONLY, FORMAT_RAW, EmbeddingReqInput
from sglang.srt.wire.output_spec import SPARSE_FORMATS, Format, OutputSpec, Task

# Request-level format names that are not a Format value.
_FORMAT_ALIASES = {FORMAT_RAW: Format.ARRAY, FORMAT_BYTES: Format.BYTES, FORMAT_BYTES_ONLY: Format.BYTES}


def output_format(encoding_format: str) -> Format:
    """The renderer's format for a request's `encoding_format` (raw: numbers for the route itself)."""
    alias = _FORMAT_ALIASES.get(encoding_format)
    return alias if alias is not None else Format(encoding_format)


def output_spec(req: EmbeddingReqInput, model_info: ModelInfo) -> OutputSpec:
    """Resolve `req`'s output options for `model_info`'s model.

    - task: per-token rows when the route asked for them, sparse weights for a sparse format,
      scores for a model whose output is logits, else a dense vector;
    - normalize: a dense vector (or scores) as the request says, else as the checkpoint says;
      per-token rows only when the request says so (a ColBERT head normalizes its own rows);
      sparse weights never;
    - dtype / endianness: as asked (the routes accept them only where they show).

    Options no route would have let through (an in-process caller's) are an INVALID_REQUEST error.
    """
    try:
        return _resolve(req, model_info)
    except ValueError as e:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, f"Invalid output options: {e}.", param="encoding_format") from e


def _resolve(req: EmbeddingReqInput, model_info: ModelInfo) -> OutputSpec:
    fmt = output_format(req.encoding_format)
    if req.token_output is not None:
        task = Task.TOKENS
    elif fmt in SPARSE_FORMATS:
        task = Task.SPARSE
    elif model_info.embeddings_output is OutputKind.LOGITS:
        task = Task.SCORES
    else:
        task = Task.DENSE
    if task is Task.TOKENS:
        normalize = bool(req.normalize)
    elif task is Task.SPARSE:
        normalize = False
    else:
        normalize = model_info.normalize if req.normalize is None else bool(req.normalize)
    return OutputSpec(
        task=task,
        format=fmt,
        dimensions=None if task is Task.SPARSE else req.dimensions,
        normalize=normalize,
        dtype=req.embed_dtype,
        endianness=req.endianness,
    )
