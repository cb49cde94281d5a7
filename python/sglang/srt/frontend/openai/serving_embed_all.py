"""POST /embed_all (TEI-compatible): every token's final hidden state, for any model.

TEI answers `[[[f32, ...], ...], ...]`: per input, one vector per token ([CLS] and [SEP]
included), no pooling, no normalization. `truncate` / `truncation_direction` and `prompt_name`
apply as on TEI's /embed (frontend/embed_options.py). The vectors are the backbone's last hidden states (for
a ColBERT checkpoint too: its projected, normalized vectors are /v1/embeddings' multi-vector
output). Errors come in TEI's `{"error", "error_type"}` shape (frontend/http/error_styles.py).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.configs.model_info import Capability, ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.embed_options import set_prompt, set_truncation_tei
from sglang.srt.frontend.http.error_styles import TeiError, tei_empty
from sglang.srt.frontend.http.response_parts import Parts, json_array
from sglang.srt.frontend.inputs import normalize_input
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.task_protocol import EmbedAllRequest
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_FLOAT, EmbeddingReqInput
from sglang.srt.wire.token_kinds import TOKENS_HIDDEN


def check_per_token_model(model_info: ModelInfo, served: str, route: str) -> None:
    """The models whose every token's hidden state can be served (Capability.TOKEN_EMBED: /embed_all,
    vLLM's /pooling `token_embed`): text encoders and decoders, not classifiers or CLIP / SigLIP
    (TEI's 424 Backend on TEI's routes)."""
    if Capability.TOKEN_EMBED in model_info.capabilities:
        return
    if model_info.is_classifier:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"Model '{served}' is a classifier; {route} serves embedding models.",
            param="model",
        )
    # The only other models without it: image towers.
    raise EmbeddingError(
        ErrorKind.INVALID_REQUEST,
        f"Model '{served}' is a text-image model (CLIP / SigLIP) with one vector per input; {route} serves "
        "text encoders.",
        param="model",
    )


def serves_per_token(model_info: ModelInfo) -> bool:
    return Capability.TOKEN_EMBED in model_info.capabilities


class ServingEmbedAll(OpenAIServingBase[EmbedAllRequest]):
    endpoint = "/embed_all"

    def validate(self, request: EmbedAllRequest) -> None:
        try:
            check_per_token_model(self.tm.model_info, self.served_model_name, self.endpoint)
        except EmbeddingError as e:  # TEI: the model cannot do what the route does
            raise TeiError(e.message, "Backend", param="model") from None
        inputs = request.inputs
        if inputs == [] or inputs == "" or (isinstance(inputs, list) and any(x == "" or x == [] for x in inputs)):
            raise tei_empty("inputs")

    def convert(self, request: EmbedAllRequest) -> EmbeddingReqInput:
        req, _ = normalize_input(request.inputs, encoding_format=FORMAT_FLOAT)
        req.token_output = TOKENS_HIDDEN
        set_truncation_tei(req, request.truncate, request.truncation_direction)
        set_prompt(req, self.tm.model_info, request.prompt_name)
        return req

    def render(self, request: EmbedAllRequest, result: EmbeddingResult, rid: Optional[str]) -> Parts:
        return json_array(result.payloads)  # the rows as the detokenizer made them, not joined
