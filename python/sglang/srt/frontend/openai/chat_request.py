"""vLLM's chat-form embedding requests: `messages` instead of `input` on /v1/embeddings and /pooling.

One conversation is one input, turned into what the route already embeds, so its vector is by
construction that of the equivalent `input`:
- text models: the conversation rendered as text, then tokenized without extra special tokens
  (`add_special_tokens` false unless the request says otherwise), i.e. the vector of that text sent
  as `input` with `"add_special_tokens": false`. The template is the server's Jinja
  `--chat-template` when it has one, else the tokenizer's own; a model with neither renders each
  message as `role: content\\n`;
- image models (GME, CLIP, SigLIP) and servers whose `--chat-template` is a fixed item layout
  (gme-qwen2-vl): one user message whose `text` parts (joined by newlines) and at most one
  `image_url` part become one `{"text", "image"}` item, rendered exactly as that item is.
Per-request `chat_template` is refused, as vLLM refuses it by default (a template is code the
server runs); `chat_template_kwargs` become template variables, never apply_chat_template options.
"""

from __future__ import annotations

from typing import Any, Optional

from sglang.srt.configs.chat_template import JinjaChatTemplate
from sglang.srt.configs.model_info import Capability
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.openai.protocol import MultimodalEmbeddingInput
from sglang.srt.utils.off_loop import off_loop

# apply_chat_template's own arguments: as chat_template_kwargs they would change what it returns.
RESERVED_KWARGS = frozenset(
    {
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
        "messages",
    }
)


def invalid(message: str, param: str) -> EmbeddingError:
    return EmbeddingError(ErrorKind.INVALID_REQUEST, message, param=param)


def check_chat_fields(request: Any) -> None:
    """The request-level rules of a chat-form body that need no model."""
    if request.input is not None:
        raise invalid("Send either `input` or `messages`, not both.", "messages")
    if not request.messages:
        raise invalid("`messages` cannot be empty.", "messages")
    if request.add_generation_prompt and request.continue_final_message:
        raise invalid(
            "`add_generation_prompt` and `continue_final_message` cannot both be true: the first opens a "
            "new assistant turn, the second continues the last message.",
            "continue_final_message",
        )
    if request.modality not in (None, "text"):
        raise invalid("`modality` does not apply to `messages`; send images as image_url content parts.", "modality")
    for key in sorted(request.chat_template_kwargs or {}):
        if key in RESERVED_KWARGS:
            raise invalid(f"chat_template_kwargs cannot set `{key}`: it is not a template variable.", key)


class ChatRequests:
    """Turns a chat-form request into the same request with `input` (one per serving class)."""

    def __init__(self, tokenizer, template, model_info) -> None:
        self.tokenizer = tokenizer
        # Jinja: the server's template renders whole conversations. A fixed layout (gme-qwen2-vl)
        # and every image model go through the {"text", "image"} item path instead.
        self.source: Optional[str] = template.source if isinstance(template, JinjaChatTemplate) else None
        self.as_item = Capability.IMAGE in model_info.capabilities or (template is not None and self.source is None)
        if self.source is None and not self.as_item:
            self.source = getattr(tokenizer, "chat_template", None) or None

    async def as_input(self, request: Any) -> Any:
        """A copy of `request` whose `input` is the conversation (one input) and `messages` None."""
        check_chat_fields(request)
        explicit = "add_special_tokens" in request.model_fields_set
        if self.as_item:
            item = self.item(request)
            return request.model_copy(update={"input": [item], "messages": None})
        chars = sum(len(t) for m in request.messages for t in m.texts())
        text = await off_loop(lambda: self.render(request), chars)
        special = request.add_special_tokens if explicit else False
        return request.model_copy(update={"input": text, "messages": None, "add_special_tokens": special})

    # ----- image models and fixed item layouts -----
    def item(self, request: Any) -> MultimodalEmbeddingInput:
        for name in ("add_generation_prompt", "continue_final_message"):
            if getattr(request, name):
                raise invalid(f"`{name}` does not apply here: this model's inputs use a fixed template.", name)
        if request.chat_template_kwargs:
            raise invalid(
                "`chat_template_kwargs` does not apply here: this model's inputs use a fixed template.",
                "chat_template_kwargs",
            )
        messages = request.messages
        if len(messages) != 1 or messages[0].role != "user":
            raise invalid(
                "This model embeds one user message per request (its text and at most one image); "
                f"got {len(messages)} message(s) with roles {', '.join(m.role for m in messages)}.",
                "messages",
            )
        texts, images = messages[0].texts(), messages[0].images()
        if len(images) > 1:
            raise invalid(f"The message holds {len(images)} images; one vector takes at most one.", "messages")
        text = "\n".join(texts) if texts else None
        if text is None and not images:
            raise invalid("The message has no content.", "messages")
        return MultimodalEmbeddingInput(text=text, image=images[0] if images else None)

    # ----- text models -----
    def render(self, request: Any) -> str:
        messages = request.messages
        for i, m in enumerate(messages):
            if m.images():
                raise invalid(f"messages[{i}] holds an image; this model does not take image inputs.", "messages")
        if self.source is None:
            return self.render_plain(request)
        conversation = [{**(m.model_extra or {}), "role": m.role, "content": "\n".join(m.texts())} for m in messages]
        try:
            return self.tokenizer.apply_chat_template(
                conversation,
                chat_template=self.source,
                tokenize=False,
                add_generation_prompt=request.add_generation_prompt,
                continue_final_message=request.continue_final_message,
                **(request.chat_template_kwargs or {}),
            )
        except Exception as e:  # the template's raise_exception, a missing final message to continue...
            raise invalid(f"The chat template failed: {e}", "messages") from None

    def render_plain(self, request: Any) -> str:
        """No template: each message as `role: content` plus a newline (the last one without it
        when continuing the final message)."""
        for name in ("add_generation_prompt", "chat_template_kwargs"):
            if getattr(request, name):
                raise invalid(
                    f"`{name}` needs a chat template and this model has none; "
                    "start the server with --chat-template FILE.jinja.",
                    name,
                )
        text = "".join(f"{m.role}: {chr(10).join(m.texts())}\n" for m in request.messages)
        return text[:-1] if request.continue_final_message else text


def input_required() -> EmbeddingError:
    return invalid(
        "'input' is required: a string, a list of strings, a list of token ids, a list of token-id lists, "
        'or a list of {"text", "image"} objects (or send a conversation as vLLM\'s `messages`).',
        "input",
    )


class ChatForm:
    """Mixin for a serving class whose request may carry `messages` (before OpenAIServingBase in
    the bases): the conversation becomes `input` before the route's own steps run."""

    _chat: Optional[ChatRequests] = None

    async def handle(self, request: Any, rid: Optional[str] = None):
        if request.messages is not None:
            self.check_model_name(request.model)  # a 404 before any rendering
            if self._chat is None:
                tm = self.tm
                self._chat = ChatRequests(tm.input_tokenizer.tokenizer, tm.multimodal.template, tm.model_info)
            request = await self._chat.as_input(request)
        return await super().handle(request, rid)
