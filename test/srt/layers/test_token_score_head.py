"""The LLM-reranker head (layers/token_score_head.py): a few LM-head rows at each sequence's last
token, read from safetensors or .bin checkpoints without the rest of the matrix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from sglang.srt.errors import ConfigError
from sglang.srt.layers.token_score_head import TokenScoreHead, build_token_score_head, token_ids
from sglang.srt.model_loader.weight_utils import read_rows

VOCAB, HIDDEN = 10, 4


def _weights(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=gen),
        "lm_head.weight": torch.randn(VOCAB, HIDDEN, generator=gen),
    }


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_rows_are_read_from_either_format(tmp_path, kind):
    w = _weights(0)
    if kind == "safetensors":
        save_file(w, str(tmp_path / "model.safetensors"))
    else:
        torch.save(w, str(tmp_path / "pytorch_model.bin"))
    assert torch.equal(read_rows(str(tmp_path), ("lm_head.weight",), [7, 2]), w["lm_head.weight"][[7, 2]])
    assert read_rows(str(tmp_path), ("score.weight",), [0]) is None
    untied = build_token_score_head(str(tmp_path), SimpleNamespace(vocab_size=VOCAB), [3, 5], True, torch.device("cpu"))
    tied = SimpleNamespace(vocab_size=VOCAB, tie_word_embeddings=True)
    assert torch.equal(untied.weight, w["lm_head.weight"][[3, 5]])
    tied_head = build_token_score_head(str(tmp_path), tied, [3, 5], True, "cpu")
    assert torch.equal(tied_head.weight, w["model.embed_tokens.weight"][[3, 5]])  # tied: the embeddings


def test_missing_head_and_bad_ids_are_config_errors(tmp_path):
    save_file({"model.embed_tokens.weight": torch.zeros(VOCAB, HIDDEN)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConfigError, match="no LM head"):
        build_token_score_head(str(tmp_path), SimpleNamespace(vocab_size=VOCAB), [1, 2], True, "cpu")
    with pytest.raises(ConfigError, match="outside"):
        build_token_score_head(str(tmp_path), SimpleNamespace(vocab_size=VOCAB), [1, VOCAB], True, "cpu")
    tokenizer = SimpleNamespace(convert_tokens_to_ids=lambda t: {"yes": 4}.get(t, 0), unk_token_id=0, unk_token="<unk>")
    assert token_ids(tokenizer, ["yes"]) == [4]
    with pytest.raises(ConfigError, match="'no' is not in the tokenizer"):
        token_ids(tokenizer, ["yes", "no"])


def test_last_token_logits_and_the_two_way_logit():
    rows = torch.randn(2, HIDDEN)
    hidden = torch.randn(7, HIDDEN)
    fb = SimpleNamespace(cu_seqlens=torch.tensor([0, 3, 4, 7], dtype=torch.int32))
    logits = TokenScoreHead(rows, two_way=False)(hidden, fb)
    expected = hidden[[2, 3, 6]] @ rows.T
    torch.testing.assert_close(logits, expected)
    two_way = TokenScoreHead(rows, two_way=True)(hidden, fb)
    assert two_way.shape == (3, 1) and two_way.dtype == torch.float32
    # sigmoid(yes - no) is the softmax over (no, yes): the model card's score.
    torch.testing.assert_close(torch.sigmoid(two_way[:, 0]), torch.softmax(expected, dim=1)[:, 1])
