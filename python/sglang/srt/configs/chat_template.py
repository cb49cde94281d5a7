"""Chat templates for embedding inputs: how one `{"text", "image"}` item becomes a prompt string.

`--chat-template` names a registered template (`gme-qwen2-vl`) or a file:
- `*.json` with the fields of `ChatTemplate` (`name`, `system_message`, `system_template`,
  `user_template`, `assistant_prefix`, `suffix`, `image_placeholder`), or Hugging Face's
  `chat_template.json` (`{"chat_template": "<jinja source>"}`);
- anything else is read as a Jinja chat template, rendered like `tokenizer.apply_chat_template`
  with one user message whose content is `[{"type": "image"}?, {"type": "text", "text": ...}?]`
  and `add_generation_prompt=True`.

Embedding models read one vector per prompt, so a template describes a single user turn (plus a
fixed system message) and what follows it, e.g. GME's trailing `<|endoftext|>`, the token whose
hidden state is pooled.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Optional, Protocol

from sglang.srt.errors import ConfigError


class PromptTemplate(Protocol):
    name: str

    def render(self, text: Optional[str], has_image: bool) -> str: ...


@dataclass(frozen=True)
class ChatTemplate:
    """A fixed-layout template; `{system_message}` and `{content}` are replaced literally (no
    str.format, so braces in user text are safe). Content is the image placeholder, then the text."""

    name: str
    system_message: str = ""
    system_template: str = "{system_message}"
    user_template: str = "{content}"
    assistant_prefix: str = ""
    suffix: str = ""
    image_placeholder: str = ""  # what an image becomes in the prompt ("": the template takes no images)

    def render(self, text: Optional[str], has_image: bool) -> str:
        if has_image and not self.image_placeholder:
            raise ValueError(f"chat template '{self.name}' has no image placeholder")
        content = (self.image_placeholder if has_image else "") + (text or "")
        system = self.system_template.replace("{system_message}", self.system_message)
        return system + self.user_template.replace("{content}", content) + self.assistant_prefix + self.suffix


class JinjaChatTemplate:
    """A Hugging Face style Jinja chat template, in the same sandbox transformers renders it in."""

    def __init__(self, name: str, source: str) -> None:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["raise_exception"] = raise_exception
        try:
            self.template = env.from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ConfigError(f"Chat template {name} is not valid Jinja: line {e.lineno}: {e.message}") from e
        self.name = name
        self.source = source  # whole conversations (`messages`) render through apply_chat_template

    def render(self, text: Optional[str], has_image: bool) -> str:
        content = ([{"type": "image"}] if has_image else []) + ([{"type": "text", "text": text}] if text else [])
        return self.template.render(messages=[{"role": "user", "content": content}], add_generation_prompt=True)


_TEMPLATES: dict[str, ChatTemplate] = {}


def register_chat_template(template: ChatTemplate) -> None:
    _TEMPLATES[template.name] = template


def chat_template_names() -> list[str]:
    return sorted(_TEMPLATES)


# GME (Alibaba-NLP/gme-Qwen2-VL-*-Instruct), as its gme_inference.py builds each input.
register_chat_template(
    ChatTemplate(
        name="gme-qwen2-vl",
        system_message="You are a helpful assistant.",
        system_template="<|im_start|>system\n{system_message}<|im_end|>\n",
        user_template="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_prefix="<|im_start|>assistant\n",
        suffix="<|endoftext|>",
        image_placeholder="<|vision_start|><|image_pad|><|vision_end|>",
    )
)


def load_chat_template(name_or_path: str) -> PromptTemplate:
    """A registered template by name, else a template file (see the module docstring)."""
    if name_or_path in _TEMPLATES:
        return _TEMPLATES[name_or_path]
    path = os.path.expanduser(name_or_path)
    if not os.path.isfile(path):
        raise ConfigError(
            f"--chat-template '{name_or_path}' is neither a known template "
            f"({', '.join(chat_template_names())}) nor a file"
        )
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"Cannot read chat template file {path}: {e}") from e
    stem = os.path.splitext(os.path.basename(path))[0]
    if not path.endswith(".json"):
        return JinjaChatTemplate(stem, source)
    try:
        data = json.loads(source)
    except json.JSONDecodeError as e:
        raise ConfigError(f"Chat template file {path} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"Chat template file {path} must hold a JSON object")
    if "chat_template" in data:
        return JinjaChatTemplate(stem, str(data["chat_template"]))
    fields = {f.name for f in dataclasses.fields(ChatTemplate)}
    unknown = sorted(set(data) - fields)
    if unknown or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(
            f"Chat template file {path}: fields must be strings among {', '.join(sorted(fields))}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return ChatTemplate(**{"name": stem, **data})
