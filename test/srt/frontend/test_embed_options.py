"""The peers' per-request options: quantized outputs against sentence-transformers' own function,
truncation / output / prompt settings, refusals that name the field, and the peers' error shapes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from sentence_transformers.util import quantize_embeddings

from sglang.srt.configs.prompts import default_prompt, known_prompts, resolve_prompt
from sglang.srt.errors import ConfigError, EmbeddingError, ErrorKind
from sglang.srt.frontend.embed_options import (
    refuse_unsupported,
    set_output,
    set_prompt,
    set_truncation_tei,
    set_truncation_vllm,
)
from sglang.srt.frontend.embedding_types import by_type, check_embedding_types, quantize
from sglang.srt.frontend.http.error_styles import ErrorStyles, TeiError, cohere_style, openai_style, tei_style
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info

RNG = np.random.default_rng(0)
VECTORS = RNG.standard_normal((7, 45)).astype(np.float32)  # 45: not a multiple of 8 (zero-padded bits)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_quantize_matches_sentence_transformers_for_a_batch(precision):
    ours = quantize(VECTORS, precision)
    ref = quantize_embeddings(VECTORS, precision)
    assert ours.dtype == ref.dtype
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_one_vector_is_scaled_between_its_own_min_and_max(precision):
    v = VECTORS[:1]
    ranges = np.stack([np.full(45, v.min()), np.full(45, v.max())])
    np.testing.assert_array_equal(quantize(v, precision), quantize_embeddings(v, precision, ranges=ranges))


def test_binary_packs_the_documented_example():
    v = np.array([[0.1, -0.2, 0.3, 0, 0.5, -0.5, 0.2, 0.1, 0.9]], np.float32)
    assert quantize(v, "ubinary").tolist() == [[171, 128]] and quantize(v, "binary").tolist() == [[43, 0]]


def test_by_type_shapes_and_base64():
    import base64

    out = by_type(VECTORS[:2], ["float", "base64", "ubinary"])
    assert np.asarray(out["float"]).shape == (2, 45) and np.asarray(out["ubinary"]).shape == (2, 6)
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(out["base64"][1]), "<f4"), VECTORS[1])
    back = orjson.loads(orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY))["float"]
    np.testing.assert_array_equal(np.asarray(back, np.float32), VECTORS[:2])  # shortest float32 form, exact


@pytest.mark.parametrize("types, fragment", [([], "cannot be empty"), (["int4"], "'int4' is not supported")])
def test_bad_embedding_types_name_the_value(types, fragment):
    with pytest.raises(EmbeddingError) as e:
        check_embedding_types(types)
    assert fragment in e.value.message and e.value.param == "embedding_types"
    assert check_embedding_types(["int8", "int8", "float"]) == ["int8", "float"]


@pytest.mark.parametrize(
    "k, side, want",
    [(5, None, (True, "left", 5)), (-1, None, (True, "left", None)), (5, "right", (True, "right", 5))],
)
def test_truncate_prompt_tokens(k, side, want):
    req = EmbeddingReqInput(text=["x"])
    set_truncation_vllm(req, k, side, 256, "truncate_prompt_tokens")
    assert (req.truncate, req.truncation_side, req.max_tokens) == want


@pytest.mark.parametrize("k, fragment", [(0, "got 0"), (-2, "got -2"), (257, "(257) is greater than")])
def test_bad_truncate_prompt_tokens_is_400_naming_the_value(k, fragment):
    with pytest.raises(EmbeddingError) as e:
        set_truncation_vllm(EmbeddingReqInput(text=["x"]), k, None, 256, "truncate_prompt_tokens")
    assert fragment in e.value.message and e.value.param == "truncate_prompt_tokens"


def test_tei_truncation_and_output_options():
    req = EmbeddingReqInput(text=["x"])
    set_truncation_tei(req, True, "Left")
    assert (req.truncate, req.truncation_side) == (True, "left")
    set_output(req, normalize=False, embed_dtype="bfloat16", endianness="big")
    assert (req.normalize, req.embed_dtype, req.endianness) == (False, "bfloat16", "big")
    set_output(req, endianness="native")
    assert req.endianness == "little"  # x86 / ARM
    for kwargs, param in (({"embed_dtype": "fp8_e4m3"}, "embed_dtype"), ({"endianness": "middle"}, "endianness")):
        with pytest.raises(EmbeddingError) as e:
            set_output(req, **kwargs)
        assert e.value.param == param and repr(kwargs[param]) in e.value.message


def test_output_changing_fields_are_refused_by_name_and_harmless_ones_pass():
    refuse_unsupported({"user": "u", "use_activation": None, "rid": "x"})
    with pytest.raises(EmbeddingError) as e:
        refuse_unsupported({"use_activation": False})
    assert e.value.param == "use_activation" and "`use_activation` is not supported" in e.value.message


PROMPTS = known_prompts((("query", "query: "), ("passage", "passage: ")))


def test_prompt_resolution_follows_sentence_transformers():
    assert dict(PROMPTS) == {"query": "query: ", "passage": "passage: ", "document": ""}
    assert resolve_prompt(PROMPTS, "passage: ", "query") == "query: "  # a name wins over the default
    assert resolve_prompt(PROMPTS, "passage: ", None) == "passage: "
    assert resolve_prompt(PROMPTS, None, "query", prompt="raw: ") == "raw: "  # a raw prompt wins
    assert resolve_prompt(PROMPTS, None, "document") is None  # an empty prompt is no prompt
    with pytest.raises(EmbeddingError) as e:
        resolve_prompt(PROMPTS, None, "nope")
    assert e.value.message == "Unknown prompt name 'nope'; this model knows ['document', 'passage', 'query']."


def test_default_prompt_flags():
    assert default_prompt(PROMPTS, None, "query", None) == "query: "
    assert default_prompt(PROMPTS, "passage", None, None) == "passage: "
    assert default_prompt(PROMPTS, "passage", None, "raw ") == "raw "
    with pytest.raises(ConfigError, match="--default-prompt-name is `nope`"):
        default_prompt(PROMPTS, None, "nope", None)


def test_set_prompt_on_texts_ids_and_include_prompt_false():
    info = make_model_info(prompts=PROMPTS, default_prompt="passage: ")
    req = EmbeddingReqInput(text=["x"])
    set_prompt(req, info, prompt_name="query")
    assert req.prompt == "query: "
    ids = EmbeddingReqInput(input_ids=[[1, 2]])
    set_prompt(ids, info)  # the default prompt does not touch token ids
    assert ids.prompt is None
    with pytest.raises(EmbeddingError, match="text inputs only"):
        set_prompt(ids, info, prompt="x ")
    with pytest.raises(EmbeddingError, match="include_prompt"):
        set_prompt(EmbeddingReqInput(text=["x"]), make_model_info(prompts=PROMPTS, prompt_in_pooling=False), "query")


def test_error_styles():
    err = EmbeddingError(ErrorKind.INVALID_REQUEST, "bad", param="x")
    status, body, _ = openai_style(err)
    assert status == 400 and orjson.loads(body)["error"]["message"] == "bad"
    assert tei_style(err)[:2] == (422, b'{"error":"bad","error_type":"Validation"}')
    assert tei_style(TeiError("`inputs` cannot be empty", "Empty"))[0] == 400
    assert tei_style(EmbeddingError(ErrorKind.QUEUE_FULL, "busy"))[:2] == (
        429,
        b'{"error":"busy","error_type":"Overloaded"}',
    )
    assert cohere_style(err)[:2] == (400, b'{"message":"bad"}')
    styles = ErrorStyles()
    styles.register(tei_style, "/embed")
    assert styles.for_path("/embed") is tei_style and styles.for_path("/v1/embeddings") is openai_style


def test_output_options_that_would_not_apply_are_400_naming_them():
    from sglang.srt.configs.model_info import OutputKind
    from sglang.srt.frontend.openai.protocol import EmbeddingRequest
    from sglang.srt.frontend.openai.serving_embedding import check_output_applies, embedding_request_input

    dense, logits = make_model_info(), make_model_info(embeddings_output=OutputKind.LOGITS)
    for info, body, param in [
        (logits, {"normalize": True}, "normalize"),
        (dense, {"embed_dtype": "float16"}, "embed_dtype"),  # float JSON numbers are float32 values
        (dense, {"endianness": "big", "encoding_format": "base64", "embedding_types": ["int8"]}, "endianness"),
    ]:
        with pytest.raises(EmbeddingError) as e:
            check_output_applies(EmbeddingRequest(input="x", **body), info)
        assert e.value.param == param and param in e.value.message
    check_output_applies(EmbeddingRequest(input="x", embed_dtype="float16", encoding_format="base64"), dense)
    check_output_applies(EmbeddingRequest(input="x", normalize=False, endianness="little"), dense)
    image = EmbeddingRequest(input="http://x/cat.png", modality="image", truncate_prompt_tokens=8)
    with pytest.raises(EmbeddingError) as e:
        embedding_request_input(image, dense, "m")
    assert e.value.param == "truncate_prompt_tokens"
