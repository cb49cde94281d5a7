"""normalize_input: every shape of `input` (HTTP routes and Engine.encode alike) as one request."""

from __future__ import annotations

import pytest

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.inputs import normalize_input
from sglang.srt.frontend.openai.protocol import MultimodalEmbeddingInput
from sglang.srt.wire.io_struct import FORMAT_RAW, MultimodalItem


def test_one_input_or_a_list():
    req, single = normalize_input("hi")
    assert (req.text, single) == (["hi"], True)
    req, single = normalize_input([101, 7592, 102])  # a flat token-id list is one input
    assert (req.input_ids, single) == ([[101, 7592, 102]], True)
    req, single = normalize_input({"text": "a cat", "image": "data:x"})
    assert (req.items, single) == ([MultimodalItem("a cat", "data:x")], True)
    req, single = normalize_input(["a", "b"])
    assert (req.text, single) == (["a", "b"], False)
    req, single = normalize_input([[1], [2, 3]], encoding_format=FORMAT_RAW)
    assert (req.input_ids, req.encoding_format, single) == ([[1], [2, 3]], FORMAT_RAW, False)
    req, _ = normalize_input([{"image": "u"}, MultimodalEmbeddingInput(text="t")], dimensions=8)
    assert req.items == [MultimodalItem(None, "u"), MultimodalItem("t", None)] and req.dimensions == 8


@pytest.mark.parametrize(
    "prompt, message",
    [
        ([], "Input cannot be empty."),
        (
            {"text": "a", "images": "x"},
            'A multimodal input is {"text": ..., "image": ...} with at least one of the two.',
        ),
        ([{"text": ""}], 'A multimodal input is {"text": ..., "image": ...} with at least one of the two.'),
    ],
)
def test_bad_inputs_are_invalid_requests(prompt, message):
    with pytest.raises(EmbeddingError) as err:
        normalize_input(prompt)
    assert (err.value.kind, err.value.message, err.value.param) == (ErrorKind.INVALID_REQUEST, message, "input")
