"""How a checkpoint is read as an LLM reranker (configs/llm_reranker.py) and the prompt's text."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglang.srt.configs.llm_reranker import (
    QWEN3_RERANKER,
    TokenScoreConfig,
    is_rerank_prompt_name,
    resolve_llm_reranker,
)
from sglang.srt.errors import ConfigError
from test.helpers.tiny_reranker import CARD_INSTRUCTION, CARD_PREFIX, CARD_SUFFIX

VLLM_OVERRIDES = dict(classifier_from_token=["no", "yes"], is_original_qwen3_reranker=True)


def _resolve(arch="Qwen3ForCausalLM", names=("Qwen/Qwen3-Reranker-0.6B",), chat_template=None, decoder=True, **cfg):
    return resolve_llm_reranker(arch, decoder, SimpleNamespace(**cfg), names, chat_template)


def test_prompt_is_the_model_cards():
    p = QWEN3_RERANKER
    assert (p.prefix, p.suffix, p.default_instruction) == (CARD_PREFIX, CARD_SUFFIX, CARD_INSTRUCTION)
    assert p.format_body("q", "d") == f"<Instruct>: {CARD_INSTRUCTION}\n<Query>: q\n<Document>: d"
    assert p.format_body("q", "d", "Find code") == "<Instruct>: Find code\n<Query>: q\n<Document>: d"
    # Placeholders inside user text stay text (one pass over the template).
    assert p.format_body("{document}", "{query}", "{query}") == (
        "<Instruct>: {query}\n<Query>: {document}\n<Document>: {query}"
    )
    assert p.is_formatted(CARD_PREFIX + "<Instruct>: x\n<Query>: y\n") and not p.is_formatted("what is <|im_start|>")


@pytest.mark.parametrize(
    "names, arch",
    [
        (("Qwen/Qwen3-Reranker-0.6B",), "Qwen3ForCausalLM"),
        ((None, "/models/hub/models--Qwen--Qwen3-Reranker-4B/snapshots/x"), "Qwen3ForCausalLM"),
        (("/data/qwen3_reranker_8b",), "Qwen3ForCausalLM"),
    ],
)
def test_named_qwen3_reranker_is_detected_without_flags(names, arch):
    r = _resolve(arch, names)
    assert r.prompt is QWEN3_RERANKER
    assert r.token_scores == TokenScoreConfig(("no", "yes"), two_way=True) and r.token_scores.labels == ("yes",)


def test_other_checkpoints_are_not_rerankers():
    assert _resolve(names=("Qwen/Qwen3-Embedding-0.6B",)) is None
    assert _resolve("LlamaForCausalLM", ("someone/Qwen3-Reranker-llama",)) is None  # not a Qwen3 architecture
    assert _resolve(is_original_qwen3_reranker=False) is None  # the opt-out


def test_vllm_hf_overrides():
    r = _resolve("Qwen3ForSequenceClassification", ("/ckpt/any",), **VLLM_OVERRIDES)
    assert r.prompt is QWEN3_RERANKER and r.token_scores == TokenScoreConfig(("no", "yes"), True)
    # classifier_from_token alone: one label per token, the client's text as given.
    r = _resolve("Qwen3ForSequenceClassification", ("/ckpt/any",), classifier_from_token=["Yes"])
    assert r.prompt is None and r.token_scores.labels == ("Yes",)
    with pytest.raises(ConfigError, match="exactly two"):
        _resolve(classifier_from_token=["yes"], is_original_qwen3_reranker=True)
    with pytest.raises(ConfigError, match="non-empty list"):
        _resolve(classifier_from_token="yes")


def test_chat_template_flag_and_converted_checkpoints():
    for flag in ("qwen3-reranker", "qwen3_reranker", "/srv/templates/qwen3_reranker.jinja"):
        assert is_rerank_prompt_name(flag)
        r = _resolve(names=("/ckpt/any",), chat_template=flag)
        assert r.prompt is QWEN3_RERANKER and r.token_scores.two_way
    assert not is_rerank_prompt_name("gme-qwen2-vl") and not is_rerank_prompt_name(None)
    # A converted Qwen3ForSequenceClassification keeps its own score head, gains the prompt.
    r = _resolve("Qwen3ForSequenceClassification", ("tomaarsen/Qwen3-Reranker-0.6B-seq-cls",))
    assert r.prompt is QWEN3_RERANKER and r.token_scores is None
    with pytest.raises(ConfigError, match="decoder"):
        _resolve("BertModel", ("/ckpt/bert",), chat_template="qwen3-reranker", decoder=False)
    with pytest.raises(ConfigError, match="ForCausalLM"):
        _resolve("Qwen3Model", ("/ckpt/any",), chat_template="qwen3-reranker")
