"""Input validation and limits in the tokenizer stage, on the bundled MiniLM tokenizer."""

from __future__ import annotations

import pytest

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info

INFO = make_model_info(max_input_length=16, vocab_size=30522)


def _tok(hf_tokenizer, **kw):
    return InputTokenizer(ServerArgs(**kw), INFO, tokenizer=hf_tokenizer)


def _err(fn) -> EmbeddingError:
    with pytest.raises(EmbeddingError) as e:
        fn()
    return e.value


def test_text_gets_special_tokens(hf_tokenizer):
    ((ids, types),) = _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text=["hello world"]))
    assert ids.tolist() == [101, 7592, 2088, 102] and types is None


@pytest.mark.parametrize("texts", [[""], ["   "], ["ok", "\n\t"]])
def test_empty_or_whitespace_text_is_400(hf_tokenizer, texts):
    e = _err(lambda: _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text=texts)))
    assert e.kind == ErrorKind.INVALID_REQUEST and "empty" in e.message and e.param == "input"


def test_over_long_text_is_400_with_both_numbers(hf_tokenizer):
    e = _err(lambda: _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text=["word " * 40])))
    assert e.message == "The input at index 0 (42 tokens) is longer than the model's context length (16 tokens)."


def test_auto_truncate_cuts_at_the_limit_keeping_sep(hf_tokenizer):
    ((ids, _),) = _tok(hf_tokenizer, allow_auto_truncate=True).tokenize(EmbeddingReqInput(text=["word " * 40]))
    assert len(ids) == 16 and ids[-1] == 102


def test_token_ids_pass_through_and_are_checked(hf_tokenizer):
    t = _tok(hf_tokenizer)
    ((ids, _),) = t.tokenize(EmbeddingReqInput(input_ids=[[5, 6, 7]]))
    assert ids.tolist() == [5, 6, 7]
    assert _err(lambda: t.tokenize(EmbeddingReqInput(input_ids=[[5, -1]]))).kind == ErrorKind.INVALID_REQUEST
    e = _err(lambda: t.tokenize(EmbeddingReqInput(input_ids=[[1], [30522]])))
    assert "30522" in e.message and "index 1" in e.message
    assert _err(lambda: t.tokenize(EmbeddingReqInput(input_ids=[[]]))).kind == ErrorKind.INVALID_REQUEST
    assert _err(lambda: t.tokenize(EmbeddingReqInput(input_ids=[list(range(17))]))).kind == ErrorKind.INVALID_REQUEST


def test_input_longer_than_batch_token_budget_is_400(hf_tokenizer):
    e = _err(lambda: _tok(hf_tokenizer, max_num_tokens=8).tokenize(EmbeddingReqInput(text=["word " * 10])))
    assert "12 tokens" in e.message and "--max-num-tokens 8" in e.message


def test_empty_request_is_400(hf_tokenizer):
    assert _err(lambda: _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text=[]))).kind == ErrorKind.INVALID_REQUEST


def test_lone_surrogate_text_is_400_not_a_tokenizer_crash(hf_tokenizer):
    e = _err(lambda: _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text=["fine", "bad \ud800 text"])))
    assert e.kind == ErrorKind.INVALID_REQUEST and "index 1" in e.message and "Unicode" in e.message


@pytest.mark.parametrize("ids", [[10**30], [1, -(10**25)], [10**5000]])
def test_token_ids_beyond_int64_are_400(hf_tokenizer, ids):
    e = _err(lambda: _tok(hf_tokenizer).tokenize(EmbeddingReqInput(input_ids=[ids])))
    assert e.kind == ErrorKind.INVALID_REQUEST and "outside the vocabulary" in e.message


def test_token_id_outside_the_vocabulary_names_langchains_setting(hf_tokenizer):
    # tiktoken's cl100k ids run to 100,276: what LangChain's OpenAIEmbeddings sends by default
    e = _err(lambda: _tok(hf_tokenizer).tokenize(EmbeddingReqInput(input_ids=[[101, 2023], [9906, 100256]])))
    assert e.kind == ErrorKind.INVALID_REQUEST and e.param == "input"
    assert "Token id 100256 at index 1 is outside the vocabulary [0, 30522)" in e.message
    assert "check_embedding_ctx_length=False" in e.message and "LangChain" in e.message


# ----- per-request options (vLLM truncate_prompt_tokens, TEI truncate/truncation_direction, prompts) -----
TEXT = "one two three four five six seven eight nine ten"


def test_request_truncation_left_keeps_the_last_tokens_and_the_specials(hf_tokenizer):
    full = hf_tokenizer(TEXT)["input_ids"]
    req = EmbeddingReqInput(text=[TEXT], truncate=True, truncation_side="left", max_tokens=5)
    ((ids, _),) = _tok(hf_tokenizer).tokenize(req)
    assert ids.tolist() == [full[0], *full[-4:-1], full[-1]]  # [CLS] + the last 3 words + [SEP]


def test_request_truncation_right_and_per_request_switch(hf_tokenizer):
    full = hf_tokenizer(TEXT)["input_ids"]
    ((ids, _),) = _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text=[TEXT], truncate=True, max_tokens=5))
    assert ids.tolist() == [*full[:4], full[-1]]
    # truncate=False refuses even where the server would cut; the message names the index and count.
    long = "word " * 40
    e = _err(
        lambda: _tok(hf_tokenizer, allow_auto_truncate=True).tokenize(
            EmbeddingReqInput(text=["ok", long], truncate=False)
        )
    )
    assert e.message == "The input at index 1 (42 tokens) is longer than the model's context length (16 tokens)."


def test_token_id_inputs_truncate_on_the_requested_side(hf_tokenizer):
    t = _tok(hf_tokenizer)
    ((ids, _),) = t.tokenize(
        EmbeddingReqInput(input_ids=[list(range(1, 11))], truncate=True, max_tokens=4, truncation_side="left")
    )
    assert ids.tolist() == [7, 8, 9, 10]
    ((ids, _),) = t.tokenize(EmbeddingReqInput(input_ids=[list(range(1, 11))], truncate=True, max_tokens=4))
    assert ids.tolist() == [1, 2, 3, 4]


def test_max_tokens_without_truncation_is_a_400_naming_it(hf_tokenizer):
    e = _err(lambda: _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text=[TEXT], truncate=False, max_tokens=5)))
    assert e.message == (
        "The input at index 0 has 12 tokens, more than the request's max_tokens=5; allow truncation to cut it."
    )


def test_prompt_is_prefixed_and_special_tokens_can_be_left_out(hf_tokenizer):
    t = _tok(hf_tokenizer)
    ((ids, _),) = t.tokenize(EmbeddingReqInput(text=["hello world"], prompt="query: "))
    assert ids.tolist() == hf_tokenizer("query: hello world")["input_ids"]
    ((ids, _),) = t.tokenize(EmbeddingReqInput(text=["hello world"], add_special_tokens=False))
    assert ids.tolist() == [7592, 2088]
