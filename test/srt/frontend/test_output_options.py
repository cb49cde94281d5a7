"""The front end's one decision of what an answer looks like (frontend/output_options.py), and the
binary body built from the rendered rows (frontend/binary_response.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sglang.srt.configs.model_info import OutputKind
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.binary_response import binary_body
from sglang.srt.frontend.embed_options import resolve_use_activation
from sglang.srt.frontend.openai.protocol import EmbeddingRequest
from sglang.srt.frontend.output_options import output_spec
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import EmbeddingReqInput
from sglang.srt.wire.output_spec import Format, OutputSpec, Task
from test.helpers.model_info import make_model_info

MINILM = make_model_info()  # normalizes (sentence-transformers' Normalize module)
RAW_MODEL = make_model_info(normalize=False)
CLASSIFIER = make_model_info(embeddings_output=OutputKind.LOGITS, normalize=False, labels=("a", "b"))


@pytest.mark.parametrize(
    "fields, info, want",
    [
        ({}, MINILM, OutputSpec(Task.DENSE, Format.FLOAT, normalize=True)),
        ({}, RAW_MODEL, OutputSpec(Task.DENSE, Format.FLOAT, normalize=False)),
        ({"normalize": False}, MINILM, OutputSpec(Task.DENSE, Format.FLOAT)),
        ({"normalize": True}, RAW_MODEL, OutputSpec(Task.DENSE, Format.FLOAT, normalize=True)),
        (
            {"encoding_format": "base64", "dimensions": 64, "embed_dtype": "float16", "endianness": "big"},
            MINILM,
            OutputSpec(Task.DENSE, Format.BASE64, 64, True, "float16", "big"),
        ),
        ({"encoding_format": "bytes"}, MINILM, OutputSpec(Task.DENSE, Format.BYTES, normalize=True)),
        ({"encoding_format": "bytes_only"}, MINILM, OutputSpec(Task.DENSE, Format.BYTES, normalize=True)),
        ({"encoding_format": "raw"}, MINILM, OutputSpec(Task.DENSE, Format.ARRAY, normalize=True)),
        ({"encoding_format": "raw"}, CLASSIFIER, OutputSpec(Task.SCORES, Format.ARRAY)),
        (
            {"encoding_format": "sparse_tei_text", "dimensions": 3},
            MINILM,
            OutputSpec(Task.SPARSE, Format.SPARSE_TEI_TEXT),
        ),
        ({"token_output": "hidden"}, MINILM, OutputSpec(Task.TOKENS, Format.FLOAT)),
        (
            {"token_output": "hidden", "normalize": True, "dimensions": 8},
            MINILM,
            OutputSpec(Task.TOKENS, dimensions=8, normalize=True),
        ),
        ({"token_output": "document", "encoding_format": "raw"}, MINILM, OutputSpec(Task.TOKENS, Format.ARRAY)),
    ],
)
def test_spec_is_resolved_from_request_and_model(fields, info, want):
    assert output_spec(EmbeddingReqInput(text=["x"], **fields), info) == want


@pytest.mark.parametrize("fields", [{"encoding_format": "yaml"}, {"embed_dtype": "int4"}, {"endianness": "native"}])
def test_options_no_route_lets_through_are_invalid_requests(fields):
    with pytest.raises(EmbeddingError) as e:
        output_spec(EmbeddingReqInput(text=["x"], **fields), MINILM)
    assert e.value.kind is ErrorKind.INVALID_REQUEST


def test_use_activation_becomes_normalize():
    req = EmbeddingRequest(input="x", use_activation=False)
    resolve_use_activation(req)
    assert req.normalize is False
    agree = EmbeddingRequest(input="x", use_activation=True, normalize=True)
    resolve_use_activation(agree)
    assert agree.normalize is True
    with pytest.raises(EmbeddingError) as e:
        resolve_use_activation(EmbeddingRequest(input="x", use_activation=True, normalize=False))
    assert e.value.param == "use_activation"


def _result(payloads, token_ids=None) -> EmbeddingResult:
    return EmbeddingResult(payloads, [3] * len(payloads), token_ids=token_ids)


def test_binary_body_and_metadata():
    rows = [np.array([1.0, 2.0, 3.0], "<f2").tobytes(), np.array([4.0, 5.0, 6.0], "<f2").tobytes()]
    body = binary_body(_result(rows), "m", "bytes", "float16", "native", "embd-1")
    assert b"".join(body) == rows[0] + rows[1] and body.media_type == "application/octet-stream"
    meta = json.loads(body.headers["metadata"])
    assert meta["id"] == "embd-1" and meta["model"] == "m" and meta["usage"] == {"prompt_tokens": 6, "total_tokens": 6}
    assert meta["data"][1] == {
        "index": 1,
        "embed_dtype": "float16",
        "endianness": "little",  # native, resolved on this (little-endian) machine
        "start": 6,
        "end": 12,
        "shape": [3],
    }
    assert binary_body(_result(rows), "m", "bytes_only", None, None, "x").headers == {}


def test_binary_body_shapes_per_token_rows():
    rows = [np.zeros((2, 4), "<f4").tobytes(), np.zeros((0, 4), "<f4").tobytes()]
    body = binary_body(_result(rows, [b"[101,102]", b"[]"]), "m", "bytes", None, "big", "r")
    meta = json.loads(body.headers["metadata"])
    assert [d["shape"] for d in meta["data"]] == [[2, 4], [0, 0]]
    assert meta["data"][0]["endianness"] == "big" and meta["data"][1]["start"] == 32
