"""Qwen3-Reranker scores against the model card's transformers recipe, on a tiny random checkpoint:
the prompt, the two LM-head rows, and the ways a checkpoint becomes a reranker (its name, vLLM's
hf_overrides, --chat-template qwen3-reranker, a converted *ForSequenceClassification)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sglang.srt.configs.llm_reranker import QWEN3_RERANKER
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.model_loader.weight_utils import iterate_weights
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.parity import make_runner
from test.helpers.tiny_reranker import (
    DOCUMENTS,
    QUERY,
    build_converted_seq_cls,
    build_tiny_qwen3_reranker,
    card_scores,
)

pytestmark = pytest.mark.slow

INSTRUCTION = "Given a question about places, find the passage that names them"
VLLM_OVERRIDES = {
    "architectures": ["Qwen3ForSequenceClassification"],
    "classifier_from_token": ["no", "yes"],
    "is_original_qwen3_reranker": True,
}


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory) -> str:
    return build_tiny_qwen3_reranker(str(tmp_path_factory.mktemp("rr") / "Qwen3-Reranker-tiny"), seed=5)


@pytest.fixture(scope="module")
def runner(reranker_dir):
    return make_runner(reranker_dir)


@pytest.fixture(scope="module")
def reference(reranker_dir) -> np.ndarray:
    return card_scores(reranker_dir, QUERY, DOCUMENTS)


_TOKENIZERS: dict[int, InputTokenizer] = {}


def _scores(runner, model_dir, docs=DOCUMENTS, instruction=None) -> np.ndarray:
    """sigmoid of the served logit: the model card's softmax over ("no", "yes")."""
    tok = _TOKENIZERS.get(id(runner))
    if tok is None:
        tok = _TOKENIZERS[id(runner)] = InputTokenizer(ServerArgs(model_path=model_dir), runner.model_info())
    items = tok.tokenize(EmbeddingReqInput(text_pairs=[(QUERY, d) for d in docs], instruction=instruction))
    logits = runner.embed([ids for ids, _ in items]).astype(np.float64)
    assert logits.shape == (len(docs), 1)
    return 1.0 / (1.0 + np.exp(-logits[:, 0]))


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(ours - ref) / np.abs(ref)))


def test_scores_match_the_model_card(runner, reranker_dir, reference):
    # DOCUMENTS have mixed lengths, so the batch is a packed mixed-length one.
    assert _rel(_scores(runner, reranker_dir), reference) <= 1e-4
    with_instruction = card_scores(reranker_dir, QUERY, DOCUMENTS, INSTRUCTION)
    assert _rel(_scores(runner, reranker_dir, instruction=INSTRUCTION), with_instruction) <= 1e-4
    assert np.abs(with_instruction - reference).max() > 1e-3  # the instruction does reach the model


def test_batch_equals_one_at_a_time(runner, reranker_dir):
    batched = _scores(runner, reranker_dir)
    single = np.array([_scores(runner, reranker_dir, [d])[0] for d in DOCUMENTS])
    reordered = _scores(runner, reranker_dir, DOCUMENTS[::-1])[::-1]
    assert np.abs(batched - single).max() <= 1e-5 and np.abs(batched - reordered).max() <= 1e-5


def test_only_the_two_lm_head_rows_are_held(runner, reranker_dir):
    from transformers import AutoTokenizer

    info = runner.model_info()
    assert info.is_classifier and info.labels == ("yes",) and info.rerank_prompt is QWEN3_RERANKER
    assert info.to_dict()["rerank_prompt"] == "qwen3-reranker"
    head = runner.output_head.dense_head.weight
    assert tuple(head.shape) == (2, 48)  # not [vocab, hidden]
    tok = AutoTokenizer.from_pretrained(reranker_dir)
    rows = [tok.convert_tokens_to_ids(t) for t in ("no", "yes")]
    assert torch.equal(head, runner.model.embed_tokens.weight[rows].float())  # tied checkpoint: the embeddings
    assert not any("lm_head" in n for n, _ in runner.model.named_parameters())


def test_vllm_hf_overrides_on_an_untied_checkpoint(tmp_path):
    d = build_tiny_qwen3_reranker(str(tmp_path / "plain-qwen3"), seed=3, tie_word_embeddings=False)
    assert any(name == "lm_head.weight" for name, _ in iterate_weights(d))  # rows come from the LM head
    r = make_runner(d, json_model_override_args=json.dumps(VLLM_OVERRIDES))
    assert r.model_info().rerank_prompt is QWEN3_RERANKER
    assert _rel(_scores(r, d), card_scores(d, QUERY, DOCUMENTS)) <= 1e-4


def test_converted_seq_cls_checkpoint_with_the_template_flag(tmp_path, reranker_dir, reference):
    d = build_converted_seq_cls(reranker_dir, str(tmp_path / "converted"))  # a name that says nothing
    r = make_runner(d, chat_template="qwen3-reranker")
    info = r.model_info()
    assert info.architecture == "Qwen3ForSequenceClassification" and info.rerank_prompt is QWEN3_RERANKER
    assert _rel(_scores(r, d), reference) <= 1e-4


@pytest.mark.gpu
def test_scores_on_cuda_match_the_model_card(reranker_dir, reference):
    r = make_runner(reranker_dir, device="cuda", dtype="float32")
    assert _rel(_scores(r, reranker_dir), reference) <= 1e-4
    batched = _scores(r, reranker_dir)
    single = np.array([_scores(r, reranker_dir, [d])[0] for d in DOCUMENTS])
    assert np.abs(batched - single).max() <= 1e-5
