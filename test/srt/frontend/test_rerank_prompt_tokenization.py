"""LLM-reranker pairs through InputTokenizer: the Qwen3-Reranker prompt, token for token as the
model card's process_inputs builds it, per-request instructions, truncation and refusals."""

from __future__ import annotations

import pytest

from sglang.srt.configs.llm_reranker import QWEN3_RERANKER
from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info
from test.helpers.tiny_reranker import CARD_PREFIX, DOCUMENTS, QUERY, card_input_ids, reranker_tokenizer


@pytest.fixture(scope="module")
def hf_tokenizer():
    return reranker_tokenizer()


def _tok(hf_tokenizer, context=512, prompt=QWEN3_RERANKER, **kw) -> InputTokenizer:
    info = make_model_info(max_input_length=context, vocab_size=len(hf_tokenizer), rerank_prompt=prompt)
    return InputTokenizer(ServerArgs(**kw), info, tokenizer=hf_tokenizer)


def _pairs(docs=DOCUMENTS, query=QUERY):
    return [(query, d) for d in docs]


def test_prompt_tokens_match_the_model_card(hf_tokenizer):
    items = _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text_pairs=_pairs()))
    assert [ids.tolist() for ids, _ in items] == card_input_ids(hf_tokenizer, QUERY, DOCUMENTS)
    assert all(types is None and ids.dtype.name == "int32" for ids, types in items)
    custom = "Given a question, find the passage about places"
    items = _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text_pairs=_pairs(), instruction=custom))
    assert [ids.tolist() for ids, _ in items] == card_input_ids(hf_tokenizer, QUERY, DOCUMENTS, custom)


def test_formatted_queries_pass_through(hf_tokenizer):
    # vLLM's recipe: the client formats query and document; the pair is joined as the tokenizer joins pairs.
    query = CARD_PREFIX + f"<Instruct>: x\n<Query>: {QUERY}\n"
    ((ids, _),) = _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text_pairs=[(query, "<Document>: river")]))
    assert ids.tolist() == hf_tokenizer(query, "<Document>: river")["input_ids"]
    with pytest.raises(EmbeddingError) as e:
        _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text_pairs=[(query, "d")], instruction="x"))
    assert e.value.param == "instruction"


def test_truncation_cuts_the_document_end_and_keeps_the_suffix(hf_tokenizer):
    full = card_input_ids(hf_tokenizer, QUERY, [DOCUMENTS[3]])[0]
    limit = len(full) - 4
    with pytest.raises(EmbeddingError, match="longer than the model's context length"):
        _tok(hf_tokenizer, context=limit).tokenize(EmbeddingReqInput(text_pairs=_pairs([DOCUMENTS[3]])))
    ((ids, _),) = _tok(hf_tokenizer, context=limit, allow_auto_truncate=True).tokenize(
        EmbeddingReqInput(text_pairs=_pairs([DOCUMENTS[3]]))
    )
    suffix = hf_tokenizer.encode(QWEN3_RERANKER.suffix, add_special_tokens=False)
    assert len(ids) == limit and ids.tolist()[-len(suffix) :] == suffix
    assert ids.tolist()[: limit - len(suffix)] == full[: limit - len(suffix)]
    with pytest.raises(EmbeddingError, match="prompt alone"):
        _tok(hf_tokenizer, context=20, allow_auto_truncate=True).tokenize(EmbeddingReqInput(text_pairs=_pairs()))


def test_bad_instructions_are_refused(hf_tokenizer):
    for bad in ("", "   ", "\ud800"):
        with pytest.raises(EmbeddingError) as e:
            _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text_pairs=_pairs(), instruction=bad))
        assert e.value.param == "instruction"
    with pytest.raises(EmbeddingError, match="only to LLM rerankers") as e:
        _tok(hf_tokenizer, prompt=None).tokenize(EmbeddingReqInput(text_pairs=_pairs(), instruction="x"))
    with pytest.raises(EmbeddingError) as e:
        _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text_pairs=[(QUERY, " ")]))
    assert e.value.param == "documents"
