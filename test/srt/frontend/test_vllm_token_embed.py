"""vLLM's token_embed rows (frontend/vllm/token_embed.py): reshaped from the raw per-token
payload, cut to `dimensions`, L2-normalized per row, rendered as nested floats or flat base64."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import torch

from sglang.srt.frontend.vllm.token_embed import render_rows, shape_rows, token_rows


def _rows() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)


def test_rows_are_reshaped_by_token_count_or_width():
    rows = _rows()
    raw = rows.astype("<f4").tobytes()
    np.testing.assert_array_equal(token_rows(raw, b"[101,7,102]", None), rows)
    np.testing.assert_array_equal(token_rows(raw, None, 8), rows)


def test_dimensions_then_normalize_as_torch_does():
    rows = _rows()
    got = shape_rows(rows, 4, normalize=True)
    ref = torch.nn.functional.normalize(torch.from_numpy(rows)[:, :4], p=2, dim=-1).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-6)
    np.testing.assert_array_equal(shape_rows(rows, None, normalize=False), rows)
    assert not np.isnan(shape_rows(np.zeros((2, 4), np.float32), None, True)).any()  # zero rows stay zero


def test_render_float_nested_and_base64_flat_in_dtype_and_order():
    rows = _rows()
    np.testing.assert_allclose(orjson.loads(render_rows(rows, "float", None, None)), rows, atol=1e-7)
    b64 = orjson.loads(render_rows(rows, "base64", None, None))
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(b64), "<f4").reshape(3, 8), rows)
    big16 = orjson.loads(render_rows(rows, "base64", "float16", "big"))
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(big16), ">f2").reshape(3, 8), rows.astype(np.float16))
    assert render_rows(np.zeros((0, 8), np.float32), "float", None, None) == b"[]"
