"""Classification heads (cross-encoders, decoder rewards) against transformers' *ForSequenceClassification."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang.srt.configs.model_info import OutputKind
from sglang.srt.errors import ConfigError
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.parity import MIXED_TEXTS, make_runner, tokenize_for_runner
from test.helpers.tiny_task_models import build_tiny_bert_task, build_tiny_decoder_classifier, build_tiny_xlm_roberta

PAIRS = [
    ("the cat", "a dog in the house by the river"),
    ("river", "the river by the mountain with a green tree"),
    ("blue books", "three blue books on the table of the city"),
    ("fire", "water"),
]
LABELS = {0: "negative", 1: "positive", 2: "neutral"}


def _hf_logits(model_dir: str, first: list[str], second=None) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    enc = tok(first, second, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.numpy()


def _pair_inputs(runner, model_dir: str):
    """Pairs through the server's own pair tokenization (InputTokenizer.tokenize_pairs)."""
    tokenizer = InputTokenizer(ServerArgs(model_path=model_dir), runner.model_info())
    items = tokenizer.tokenize(EmbeddingReqInput(text_pairs=PAIRS))
    return [ids for ids, _ in items], [types for _, types in items]


def test_bert_cross_encoder_with_token_types(tmp_path):
    d = build_tiny_bert_task(str(tmp_path / "bert"), "seq_cls", num_labels=3, id2label=LABELS)
    runner = make_runner(d)  # served as-is: no flags
    info = runner.model_info()
    assert info.embeddings_output is OutputKind.LOGITS and info.labels == ("negative", "positive", "neutral")
    assert info.embedding_dim == 3 and info.pair_token_types and not runner.model_config.normalize
    ids, types = _pair_inputs(runner, d)
    assert all(t is not None and t.max() == 1 for t in types)  # the document is segment 1
    ours = runner.embed(ids, types)
    ref = _hf_logits(d, [q for q, _ in PAIRS], [doc for _, doc in PAIRS])
    assert np.abs(ours - ref).max() <= 1e-4
    assert np.abs(runner.embed(ids) - ours).max() > 1e-3  # token types matter


def test_xlm_roberta_reranker(tmp_path):
    d = build_tiny_xlm_roberta(str(tmp_path / "reranker"), task="seq_cls", num_labels=1)
    runner = make_runner(d)
    assert runner.model_config.architecture == "XLMRobertaForSequenceClassification"
    ids, types = _pair_inputs(runner, d)
    assert all(t is None for t in types)  # RoBERTa has one token type: pairs carry none
    ours = runner.embed(ids)
    ref = _hf_logits(d, [q for q, _ in PAIRS], [doc for _, doc in PAIRS])
    assert ours.shape == (len(PAIRS), 1) and np.abs(ours - ref).max() <= 1e-4


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_decoder_classifier_reads_last_non_pad_token(tmp_path, family):
    # The BPE tokenizer appends its end token, which is also the pad token: like transformers,
    # the score head reads the token before it.
    d = build_tiny_decoder_classifier(str(tmp_path / family), family, num_labels=3, id2label=LABELS)
    runner = make_runner(d)  # no --is-embedding needed
    ids = tokenize_for_runner(d, MIXED_TEXTS)
    ours = runner.embed(ids)
    assert np.abs(ours - _hf_logits(d, MIXED_TEXTS)).max() <= 1e-4
    only_pad = np.full(3, runner.model_config.hf_config.pad_token_id, dtype=np.int32)
    first = runner.embed([only_pad[:1]])  # no non-pad token: transformers reads position 0
    assert np.abs(runner.embed([only_pad]) - first).max() <= 1e-5


def test_checkpoint_without_head_weights_is_a_config_error(tmp_path):
    d = build_tiny_bert_task(str(tmp_path / "bert"), "seq_cls", num_labels=2)
    from safetensors.torch import load_file, save_file

    path = f"{d}/model.safetensors"
    save_file(
        {k: v for k, v in load_file(path).items() if not k.startswith("classifier.")}, path, metadata={"format": "pt"}
    )
    with pytest.raises(
        ConfigError, match="classification head .* lacks weights for: classifier.bias, classifier.weight"
    ):
        make_runner(d)


def test_sparse_head_flag_is_refused_for_classifiers(tmp_path):
    d = build_tiny_bert_task(str(tmp_path / "bert"), "seq_cls", num_labels=2)
    with pytest.raises(ConfigError, match="--sparse-head does not apply"):
        make_runner(d, sparse_head="splade")
