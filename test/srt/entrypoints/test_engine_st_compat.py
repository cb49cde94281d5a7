"""sglang.SentenceTransformer against sentence_transformers.SentenceTransformer on the same checkpoint:
the bundled all-MiniLM-L6-v2 with query / document prompts written into its sentence-transformers config.
Same call, same arguments: same type, shape, dtype, and values within 1e-4 (quantized: equal but for
a rare value on a bucket edge)."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch
from sentence_transformers.util import quantize_embeddings

import sglang
from test.helpers.texts import load_texts

pytestmark = pytest.mark.slow

PROMPTS = {"query": "query: ", "document": "passage: ", "classification": "classify: "}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    from sglang.srt.server_args import default_model_path

    d = tmp_path_factory.mktemp("minilm") / "model"
    shutil.copytree(default_model_path(), d)
    cfg_path = d / "config_sentence_transformers.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    cfg_path.write_text(json.dumps({**cfg, "prompts": PROMPTS}))
    return str(d)


@pytest.fixture(scope="module")
def ours(model_dir):
    with sglang.SentenceTransformer(model_dir, device="cpu", max_batch_size=16) as model:
        yield model


@pytest.fixture(scope="module")
def ref(model_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_dir, device="cpu")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    corpus = load_texts()
    return corpus[:14] + sorted(corpus, key=len)[-2:]  # the longest two are cut at 256 tokens


def _same(a, b, atol: float = 1e-4) -> None:
    """Same container, shape and dtype; values within `atol`."""
    assert type(a) is type(b)
    if isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y, atol)
        return
    assert a.shape == b.shape and a.dtype == b.dtype
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    b = b.numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"convert_to_tensor": True},
        {"convert_to_numpy": False},
        {"normalize_embeddings": True},
        {"truncate_dim": 128},
        {"truncate_dim": 64, "normalize_embeddings": True},
        {"prompt_name": "query"},
        {"prompt": "custom prefix: ", "batch_size": 5},
        {"prompt_name": "classification", "convert_to_tensor": True, "truncate_dim": 100},
    ],
)
def test_float_outputs_match(ours, ref, texts, kwargs):
    _same(ours.encode(texts, **kwargs), ref.encode(texts, **kwargs))
    _same(ours.encode(texts[3], **kwargs), ref.encode(texts[3], **kwargs))  # one string: one row


@pytest.mark.parametrize(
    "precision, convert",
    [
        ("int8", {}),
        ("uint8", {}),
        ("binary", {}),
        ("ubinary", {}),
        ("int8", {"convert_to_tensor": True}),
        ("binary", {"convert_to_numpy": False}),
    ],
)
def test_quantized_outputs_match(ours, ref, texts, precision, convert):
    kwargs = {"precision": precision, "normalize_embeddings": True, "truncate_dim": 200, **convert}
    got, want = ours.encode(texts, **kwargs), ref.encode(texts, **kwargs)
    _same(got, want, atol=1)  # a float a hair across a bucket edge lands one bucket over
    got = np.stack([np.asarray(r) for r in got])
    want = np.stack([np.asarray(r) for r in want])
    if precision.endswith("binary"):  # the bits themselves: only a value at ~0 may flip
        assert (np.unpackbits(got.view(np.uint8)) != np.unpackbits(want.view(np.uint8))).mean() < 0.001
    else:  # 255 buckets between min and max of 16 vectors: a 1e-6 difference moves ~0.2% of values
        assert (got != want).mean() < 0.01
    # Exactly quantize_embeddings of our own floats: the steps and their order are sentence-transformers'.
    floats = ours.encode(texts, normalize_embeddings=True, truncate_dim=200)
    np.testing.assert_array_equal(got, quantize_embeddings(floats, precision=precision))


def test_query_and_document_prompts_match(ours, ref, texts):
    _same(ours.encode_query(texts), ref.encode_query(texts))
    _same(ours.encode_document(texts), ref.encode_document(texts))
    _same(ours.encode_query(texts[0], prompt="other: "), ref.encode_query(texts[0], prompt="other: "))
    _same(ours.encode_document(texts[:4], prompt_name="query"), ref.encode_document(texts[:4], prompt_name="query"))
    q, d, plain = ours.encode_query(texts[0]), ours.encode_document(texts[0]), ours.encode(texts[0])
    assert (q @ d) < 0.999 and (q @ plain) < 0.999  # the prompts did reach the model


def test_default_prompt_name_and_model_truncate_dim(ours, ref, texts):
    try:
        ours.default_prompt_name = ref.default_prompt_name = "classification"
        ours.truncate_dim = ref.truncate_dim = 96
        _same(ours.encode(texts), ref.encode(texts))
        _same(ours.encode_query(texts), ref.encode_query(texts))  # "query" wins over the default
        assert ours.get_sentence_embedding_dimension() == ref.get_embedding_dimension() == 96
    finally:
        ours.default_prompt_name = ref.default_prompt_name = None
        ours.truncate_dim = ref.truncate_dim = None
    assert ours.get_embedding_dimension() == 384 and ours.max_seq_length == ref.max_seq_length == 256


def test_similarity_matches(ours, ref, texts):
    a, b = ours.encode(texts[:5]), ours.encode(texts[5:9])
    assert ours.similarity_fn_name == ref.similarity_fn_name == "cosine"
    _same(ours.similarity(a, b), ref.similarity(a, b), atol=1e-6)
    _same(ours.similarity_pairwise(a[:4], b), ref.similarity_pairwise(a[:4], b), atol=1e-6)


def test_empty_inputs_and_other_batch_shapes(ours, ref, texts):
    for kwargs in ({}, {"convert_to_tensor": True}, {"convert_to_numpy": False}):
        _same(ours.encode([], **kwargs), ref.encode([], **kwargs))
    _same(ours.encode(tuple(texts[:3])), ref.encode(tuple(texts[:3])))
    _same(ours.encode(np.array(texts[:3])), ref.encode(np.array(texts[:3])))
    _same(ours.encode(sentences=texts[:2]), ref.encode(texts[:2]))  # sentence-transformers < 6 spelling


def test_progress_bar_counts_batches(ours, texts, capsys):
    out = ours.encode(texts, batch_size=8, show_progress_bar=True)
    assert out.shape == (len(texts), 384)
    err = capsys.readouterr().err
    assert "Batches" in err and "2/2" in err  # 16 inputs, 8 per engine call


def test_progress_bar_default_follows_the_log_level(ours, texts, capsys):
    log = logging.getLogger("sglang.srt.entrypoints.st_face")
    ours.encode(texts[:2])
    assert "Batches" not in capsys.readouterr().err
    old = log.level
    try:
        log.setLevel(logging.INFO)
        ours.encode(texts[:2])
        assert "Batches" in capsys.readouterr().err
    finally:
        log.setLevel(old)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"output_value": "token_embeddings"}, "output_value"),
        ({"precision": "float16"}, "Precision 'float16'"),
        ({"device": "cuda"}, "device 'cuda'"),
        ({"pool": {}}, "pool"),
        ({"task": "query"}, "task"),
        ({"prompt_name": "nope"}, "Prompt name 'nope' not found"),
    ],
)
def test_refusals_name_the_argument_and_harm_nothing(ours, texts, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ours.encode(texts[:2], **kwargs)
    assert ours.encode(texts[0]).shape == (384,)


def test_int8_of_one_input_is_refused_like_sentence_transformers(ours, ref, texts):
    with pytest.raises(ValueError, match="single embedding"):
        ref.encode(texts[0], precision="int8")
    with pytest.raises(ValueError, match="single embedding"):
        ours.encode(texts[0], precision="int8")
    _same(ours.encode(texts[0], precision="ubinary"), ref.encode(texts[0], precision="ubinary"))


def test_bad_inputs_raise_the_engines_error(ours):
    from sglang.srt.errors import EmbeddingError

    with pytest.raises(EmbeddingError):
        ours.encode(["fine", ""])
    with pytest.raises(TypeError, match=r"inputs\[1\]"):
        ours.encode(["fine", 7])
    with pytest.raises(TypeError, match="inputs"):
        ours.encode()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"normalize_embeddings": True},
        {"convert_to_tensor": True, "batch_size": 4},
        {"prompt_name": "query", "truncate_dim": 64},
        {"precision": "ubinary", "normalize_embeddings": True},
    ],
)
def test_engine_encode_answers_sentence_transformers_arguments(ours, ref, texts, kwargs):
    """Engine.encode given any sentence-transformers argument is sentence-transformers' encode."""
    engine = ours.engine
    atol = 1 if "precision" in kwargs else 1e-4
    got, want = engine.encode(texts, **kwargs), ref.encode(texts, **kwargs)
    if "precision" in kwargs:
        assert got.shape == want.shape and got.dtype == want.dtype
        assert (np.unpackbits(got) != np.unpackbits(want)).mean() < 0.001
    else:
        _same(got, want, atol)
    _same(engine.encode(texts[2], normalize_embeddings=True), ref.encode(texts[2], normalize_embeddings=True))
    _same(engine.encode(sentences=texts[:3], convert_to_numpy=True), ref.encode(texts[:3]))


def test_engine_encode_query_document_and_prompt_prefix(ours, ref, texts):
    engine = ours.engine
    _same(engine.encode_query(texts[:5]), ref.encode_query(texts[:5]))
    _same(
        engine.encode_document(texts[:5], normalize_embeddings=True),
        ref.encode_document(texts[:5], normalize_embeddings=True),
    )
    # sentence-transformers' `prompt=` is `prompt_prefix=` on the Engine (its `prompt` is the input).
    _same(
        engine.encode(texts[:3], prompt_prefix="custom prefix: ", batch_size=2),
        ref.encode(texts[:3], prompt="custom prefix: "),
    )


def test_engine_encode_keeps_sglangs_answer_and_refuses_a_mix(ours, texts):
    engine = ours.engine
    out = engine.encode(texts[:2])
    assert isinstance(out, list) and set(out[0]) == {"embedding", "meta_info"}
    with pytest.raises(TypeError, match="truncate_dim"):
        engine.encode(texts[:2], dimensions=64, normalize_embeddings=True)
    with pytest.raises(ValueError, match="no_such_argument"):
        engine.encode(texts[:2], no_such_argument=1)
    assert len(engine.encode(texts[:2])) == 2  # nothing broken by the refusals
