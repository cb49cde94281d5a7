"""sentence-transformers' `encode` arguments, checked and applied the way its `encode` applies them.

`sglang.SentenceTransformer` (entrypoints/sentence_transformer.py) embeds through the Engine and
hands the float vectors here. The steps and their order are sentence-transformers' (read from its
`SentenceTransformer.encode` / `_inference` / `quantize_embeddings`):
`truncate_dim` cut -> `normalize_embeddings` (L2, eps 1e-12) -> `precision` quantization over the
whole call's vectors -> numpy array / one tensor / a list of tensors, and the first row for a single
input. Arguments that only steer where sentence-transformers runs its model (`device` lists,
`pool`, `chunk_size`) or that ask for outputs the engine does not return (`output_value` other than
"sentence_embedding") are refused by name with a ValueError, as sentence-transformers refuses
unknown keyword arguments.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import numpy as np

from sglang.srt.frontend.embedding_types import quantize

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
# The prompt names encode_query / encode_document pick when the call names none, first found wins.
QUERY_PROMPT_NAMES = ("query",)
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")


def split_inputs(inputs: Any) -> tuple[list, bool]:
    """(the inputs as a list, whether `inputs` was one input): sentence-transformers' rule, where
    a list, a tuple or a numpy array of strings is a batch and anything else (a string, a dict)
    one input."""
    if isinstance(inputs, (list, tuple)):
        batch = list(inputs)
    elif isinstance(inputs, np.ndarray) and inputs.ndim >= 1 and inputs.dtype.kind in ("U", "O"):
        batch = inputs.tolist()
    else:
        return [inputs], True
    for i, x in enumerate(batch):
        if not isinstance(x, (str, dict)):
            raise TypeError(
                f"inputs[{i}] is a {type(x).__name__}; inputs are strings "
                "(or {'text', 'image'} dicts on image models)."
            )
    return batch, False


def check_arguments(
    batch_size: int,
    output_value: Optional[str],
    precision: str,
    truncate_dim: Optional[int],
    device: Any,
    engine_device: str,
    pool: Any,
    chunk_size: Optional[int],
    extra: dict[str, Any],
) -> None:
    """ValueError naming the first argument this engine cannot honour."""
    if extra:
        raise ValueError(f"encode() has been called with keyword arguments this engine does not use: {sorted(extra)}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    if output_value != "sentence_embedding":
        raise ValueError(
            f"output_value {output_value!r} is not supported: the engine returns sentence embeddings only "
            "(per-token vectors: Engine.encode(multi_vector=True) on a ColBERT model, or /embed_all)."
        )
    if precision not in PRECISIONS:
        raise ValueError(f"Precision {precision!r} is not supported, must be one of {list(PRECISIONS)}")
    if truncate_dim is not None and (
        isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim < 1
    ):
        raise ValueError(f"truncate_dim must be a positive integer, got {truncate_dim!r}.")
    check_device(device, engine_device)
    if pool is not None:
        raise ValueError(
            "pool is not supported: the engine's processes are the pool (start it with dp_size=N for N replicas)."
        )
    if chunk_size is not None:
        raise ValueError("chunk_size is not supported: it sizes multi-process chunks, and the engine batches itself.")


def check_device(device: Any, engine_device: str) -> None:
    """`device` may only name where the engine already runs ("cpu", "cuda", "cuda:1"): the model
    moves at start-up (SentenceTransformer(..., device=...)), never per call."""
    if device is None:
        return
    name = str(device)
    if name != engine_device and name != engine_device.split(":")[0]:
        raise ValueError(
            f"device {name!r} is not supported: this engine runs on {engine_device!r}, "
            "chosen when it starts (SentenceTransformer(..., device=...))."
        )


def pick_prompt_name(prompts: dict[str, str], candidates: tuple[str, ...]) -> Optional[str]:
    """encode_query / encode_document: the first candidate the model's prompts define."""
    return next((name for name in candidates if name in prompts), None)


def resolve_prompt(
    prompts: dict[str, str], default_prompt: Optional[str], prompt_name: Optional[str], prompt: Optional[str]
) -> str:
    """The prefix of this call's texts ("" for none): `prompt` wins over `prompt_name` (with a
    warning, as sentence-transformers gives), a name must be one of `prompts`, and a call naming
    neither gets the default prompt."""
    if prompt is not None:
        if prompt_name is not None:
            logger.warning(
                "Provide either a `prompt`, a `prompt_name`, or neither, but not both. "
                "Ignoring the `prompt_name` in favor of `prompt`."
            )
        return prompt
    if prompt_name is not None:
        if prompt_name not in prompts:
            raise ValueError(
                f"Prompt name '{prompt_name}' not found in the configured prompts dictionary "
                f"with keys {list(prompts)!r}."
            )
        return prompts[prompt_name]
    return default_prompt or ""


def finish(vectors: np.ndarray, truncate_dim: Optional[int], normalize: bool, precision: str) -> np.ndarray:
    """float32 [n, dim] rows -> the rows sentence-transformers returns: cut, normalized, quantized."""
    if truncate_dim is not None:
        vectors = vectors[:, :truncate_dim]
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, np.float32(1e-12))
    if precision == "float32" or not len(vectors):
        return np.ascontiguousarray(vectors, dtype=np.float32)
    return quantize_like_st(vectors, precision)


def quantize_like_st(vectors: np.ndarray, precision: str) -> np.ndarray:
    """`quantize_embeddings(vectors, precision)`: int8 / uint8 calibrated on the call's own rows
    (one row has no spread to calibrate on: ValueError, as sentence-transformers raises)."""
    if precision in ("int8", "uint8") and len(vectors) == 1:
        raise ValueError(
            f"Cannot compute {precision} quantization ranges from a single embedding: encode at least two "
            "inputs in one call, or encode floats and quantize them with ranges from a representative set."
        )
    if precision in ("int8", "uint8") and len(vectors) < 100:
        logger.warning(
            "Computing %s quantization buckets based on %d embeddings; %s quantization is more stable with "
            "ranges calculated from more embeddings.",
            precision,
            len(vectors),
            precision,
        )
    return quantize(np.ascontiguousarray(vectors, dtype=np.float32), precision)


def convert(rows: np.ndarray, single: bool, convert_to_numpy: bool, convert_to_tensor: bool) -> Any:
    """The return value: one tensor (`convert_to_tensor`), a numpy array (`convert_to_numpy`, the
    default), else a list of 1-D tensors; a single input's row alone. No inputs: an empty array,
    an empty tensor or an empty list."""
    if convert_to_tensor or not convert_to_numpy:
        import torch  # only these two forms need it

        if not len(rows):
            out = torch.tensor([]) if convert_to_tensor else []
        else:
            out = torch.from_numpy(rows)
            out = out if convert_to_tensor else list(out)
    else:
        out = rows if len(rows) else np.array([])
    return out[0] if single else out
