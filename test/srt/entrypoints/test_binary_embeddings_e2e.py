"""vLLM's binary embeddings (`encoding_format: "bytes"` / `"bytes_only"`) and `use_activation` on one
real server (the bundled all-MiniLM-L6-v2): the body is the float JSON answer's very values in the
asked element type and byte order, where the `metadata` header says they are."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests
import torch

pytestmark = pytest.mark.slow
TEXTS = ["how much protein should a female eat", "summit define", "the cat sat on the mat by the river"]


@pytest.fixture(scope="module")
def server(default_server):
    return default_server  # conftest.py: shared with the other modules that need no flags


def _post(server, path, payload) -> requests.Response:
    return requests.post(server.base_url + path, json=payload, timeout=60)


def _floats(server, path="/v1/embeddings", **extra) -> list[np.ndarray]:
    r = _post(server, path, {"input": TEXTS, **extra})
    assert r.status_code == 200, r.text
    key = "embedding" if path == "/v1/embeddings" else "data"
    return [np.asarray(d[key], np.float32) for d in r.json()["data"]]


def _metadata(r: requests.Response) -> dict:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    return json.loads(r.headers["metadata"])


def test_bytes_body_holds_the_float_answers_values(server):
    want = _floats(server)
    r = _post(server, "/v1/embeddings", {"input": TEXTS, "encoding_format": "bytes"})
    meta = _metadata(r)
    assert meta["model"] and meta["id"].startswith("embd-") and isinstance(meta["created"], int)
    tokens = _post(server, "/v1/embeddings", {"input": TEXTS}).json()["usage"]["prompt_tokens"]
    assert meta["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert len(r.content) == 3 * 384 * 4 == int(r.headers["content-length"])
    for i, (item, vec) in enumerate(zip(meta["data"], want)):
        assert item == {
            "index": i,
            "embed_dtype": "float32",
            "endianness": "little",
            "start": i * 384 * 4,
            "end": (i + 1) * 384 * 4,
            "shape": [384],
        }
        np.testing.assert_array_equal(np.frombuffer(r.content[item["start"] : item["end"]], "<f4"), vec)


def test_bytes_only_is_the_same_body_without_metadata(server):
    with_meta = _post(server, "/v1/embeddings", {"input": TEXTS, "encoding_format": "bytes"})
    bare = _post(server, "/v1/embeddings", {"input": TEXTS, "encoding_format": "bytes_only"})
    assert bare.status_code == 200 and "metadata" not in bare.headers
    assert bare.headers["content-type"] == "application/octet-stream" and bare.content == with_meta.content


@pytest.mark.parametrize(
    "dtype, order, np_dtype", [("float16", "big", ">f2"), ("float32", "big", ">f4"), ("float16", "little", "<f2")]
)
def test_bytes_honour_embed_dtype_endianness_and_dimensions(server, dtype, order, np_dtype):
    want = _floats(server, dimensions=384)
    body = {"input": TEXTS, "encoding_format": "bytes", "embed_dtype": dtype, "endianness": order}
    r = _post(server, "/v1/embeddings", body)
    meta = _metadata(r)
    for item, vec in zip(meta["data"], want):
        assert (item["embed_dtype"], item["endianness"]) == (dtype, order)
        got = np.frombuffer(r.content[item["start"] : item["end"]], np_dtype)
        np.testing.assert_array_equal(got, vec.astype(np_dtype))


def test_bfloat16_bytes_are_torchs_rounding(server):
    want = _floats(server)
    r = _post(server, "/v1/embeddings", {"input": TEXTS, "encoding_format": "bytes_only", "embed_dtype": "bfloat16"})
    got = np.frombuffer(r.content, "<u2").reshape(3, 384)
    ref = torch.from_numpy(np.stack(want)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(got, ref)


def test_matryoshka_cut_shows_in_the_shape(server):
    # MiniLM is no Matryoshka model: only its full width is accepted, and it is what the shape says.
    r = _post(server, "/v1/embeddings", {"input": TEXTS[:1], "encoding_format": "bytes", "dimensions": 384})
    assert _metadata(r)["data"][0]["shape"] == [384]


def test_use_activation_is_normalize(server):
    for a, b in zip(_floats(server, use_activation=True), _floats(server)):
        np.testing.assert_array_equal(a, b)
    raw = _floats(server, use_activation=False)
    for a, b in zip(raw, _floats(server, normalize=False)):
        np.testing.assert_array_equal(a, b)
    assert abs(np.linalg.norm(raw[0]) - 1) > 0.01
    same = _floats(server, use_activation=False, normalize=False)
    np.testing.assert_array_equal(same[0], raw[0])
    both = _post(server, "/v1/embeddings", {"input": "x", "use_activation": True, "normalize": False})
    assert both.status_code == 400 and both.json()["error"]["param"] == "use_activation"


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"encoding_format": "bytes", "embedding_types": ["int8"]}, "encoding_format"),
        ({"encoding_format": "bytes_half"}, "encoding_format"),
        ({"encoding_format": "bytes", "embed_dtype": "fp8_e4m3"}, "embed_dtype"),
        ({"encoding_format": "bytes", "endianness": "middle"}, "endianness"),
    ],
)
def test_bad_binary_requests_are_400_naming_the_field(server, extra, param):
    r = _post(server, "/v1/embeddings", {"input": "x", **extra})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_pooling_bytes_for_embed_and_token_embed(server):
    want = _floats(server, "/pooling", task="embed")
    r = _post(server, "/pooling", {"input": TEXTS, "task": "embed", "encoding_format": "bytes"})
    meta = _metadata(r)
    assert meta["id"].startswith("pool-")
    for item, vec in zip(meta["data"], want):
        np.testing.assert_array_equal(np.frombuffer(r.content[item["start"] : item["end"]], "<f4"), vec)
    rows = _floats(server, "/pooling", task="token_embed")
    r = _post(server, "/pooling", {"input": TEXTS, "task": "token_embed", "encoding_format": "bytes"})
    meta = _metadata(r)
    for item, want_rows in zip(meta["data"], rows):
        assert item["shape"] == list(want_rows.shape) and want_rows.shape[1] == 384
        got = np.frombuffer(r.content[item["start"] : item["end"]], "<f4").reshape(item["shape"])
        np.testing.assert_array_equal(got, want_rows)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # vLLM normalizes token rows
