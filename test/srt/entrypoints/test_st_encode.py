"""sentence-transformers' encode arguments (entrypoints/st_encode.py), against sentence-transformers itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers.util import quantize_embeddings

from sglang.srt.entrypoints.st_encode import (
    DOCUMENT_PROMPT_NAMES,
    QUERY_PROMPT_NAMES,
    check_arguments,
    convert,
    finish,
    pick_prompt_name,
    resolve_prompt,
    split_inputs,
)

GOOD = dict(
    batch_size=32,
    output_value="sentence_embedding",
    precision="float32",
    truncate_dim=None,
    device=None,
    engine_device="cpu",
    pool=None,
    chunk_size=None,
    extra={},
)


def _vectors(n: int = 50, dim: int = 37, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
@pytest.mark.parametrize("n", [2, 7, 150])
def test_precision_equals_quantize_embeddings(precision, n):
    vectors = _vectors(n)
    ours = finish(vectors, None, False, precision)
    ref = quantize_embeddings(vectors, precision=precision)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    np.testing.assert_array_equal(ours, ref)


def test_cut_then_normalize_then_quantize_in_sentence_transformers_order():
    vectors = _vectors(20, 64) * 3
    cut = vectors[:, :16]
    normalized = torch.nn.functional.normalize(torch.from_numpy(cut), p=2, dim=1).numpy()
    np.testing.assert_allclose(finish(vectors, 16, True, "float32"), normalized, atol=1e-7)
    np.testing.assert_array_equal(finish(vectors, 16, True, "ubinary"), quantize_embeddings(normalized, "ubinary"))
    # Without normalize_embeddings the cut rows keep their length (no renormalization).
    np.testing.assert_array_equal(finish(vectors, 16, False, "float32"), cut)
    assert finish(vectors, 1000, False, "float32").shape == (20, 64)  # a cut past the width keeps all of it


def test_int8_of_one_vector_is_refused_as_sentence_transformers_refuses_it():
    with pytest.raises(ValueError, match="single embedding"):
        quantize_embeddings(_vectors(1), precision="int8")
    with pytest.raises(ValueError, match="single embedding"):
        finish(_vectors(1), None, False, "int8")
    assert finish(_vectors(1), None, False, "binary").shape == (1, 5)  # binary needs no calibration


def test_return_types_follow_sentence_transformers():
    rows = _vectors(3, 8)
    out = convert(rows, False, True, False)
    assert isinstance(out, np.ndarray) and out.shape == (3, 8) and out.dtype == np.float32
    one = convert(rows[:1], True, True, False)
    assert isinstance(one, np.ndarray) and one.shape == (8,)
    tensor = convert(rows, False, False, True)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (3, 8) and tensor.dtype == torch.float32
    listed = convert(rows, False, False, False)
    assert isinstance(listed, list) and len(listed) == 3 and all(t.shape == (8,) for t in listed)
    assert isinstance(convert(rows[:1], True, False, False), torch.Tensor)
    packed = convert(finish(rows, None, False, "binary"), False, False, True)
    assert packed.dtype == torch.int8
    empty = np.zeros((0, 8), dtype=np.float32)
    assert convert(empty, False, True, False).shape == (0,)
    assert convert(empty, False, False, True).shape == (0,)
    assert convert(empty, False, False, False) == []


def test_split_inputs_is_sentence_transformers_rule():
    assert split_inputs("a") == (["a"], True)
    assert split_inputs({"text": "a"}) == ([{"text": "a"}], True)
    assert split_inputs(["a", "b"]) == (["a", "b"], False)
    assert split_inputs(("a",)) == (["a"], False)
    assert split_inputs(np.array(["a", "b"])) == (["a", "b"], False)
    assert split_inputs([]) == ([], False)
    with pytest.raises(TypeError, match=r"inputs\[1\] is a int"):
        split_inputs(["a", 3])


@pytest.mark.parametrize(
    "change, match",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": True}, "batch_size"),
        ({"output_value": "token_embeddings"}, "output_value 'token_embeddings'"),
        ({"output_value": None}, "output_value None"),
        ({"precision": "float16"}, "Precision 'float16' is not supported"),
        ({"truncate_dim": 0}, "truncate_dim must be a positive integer"),
        ({"device": "cuda"}, "device 'cuda' is not supported"),
        ({"device": ["cpu", "cpu"]}, "device"),
        ({"pool": {"processes": []}}, "pool is not supported"),
        ({"chunk_size": 10}, "chunk_size is not supported"),
        ({"extra": {"task": "query"}}, r"does not use: \['task'\]"),
    ],
)
def test_arguments_the_engine_cannot_honour_are_refused_by_name(change, match):
    with pytest.raises(ValueError, match=match):
        check_arguments(**{**GOOD, **change})


def test_the_engines_own_device_is_accepted():
    check_arguments(**{**GOOD, "device": "cpu"})
    check_arguments(**{**GOOD, "device": "cuda", "engine_device": "cuda:0"})
    check_arguments(**{**GOOD, "device": torch.device("cuda:1"), "engine_device": "cuda:1"})
    with pytest.raises(ValueError, match="cuda:1"):
        check_arguments(**{**GOOD, "device": "cuda:1", "engine_device": "cuda:0"})


def test_prompts_resolve_as_sentence_transformers_resolves_them(caplog):
    prompts = {"query": "query: ", "document": "", "passage": "passage: "}
    assert resolve_prompt(prompts, "default: ", None, None) == "default: "
    assert resolve_prompt(prompts, None, None, None) == ""
    assert resolve_prompt(prompts, "default: ", "query", None) == "query: "
    assert resolve_prompt(prompts, "default: ", "document", None) == ""  # an empty prompt, not the default
    assert resolve_prompt(prompts, None, "query", "raw: ") == "raw: "  # prompt wins, with a warning
    assert "Ignoring the `prompt_name`" in caplog.text
    with pytest.raises(ValueError, match="Prompt name 'nope' not found"):
        resolve_prompt(prompts, None, "nope", None)


def test_query_and_document_prompt_names_as_sentence_transformers_5():
    # sentence-transformers always knows "query" and "document" (empty unless configured), so
    # encode_document picks "document" over a configured "passage" there too.
    assert pick_prompt_name({"query": "", "document": "", "passage": "p: "}, DOCUMENT_PROMPT_NAMES) == "document"
    assert pick_prompt_name({"passage": "p: ", "corpus": "c: "}, DOCUMENT_PROMPT_NAMES) == "passage"
    assert pick_prompt_name({"corpus": "c: "}, DOCUMENT_PROMPT_NAMES) == "corpus"
    assert pick_prompt_name({}, QUERY_PROMPT_NAMES) is None


def test_constructor_maps_device_and_refuses_sentence_transformers_loading_options():
    from sglang.srt.entrypoints.sentence_transformer import SentenceTransformer, _engine_device

    assert _engine_device(None) == {}
    assert _engine_device("cpu") == {"device": "cpu"}
    assert _engine_device("cuda") == {"device": "cuda", "base_gpu_id": 0}
    assert _engine_device("cuda:3") == {"device": "cuda", "base_gpu_id": 3}
    for bad in ("mps", "cuda:x", "cpu:1"):
        with pytest.raises(ValueError, match="device"):
            _engine_device(bad)
    # Refused before any process starts.
    for kwargs, match in [
        ({"modules": []}, "modules is not supported"),
        ({"model_kwargs": {"torch_dtype": "bfloat16"}}, "model_kwargs is not supported.*dtype"),
        ({"backend": "onnx"}, "backend 'onnx'"),
        ({"truncate_dim": 0}, "truncate_dim"),
        ({"device": "mps"}, "device 'mps'"),
    ]:
        with pytest.raises(ValueError, match=match):
            SentenceTransformer(None, **kwargs)
