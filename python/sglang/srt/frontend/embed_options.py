"""The peers' per-request embedding options, checked and written onto an EmbeddingReqInput.

Every route that embeds (/v1/embeddings, /embeddings, TEI's /embed, Cohere's /v2/embed, vLLM's
/pooling) speaks some of these dialects; each check here names the field and the bad value in a
400, and each setter fills the EmbeddingReqInput fields the tokenizer, runner and detokenizer read:
- truncation: vLLM `truncate_prompt_tokens` (k > 0 keeps the last k tokens, -1 the model's own
  limit) and `truncation_side`; TEI `truncate` + `truncation_direction`; Cohere `truncate` +
  `max_tokens` (its route maps them here too);
- output: `normalize` (vLLM's newer `use_activation`), vLLM `embed_dtype` / `endianness` (base64 and
  bytes element type and byte order); frontend/output_options.py turns them into the OutputSpec;
- prompts: `prompt_name`, a raw `prompt` or `instruction` (configs/prompts.py), or `input_type`
  (frontend/input_types.py);
- fields a peer defines that would change the output and that this server does not implement are
  refused by name (`refuse_unsupported`), while harmless ones (`user`, `priority`) pass.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Optional

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.configs.prompts import resolve_prompt
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.input_types import input_type_prompt
from sglang.srt.wire.io_struct import (
    BINARY_FORMATS,
    EMBED_DTYPES,
    ENCODING_FORMATS,
    TRUNCATION_SIDES,
    EmbeddingReqInput,
)

# Request fields other servers define that change what comes back, and what to use here instead.
UNSUPPORTED_FIELDS: dict[str, str] = {
    "use_activation": "send `normalize: false` for the raw pooled vector",
    "messages": "chat-form requests are taken by /v1/embeddings and /pooling",
    "chat_template": "per-request chat templates are not accepted; start the server with --chat-template",
    "chat_template_kwargs": "chat-form requests are taken by /v1/embeddings and /pooling",
    "add_generation_prompt": "chat-form requests are taken by /v1/embeddings and /pooling",
    "continue_final_message": "chat-form requests are taken by /v1/embeddings and /pooling",
    "mm_processor_kwargs": "image sizes are set with --mm-min-pixels / --mm-max-pixels",
    "padding": "inputs are never padded here",
    "output_dimension": "send `dimensions`",
    "output_dtype": "send `embedding_types`",
    "lora_path": "adapters are not supported",
    "return_sparse": "sparse models answer sparse vectors on their own; see /embed_sparse",
}
ENDIANNESS_VALUES = ("native", "little", "big")


def invalid(message: str, param: str) -> EmbeddingError:
    return EmbeddingError(ErrorKind.INVALID_REQUEST, message, param=param)


def refuse_unsupported(fields: dict[str, Any], unsupported: dict[str, str] = UNSUPPORTED_FIELDS) -> None:
    """400 naming the first field of `fields` (a request's extra keys) that would change the output."""
    for name, value in fields.items():
        if name in unsupported and value is not None:
            raise invalid(f"`{name}` is not supported by this server: {unsupported[name]}.", name)


def check_choice(value: Optional[str], allowed: Iterable[str], param: str) -> None:
    allowed = tuple(allowed)
    if value is not None and value not in allowed:
        names = ", ".join(f"'{a}'" for a in allowed)
        raise invalid(f"{param} {value!r} is not supported; use one of {names}.", param)


def check_encoding_format(value: str, param: str = "encoding_format", binary: bool = False) -> None:
    """`float` or `base64`; with `binary` (vLLM's /v1/embeddings and /pooling) also `bytes` / `bytes_only`."""
    if value in ENCODING_FORMATS or (binary and value in BINARY_FORMATS):
        return
    names = "'float', 'base64', 'bytes' or 'bytes_only'" if binary else "'float' or 'base64'"
    raise invalid(
        f"{param} {value!r} is not supported; use {names} "
        "(int8, uint8, binary and ubinary vectors: `embedding_types`).",
        param,
    )


def resolve_use_activation(request) -> None:
    """vLLM's `use_activation` is its newer name for `normalize`: it becomes `normalize`; both given
    and different is a 400 (which one did the client mean?)."""
    value = getattr(request, "use_activation", None)
    if value is None:
        return
    if request.normalize is not None and request.normalize != value:
        raise invalid(
            f"`use_activation` ({str(value).lower()}) and `normalize` ({str(request.normalize).lower()}) "
            "are the same option and disagree; send one of them.",
            "use_activation",
        )
    request.normalize = value


def set_truncation_vllm(
    req: EmbeddingReqInput, k: Optional[int], side: Optional[str], context_length: int, param: str
) -> None:
    """vLLM's `truncate_prompt_tokens`: k > 0 keeps the last k tokens (or `truncation_side`'s end),
    -1 truncates at the model's own limit; 0, values below -1 and k beyond the context are 400."""
    check_choice(side, TRUNCATION_SIDES, "truncation_side")
    if k is None:
        if side is not None:
            req.truncation_side = side
        return
    if isinstance(k, bool) or not isinstance(k, int) or k == 0 or k < -1:
        raise invalid(f"{param} must be -1 (the model's limit) or a positive number of tokens, got {k!r}.", param)
    if k > context_length:
        raise invalid(
            f"{param} value ({k}) is greater than the model's context length ({context_length}). "
            "Please select a smaller truncation size.",
            param,
        )
    req.truncate = True
    req.truncation_side = side or "left"
    req.max_tokens = None if k == -1 else k


def set_truncation_tei(req: EmbeddingReqInput, truncate: Optional[bool], direction: Optional[str]) -> None:
    """TEI's `truncate` (None: the server's --allow-auto-truncate) and `truncation_direction`."""
    if direction is not None:
        lowered = direction.lower() if isinstance(direction, str) else direction
        check_choice(lowered, TRUNCATION_SIDES, "truncation_direction")
        req.truncation_side = lowered
    if truncate is not None:
        req.truncate = truncate


def set_output(
    req: EmbeddingReqInput,
    normalize: Optional[bool] = None,
    embed_dtype: Optional[str] = None,
    endianness: Optional[str] = None,
) -> None:
    """`normalize` (None: as the checkpoint says), vLLM's `embed_dtype` and `endianness` for base64."""
    check_choice(embed_dtype, EMBED_DTYPES, "embed_dtype")
    check_choice(endianness, ENDIANNESS_VALUES, "endianness")
    req.normalize = normalize
    req.embed_dtype = embed_dtype or "float32"
    if endianness == "native" or endianness is None:
        req.endianness = sys.byteorder
    else:
        req.endianness = endianness


def set_prompt(
    req: EmbeddingReqInput,
    model_info: ModelInfo,
    prompt_name: Optional[str] = None,
    prompt: Optional[str] = None,
    instruction: Optional[str] = None,
    name_param: str = "prompt_name",
    input_type: Optional[str] = None,
) -> None:
    """The prefix this request's text inputs get: `prompt` / `instruction` (raw), `prompt_name`,
    `input_type` (frontend/input_types.py), or the server's default. Token-id and image inputs
    take no prompt of their own."""
    if prompt is not None and instruction is not None and prompt != instruction:
        raise invalid("Send either `prompt` or `instruction` (they are the same thing), not both.", "instruction")
    raw = prompt if prompt is not None else instruction
    if input_type is not None:
        if raw is not None or prompt_name is not None:
            given = "prompt_name" if prompt_name is not None else ("prompt" if prompt is not None else "instruction")
            raise invalid(
                f"Send `input_type` or `{given}`, not both: each one picks the prompt of the inputs.", "input_type"
            )
        prefix, param = input_type_prompt(model_info, input_type), "input_type"
    else:
        prefix = resolve_prompt(model_info.prompts, model_info.default_prompt, prompt_name, raw, name_param)
        param = name_param if prompt_name is not None else "prompt"
    explicit = raw is not None or prompt_name is not None or input_type is not None
    if req.text is None:
        if explicit and prefix:
            raise invalid("Prompts apply to text inputs only, not to token ids or images.", param)
        return
    if prefix and not model_info.prompt_in_pooling:
        raise invalid(
            "This model's pooling leaves the prompt's tokens out (sentence-transformers include_prompt: "
            "false), which this server does not implement; send the text without a prompt.",
            param,
        )
    req.prompt = prefix
