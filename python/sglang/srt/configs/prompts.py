"""Prompts: the text prefixes sentence-transformers models want before a query or a document.

A checkpoint names them in config_sentence_transformers.json (`prompts`, `default_prompt_name`);
the server may pick a default with --default-prompt-name (a configured name) or --default-prompt
(a raw prefix); a request picks one with `prompt_name`, or sends its own `prompt` / `instruction`.
As in sentence-transformers, the prefix is prepended to the text verbatim before tokenizing (so it
counts in the usage), a raw prompt wins over a name, a name wins over the default, and `query` and
`document` are always known names (empty prefixes unless the checkpoint configures them).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.errors import ConfigError, EmbeddingError, ErrorKind

# sentence-transformers (>= 5) always knows these two names, with empty prefixes by default.
STANDARD_PROMPT_NAMES = ("query", "document")


def known_prompts(configured: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The checkpoint's prompts plus empty `query` / `document` where it does not define them."""
    names = {name for name, _ in configured}
    return tuple(configured) + tuple((n, "") for n in STANDARD_PROMPT_NAMES if n not in names)


def default_prompt(
    prompts: tuple[tuple[str, str], ...],
    config_default_name: Optional[str],
    flag_name: Optional[str],
    flag_prompt: Optional[str],
) -> Optional[str]:
    """The prefix for requests that name no prompt (None: none), checked at start-up."""
    if flag_prompt is not None:
        return flag_prompt or None
    name = flag_name if flag_name is not None else config_default_name
    if name is None:
        return None
    table = dict(prompts)
    if name not in table:
        source = "--default-prompt-name" if flag_name is not None else "default_prompt_name in the checkpoint"
        raise ConfigError(f"{source} is `{name}`, which is not one of the model's prompts {sorted(table)}")
    return table[name] or None


def resolve_prompt(
    prompts: tuple[tuple[str, str], ...],
    default: Optional[str],
    prompt_name: Optional[str] = None,
    prompt: Optional[str] = None,
    param: str = "prompt_name",
) -> Optional[str]:
    """The prefix one request gets: its raw `prompt`, else its `prompt_name`, else the default."""
    if prompt is not None:
        return prompt or None
    if prompt_name is None:
        return default
    table = dict(prompts)
    if prompt_name not in table:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"Unknown prompt name '{prompt_name}'; this model knows {sorted(table)}.",
            param=param,
        )
    return table[prompt_name] or None
