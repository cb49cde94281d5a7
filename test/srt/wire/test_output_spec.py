"""OutputSpec: a frozen, validated value that crosses the sockets inside the messages unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from sglang.srt.wire.io_struct import BatchEmbeddingOutput, BatchTokenizedEmbeddingReqInput, TokenizedEmbeddingReqInput
from sglang.srt.wire.msgcodec import decode, encode
from sglang.srt.wire.output_spec import Format, OutputSpec, Task


def _roundtrip(msg):
    return decode(encode(msg))


def test_spec_round_trips_with_its_enums():
    spec = OutputSpec(Task.TOKENS, Format.BASE64, dimensions=64, normalize=True, dtype="bfloat16", endianness="big")
    back = _roundtrip(spec)
    assert back == spec and back.task is Task.TOKENS and back.format is Format.BASE64


def test_specs_travel_inside_both_messages():
    specs = [OutputSpec(), OutputSpec(Task.SPARSE, Format.SPARSE_TEI_TEXT), OutputSpec(Task.SCORES, Format.ARRAY)]
    reqs = [TokenizedEmbeddingReqInput(f"r{i}", 0, np.arange(3, dtype=np.int32), output=s) for i, s in enumerate(specs)]
    back = _roundtrip(BatchTokenizedEmbeddingReqInput(reqs))
    assert [r.output for r in back.reqs] == specs
    assert [r.is_sparse for r in back.reqs] == [False, True, False]
    out = BatchEmbeddingOutput.failure(reqs, 1, "x")
    assert _roundtrip(out).outputs == specs


@pytest.mark.parametrize(
    "kw",
    [
        dict(dtype="int8"),
        dict(endianness="native"),
        dict(dimensions=0),
        dict(task=Task.SPARSE, format=Format.FLOAT),
        dict(task=Task.DENSE, format=Format.SPARSE_DICT),
        dict(format="yaml"),
    ],
)
def test_unresolved_or_inconsistent_options_are_refused(kw):
    with pytest.raises(ValueError):
        OutputSpec(**kw)


def test_frozen():
    with pytest.raises(Exception):
        OutputSpec().normalize = True  # type: ignore[misc]
