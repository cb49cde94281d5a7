"""Per-token rows in the renderer (vLLM's token_embed, /embed_all, multi-vector): each row cut to
`dimensions` and L2-normalized when the spec says, rendered as nested floats, flat base64, bytes or
an array."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import torch

from sglang.srt.renderer.vector_render import render_vectors
from sglang.srt.wire.output_spec import Format, OutputSpec, Task


def _rows() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)


def _spec(fmt=Format.FLOAT, **kw) -> OutputSpec:
    return OutputSpec(Task.TOKENS, fmt, **kw)


def test_dimensions_then_normalize_per_token_as_torch_does():
    rows = _rows()
    got = render_vectors(rows, _spec(Format.ARRAY, dimensions=4, normalize=True))
    ref = torch.nn.functional.normalize(torch.from_numpy(rows)[:, :4], p=2, dim=-1).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-6)
    np.testing.assert_array_equal(render_vectors(rows, _spec(Format.ARRAY)), rows)
    zero = render_vectors(np.zeros((2, 4), np.float32), _spec(Format.ARRAY, normalize=True))
    assert not np.isnan(zero).any() and not zero.any()  # zero rows stay zero


def test_float_nested_and_base64_flat_in_dtype_and_order():
    rows = _rows()
    np.testing.assert_allclose(orjson.loads(render_vectors(rows, _spec())), rows, atol=1e-7)
    b64 = orjson.loads(render_vectors(rows, _spec(Format.BASE64)))
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(b64), "<f4").reshape(3, 8), rows)
    big16 = orjson.loads(render_vectors(rows, _spec(Format.BASE64, dtype="float16", endianness="big")))
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(big16), ">f2").reshape(3, 8), rows.astype(np.float16))
    assert render_vectors(rows, _spec(Format.BYTES)) == rows.astype("<f4").tobytes()
    assert render_vectors(np.zeros((0, 8), np.float32), _spec()) == b"[]"
