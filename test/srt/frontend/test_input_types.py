"""`input_type`: one definition for the prompt it picks and ColBERT's query / document side, and
the multi-vector refusals of options per-token rows would not honour."""

from __future__ import annotations

import pytest

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.model_info import OutputKind
from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.embed_options import set_prompt
from sglang.srt.frontend.input_types import input_type_prompt, token_side
from sglang.srt.frontend.openai.multi_vector import check_multi_vector_options
from sglang.srt.frontend.openai.protocol import EmbeddingRequest
from sglang.srt.wire.io_struct import EmbeddingReqInput
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_QUERY
from test.helpers.model_info import make_model_info

E5 = (("query", "query: "), ("passage", "passage: "), ("Retrieval-query", "Represent the query: "))


@pytest.mark.parametrize(
    "input_type, prefix, side",
    [
        ("search_query", "query: ", TOKENS_QUERY),
        ("query", "query: ", TOKENS_QUERY),
        ("search_document", "passage: ", TOKENS_DOCUMENT),  # no `document` prompt: `passage` is next
        ("document", "passage: ", TOKENS_DOCUMENT),
        ("classification", None, TOKENS_DOCUMENT),  # no prompt of that name: the text as it is
        ("Retrieval-query", "Represent the query: ", TOKENS_DOCUMENT),  # the model's own prompt names
        (None, None, TOKENS_DOCUMENT),
    ],
)
def test_one_value_picks_the_prompt_and_the_colbert_side(input_type, prefix, side):
    info = make_model_info(prompts=E5)
    assert input_type_prompt(info, input_type) == prefix
    assert token_side(input_type) == side
    req = EmbeddingReqInput(text=["hello"])
    set_prompt(req, info, input_type=input_type)
    assert req.prompt == prefix


def test_unknown_input_type_and_two_prompts_are_400_naming_input_type():
    info = make_model_info(prompts=E5)
    with pytest.raises(EmbeddingError) as e:
        input_type_prompt(info, "summary")
    assert e.value.param == "input_type" and "search_query" in e.value.message and "Retrieval-query" in e.value.message
    for extra in ({"prompt_name": "query"}, {"prompt": "x: "}, {"instruction": "x: "}):
        with pytest.raises(EmbeddingError) as e:
            set_prompt(EmbeddingReqInput(text=["hello"]), info, input_type="search_query", **extra)
        assert e.value.param == "input_type" and next(iter(extra)) in e.value.message


def test_a_model_without_prompts_takes_cohere_types_as_sentence_transformers_does():
    info = make_model_info()  # ST's encode_query on such a model: no prefix
    req = EmbeddingReqInput(text=["hello"])
    set_prompt(req, info, input_type="search_query")
    assert req.prompt is None


def test_multi_vector_refuses_the_options_per_token_rows_ignore():
    lengths = make_model_info(
        embeddings_output=OutputKind.MULTI_VECTOR, colbert=ColbertConfig("checkpoint", dim=8, query_length=32)
    )
    free = make_model_info(colbert=ColbertConfig("file", maxsim="mean"))  # bge-m3: inputs as they are
    for body, param in [
        ({"normalize": False}, "normalize"),
        ({"embed_dtype": "float16"}, "embed_dtype"),
        ({"endianness": "big"}, "endianness"),
        ({"embedding_types": ["int8"]}, "embedding_types"),
        ({"truncate": False}, "truncate"),
        ({"truncate_prompt_tokens": 8}, "truncate_prompt_tokens"),
        ({"add_special_tokens": False}, "add_special_tokens"),
    ]:
        request = EmbeddingRequest(input="x", **body)
        with pytest.raises(EmbeddingError) as e:
            check_multi_vector_options(request, lengths)
        assert e.value.param == param and param in e.value.message
    check_multi_vector_options(EmbeddingRequest(input="x", truncate=True, embed_dtype="float32"), free)
    check_multi_vector_options(EmbeddingRequest(input="x", endianness="little", input_type="query"), lengths)
