"""The text fast path (plain_encode.py) gives exactly the transformers wrapper's ids."""

from __future__ import annotations

import pytest

from sglang.srt.frontend import plain_encode
from sglang.srt.frontend.plain_encode import PlainEncoder
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info
from test.helpers.texts import load_texts
from test.helpers.tiny_models import build_bpe_tokenizer
from test.helpers.wrapper_ids import wrapper_ids

ODD = ["[CLS] [SEP] [MASK] x", "ÀÉÎõü naïve café", "日本語のテキスト", "emoji 🙂 and\ttabs\nnewline", "a" * 3000]


@pytest.fixture(scope="module")
def bpe_tokenizer(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bpe"))
    build_bpe_tokenizer(out)
    return load_tokenizer(out, False)


@pytest.mark.parametrize("special", [True, False])
@pytest.mark.parametrize("max_length", [None, 256, 16, 3])
@pytest.mark.parametrize("side", ["right", "left"])
def test_same_ids_as_the_wrapper_on_the_corpus(hf_tokenizer, bpe_tokenizer, special, max_length, side):
    texts = load_texts() + ODD
    for tok in (hf_tokenizer, bpe_tokenizer):
        plain = PlainEncoder.of(tok)
        assert plain is not None, type(tok)
        tok.truncation_side = side
        try:
            assert plain.encode(texts, special, max_length, side) == wrapper_ids(tok, texts, special, max_length)
        finally:
            tok.truncation_side = "right"


def test_wrapper_state_does_not_leak_into_the_fast_path(hf_tokenizer):
    """The wrapper leaves its truncation set on its backend; the fast path's copies keep their own."""
    plain = PlainEncoder.of(hf_tokenizer)
    wrapper_ids(hf_tokenizer, ["word " * 40], True, 8)
    assert len(plain.encode(["word " * 40], True, None)[0]) == 42
    assert len(plain.encode(["word " * 40], True, 16)[0]) == 16


def test_split_special_tokens_is_honoured(hf_tokenizer):
    hf_tokenizer.split_special_tokens = True
    try:
        plain = PlainEncoder.of(hf_tokenizer)
        assert plain.encode(["[MASK] x"], True, None) == wrapper_ids(hf_tokenizer, ["[MASK] x"])
        assert plain.encode(["[MASK] x"], True, None) != wrapper_ids(
            load_tokenizer(hf_tokenizer.name_or_path, False), ["[MASK] x"]
        )
    finally:
        hf_tokenizer.split_special_tokens = False


def test_settings_beyond_the_cap_take_the_wrapper(hf_tokenizer, monkeypatch):
    monkeypatch.setattr(plain_encode, "MAX_SETTINGS", 2)
    plain = PlainEncoder.of(hf_tokenizer)
    assert plain.encode(["a b"], True, 10) is not None and plain.encode(["a b"], True, 11) is not None
    assert plain.encode(["a b"], True, 12) is None
    assert plain.encode(["a b"], True, 10) is not None  # kept settings still answer


def test_not_for_other_tokenizers():
    class Custom:
        def __call__(self, *a, **k):  # pragma: no cover - never called
            raise AssertionError

    assert PlainEncoder.of(Custom()) is None


@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("side", ["right", "left"])
def test_input_tokenizer_unchanged_with_and_without_the_fast_path(hf_tokenizer, truncate, side):
    """InputTokenizer's ids and errors are the wrapper's: fitting, cut (each side) and refused inputs."""
    info = make_model_info(max_input_length=16, vocab_size=30522)
    fast = InputTokenizer(ServerArgs(allow_auto_truncate=truncate), info, tokenizer=hf_tokenizer)
    slow = InputTokenizer(ServerArgs(allow_auto_truncate=truncate), info, tokenizer=hf_tokenizer)
    slow._plain = None
    assert fast._plain is not None
    for texts in (["hello world"], ["hello world", "Über " * 30], ["Über " * 30], load_texts()[:20]):
        for max_tokens in (None, 5):
            req = EmbeddingReqInput(text=texts, truncation_side=side, max_tokens=max_tokens)
            outcomes = []
            for t in (fast, slow):
                try:
                    outcomes.append([ids.tolist() for ids, _ in t.tokenize(req)])
                except Exception as e:  # the same refusal, word for word
                    outcomes.append((type(e), str(e)))
            assert outcomes[0] == outcomes[1]
