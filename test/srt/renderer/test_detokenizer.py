"""Rendering pooled vectors into their wire forms as each row's OutputSpec says, split per tokenizer worker."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import torch

from sglang.srt.errors import ErrorKind
from sglang.srt.renderer.detokenizer_manager import render_output
from sglang.srt.wire.io_struct import BatchEmbeddingOutput
from sglang.srt.wire.output_spec import Format, OutputSpec, Task


def _out(emb, specs, workers=None, codes=None):
    n = len(emb)
    return BatchEmbeddingOutput(
        rids=[f"r{i}" for i in range(n)],
        worker_ids=workers or [0] * n,
        embeddings=np.asarray(emb, np.float32),
        prompt_tokens=[2] * n,
        outputs=list(specs),
        error_codes=codes or [0] * n,
        error_messages=[None if not c else "bad" for c in (codes or [0] * n)],
        queue_times=[0.0] * n,
        inference_time=0.5,
    )


def _spec(fmt=Format.FLOAT, **kw) -> OutputSpec:
    return OutputSpec(Task.DENSE, fmt, **kw)


def _render(vec, spec):
    return render_output(_out([vec], [spec]))[0].payloads[0]


def test_float_payload_is_json_array_of_float32_values():
    vec = np.array([0.1, -2.5, 3e-8], np.float32)
    np.testing.assert_array_equal(np.asarray(orjson.loads(_render(vec, _spec())), np.float32), vec)


def test_base64_payload_is_little_endian_float32():
    vec = np.array([1.0, 0.5, -0.25], np.float32)
    s = orjson.loads(_render(vec, _spec(Format.BASE64)))
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(s), dtype="<f4"), vec)


def test_normalize_matches_torch_within_an_ulp():
    """The renderer is the only place a pooled vector is normalized; it agrees with torch's F.normalize
    (what the runner used to apply) to float32 rounding, and a zero vector stays zero."""
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((64, 384)) * rng.uniform(0.01, 50, (64, 1))).astype(np.float32)
    ours = np.stack([orjson.loads(_render(r, _spec(normalize=True))) for r in rows]).astype(np.float32)
    ref = torch.nn.functional.normalize(torch.from_numpy(rows), p=2, dim=-1).numpy()
    assert np.abs(ours - ref).max() <= 1.2e-7
    assert orjson.loads(_render(np.zeros(4, np.float32), _spec(normalize=True))) == [0.0] * 4


def test_dimensions_cut_then_normalize():
    vec = np.array([3.0, 4.0, 100.0], np.float32)
    np.testing.assert_allclose(orjson.loads(_render(vec, _spec(dimensions=2, normalize=True))), [0.6, 0.8], rtol=1e-6)
    # A normalized vector cut is normalized again (the old two-step path gives the same bytes).
    unit = vec / np.linalg.norm(vec)
    head = unit[:2] / np.float32(np.linalg.norm(unit[:2]))
    cut = _render(unit, _spec(dimensions=2, normalize=True))
    assert cut == orjson.dumps(head.astype("<f4"), option=orjson.OPT_SERIALIZE_NUMPY)


def test_unnormalized_rows_are_cut_without_renormalizing():
    vec = np.array([3.0, 4.0, 100.0], np.float32)
    np.testing.assert_array_equal(orjson.loads(_render(vec, _spec(dimensions=2))), [3.0, 4.0])


def test_array_format_hands_the_numbers_over_typed():
    vec = np.array([3.0, 4.0, 1.0], np.float32)
    got = _render(vec, _spec(Format.ARRAY, dimensions=2, normalize=True))
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_allclose(got, [0.6, 0.8], rtol=1e-6)


def test_bytes_format_is_the_bare_values():
    vec = np.array([1.0, -0.5, 2.0], np.float32)
    assert _render(vec, _spec(Format.BYTES)) == vec.astype("<f4").tobytes()
    assert _render(vec, _spec(Format.BYTES, dtype="float16", endianness="big")) == vec.astype(">f2").tobytes()


def test_results_are_routed_per_worker_with_errors_kept():
    out = _out([[1.0], [2.0], [3.0]], [_spec()] * 3, workers=[0, 1, 0], codes=[0, 0, ErrorKind.QUEUE_FULL])
    res = render_output(out)
    assert res[0].rids == ["r0", "r2"] and res[1].rids == ["r1"]
    assert res[0].error_codes == [0, ErrorKind.QUEUE_FULL] and res[0].payloads[1] == b""
    assert res[1].inference_time == 0.5


def test_base64_embed_dtype_and_endianness():
    vec = np.array([1.0, -0.3333, 65504.5, 1e-3], np.float32)
    cases = [("float16", "little", "<f2"), ("float16", "big", ">f2"), ("float32", "big", ">f4")]
    specs = [_spec(Format.BASE64, dtype=d, endianness=o) for d, o, _ in cases]
    specs.append(_spec(Format.BASE64, dtype="bfloat16"))
    payloads = [base64.b64decode(orjson.loads(p)) for p in render_output(_out([vec] * 4, specs))[0].payloads]
    for raw, (_, _, np_dtype) in zip(payloads, cases):
        np.testing.assert_array_equal(np.frombuffer(raw, np_dtype), vec.astype(np_dtype))
    # bfloat16: torch's own rounding, as vLLM sends it (the raw 16-bit patterns).
    want = torch.from_numpy(vec).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(np.frombuffer(payloads[3], "<u2"), want)


def test_batched_shaping_equals_each_row_alone():
    """Rows are cut and normalized per (dimensions, normalize) group in one numpy call; each comes
    out byte for byte as rendering it alone makes it, whatever its neighbours asked for."""
    rows = np.random.default_rng(3).standard_normal((6, 8)).astype(np.float32)
    specs = [
        _spec(normalize=True),
        _spec(dimensions=4, normalize=True),
        _spec(Format.BASE64),
        _spec(dimensions=4, normalize=True),
        _spec(Format.BYTES, normalize=True, dtype="bfloat16"),
        OutputSpec(Task.SCORES, Format.ARRAY),
    ]
    together = render_output(_out(rows, specs))[0].payloads
    for row, spec, got in zip(rows, specs, together):
        alone = _render(row, spec)
        if isinstance(alone, np.ndarray):
            np.testing.assert_array_equal(got, alone)
        else:
            assert got == alone
