"""The offline Engine: same processes as the server, no HTTP."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

import sglang
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.layers.attention.cpu_kernel_loader import find_compiler
from test.helpers.texts import load_texts

pytestmark = pytest.mark.slow


def test_engine_matches_sentence_transformers_with_auto_truncate():
    from sentence_transformers import SentenceTransformer

    texts = load_texts()
    with sglang.Engine(allow_auto_truncate=True) as engine:
        # The CPU default: the compiled attention kernel wherever a compiler can build it.
        expected = "cpu_varlen" if find_compiler() else "torch_native"
        assert engine.get_model_info()["attention_backend"] == expected
        out = engine.encode(texts)
        single = engine.encode(texts[0])
        assert isinstance(single, dict) and len(single["embedding"]) == 384
        ids_out = engine.encode([101, 7592, 2088, 102])
        text_out = engine.encode("hello world")
        with pytest.raises(EmbeddingError) as err:
            engine.encode(["fine", ""])
        assert err.value.kind == ErrorKind.INVALID_REQUEST
        children = mp.active_children()
        assert len(children) == 2
    assert not any(p.is_alive() for p in children)

    ours = np.asarray([o["embedding"] for o in out], dtype=np.float32)
    st = SentenceTransformer(engine.server_args.model_path, device="cpu")
    ref = st.encode(texts, batch_size=32)
    cos = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    assert len(texts) >= 100 and cos.min() >= 0.9999
    # Long texts were cut at the 256-token limit, exactly as sentence-transformers cuts them.
    assert max(o["meta_info"]["prompt_tokens"] for o in out) == 256
    np.testing.assert_allclose(single["embedding"], out[0]["embedding"], atol=1e-5)
    np.testing.assert_allclose(ids_out["embedding"], text_out["embedding"], atol=1e-6)


def test_engine_splits_calls_larger_than_its_queue_and_shuts_down_idempotently():
    engine = sglang.Engine(max_batch_size=4, max_queue_size=3)
    assert engine.get_model_info()["embedding_dim"] == 384
    texts = [f"sentence number {i} about {'rivers' if i % 2 else 'mountains'}" for i in range(8)]
    together = engine.encode(texts)  # 8 inputs, a queue of 3: sent as 3 + 3 + 2
    assert len(together) == 8
    for text, got in zip(texts, together):
        np.testing.assert_allclose(got["embedding"], engine.encode(text)["embedding"], atol=1e-5)
    engine.shutdown()
    engine.shutdown()
    assert not mp.active_children()


def test_engine_encodes_image_items_like_the_http_api(tmp_path):
    from test.helpers.images import data_uri, encode_image, gradient_image
    from test.helpers.tiny_models import build_tiny_gme

    gme = build_tiny_gme(str(tmp_path / "gme"))
    image = data_uri(encode_image(gradient_image(40, 28)))
    with sglang.Engine(model_path=gme, chat_template="gme-qwen2-vl") as engine:
        one = engine.encode({"image": image})
        many = engine.encode([{"text": "a cat"}, {"image": image}, {"text": "a cat", "image": image}])
        with pytest.raises(EmbeddingError) as err:
            engine.encode({"caption": "no"})
    assert err.value.kind == ErrorKind.INVALID_REQUEST
    assert isinstance(one, dict) and len(many) == 3
    np.testing.assert_allclose(one["embedding"], many[1]["embedding"], atol=1e-5)
    assert many[2]["meta_info"]["prompt_tokens"] > many[0]["meta_info"]["prompt_tokens"]
    vecs = np.asarray([m["embedding"] for m in many])
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(vecs[0], vecs[2], atol=1e-3)


def test_engine_serves_int8_and_says_so():
    texts = [t for t in load_texts() if len(t.split()) < 100][:8]
    with sglang.Engine(quantization="int8", cpu_threads=1) as engine:
        info = engine.get_model_info()
        assert info["quantization"] == "int8" and info["int8_activation_bits"] in (7, 8)
        got = np.asarray([o["embedding"] for o in engine.encode(texts)], dtype=np.float32)
    with sglang.Engine(cpu_threads=1) as engine:
        assert engine.get_model_info()["quantization"] is None
        ref = np.asarray([o["embedding"] for o in engine.encode(texts)], dtype=np.float32)
    assert (got * ref).sum(1).min() >= 0.99  # normalized vectors
