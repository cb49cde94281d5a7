"""Rendering pooled vectors into their wire forms, split per tokenizer worker."""

from __future__ import annotations

import base64

import numpy as np
import orjson

from sglang.srt.errors import ErrorKind
from sglang.srt.renderer.detokenizer_manager import render_output, shape_vector
from sglang.srt.wire.io_struct import BatchEmbeddingOutput


def _out(emb, formats, dims=None, workers=None, codes=None):
    n = len(emb)
    return BatchEmbeddingOutput(
        rids=[f"r{i}" for i in range(n)],
        worker_ids=workers or [0] * n,
        embeddings=np.asarray(emb, np.float32),
        prompt_tokens=[2] * n,
        dimensions=dims or [None] * n,
        encoding_formats=formats,
        error_codes=codes or [0] * n,
        error_messages=[None if not c else "bad" for c in (codes or [0] * n)],
        queue_times=[0.0] * n,
        inference_time=0.5,
    )


def test_float_payload_is_json_array_of_float32_values():
    vec = np.array([0.1, -2.5, 3e-8], np.float32)
    res = render_output(_out([vec], ["float"]))[0]
    parsed = orjson.loads(res.payloads[0])
    np.testing.assert_array_equal(np.asarray(parsed, np.float32), vec)


def test_base64_payload_is_little_endian_float32():
    vec = np.array([1.0, 0.5, -0.25], np.float32)
    res = render_output(_out([vec], ["base64"]))[0]
    s = orjson.loads(res.payloads[0])
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(s), dtype="<f4"), vec)


def test_dimensions_truncate_and_renormalize():
    vec = np.array([3.0, 4.0, 100.0], np.float32)
    np.testing.assert_allclose(shape_vector(vec, 2), [0.6, 0.8], rtol=1e-6)
    assert shape_vector(vec, None) is vec
    res = render_output(_out([vec], ["float"], dims=[2]))[0]
    np.testing.assert_allclose(orjson.loads(res.payloads[0]), [0.6, 0.8], rtol=1e-6)


def test_results_are_routed_per_worker_with_errors_kept():
    out = _out([[1.0], [2.0], [3.0]], ["float"] * 3, workers=[0, 1, 0], codes=[0, 0, ErrorKind.QUEUE_FULL])
    res = render_output(out)
    assert res[0].rids == ["r0", "r2"] and res[1].rids == ["r1"]
    assert res[0].error_codes == [0, ErrorKind.QUEUE_FULL] and res[0].payloads[1] == b""
    assert res[1].inference_time == 0.5


def _with_options(out, normalize=None, dtypes=None, orders=None):
    out.normalize, out.embed_dtypes, out.endianness = normalize, dtypes, orders
    return out


def test_unnormalized_rows_are_cut_without_renormalizing():
    vec = np.array([3.0, 4.0, 100.0], np.float32)
    res = render_output(_with_options(_out([vec], ["float"], dims=[2]), normalize=[False]))[0]
    np.testing.assert_array_equal(orjson.loads(res.payloads[0]), [3.0, 4.0])


def test_base64_embed_dtype_and_endianness():
    import torch

    vec = np.array([1.0, -0.3333, 65504.5, 1e-3], np.float32)
    cases = [("float16", "little", "<f2"), ("float16", "big", ">f2"), ("float32", "big", ">f4")]
    out = _with_options(
        _out([vec] * 4, ["base64"] * 4),
        dtypes=[c[0] for c in cases] + ["bfloat16"],
        orders=[c[1] for c in cases] + ["little"],
    )
    payloads = [base64.b64decode(orjson.loads(p)) for p in render_output(out)[0].payloads]
    for raw, (_, _, np_dtype) in zip(payloads, cases):
        np.testing.assert_array_equal(np.frombuffer(raw, np_dtype), vec.astype(np_dtype))
    # bfloat16: torch's own rounding, as vLLM sends it (the raw 16-bit patterns).
    want = torch.from_numpy(vec).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(np.frombuffer(payloads[3], "<u2"), want)
