"""`input` as a list of {"text", "image"} objects: parsing, precise errors, and the request it becomes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sglang.srt.frontend.inputs import normalize_input
from sglang.srt.frontend.openai.protocol import EmbeddingRequest
from sglang.srt.wire.io_struct import MultimodalItem


def test_objects_become_multimodal_items_and_strings_stay_text():
    request = EmbeddingRequest(input=[{"text": "a"}, {"image": "data:x"}, {"text": "b", "image": "u"}], dimensions=8)
    req, single = normalize_input(request.input, dimensions=request.dimensions)
    assert not single
    assert req.items == [MultimodalItem("a", None), MultimodalItem(None, "data:x"), MultimodalItem("b", "u")]
    assert req.text is None and req.input_ids is None and req.batch_size == 3 and req.dimensions == 8
    plain, _ = normalize_input(EmbeddingRequest(input=["a", "b"]).input)
    assert plain.text == ["a", "b"] and plain.items is None
    assert normalize_input(EmbeddingRequest(input=[1, 2]).input)[0].input_ids == [[1, 2]]


@pytest.mark.parametrize(
    "inp, message",
    [
        ([{"text": "a"}, "b"], '\'input\' cannot mix {"text", "image"} objects with strings or token ids.'),
        ([{"text": "a"}, {}], "Item 1: needs 'text', 'image' or both."),
        ([{"text": None, "image": None}], "Item 0: needs 'text', 'image' or both."),
        ([{"text": "a", "images": "x"}], "Item 0: unknown field(s) images; use 'text' and 'image'."),
        ([{"image": 5}], "Item 0: 'image' must be a string."),
    ],
)
def test_malformed_objects_say_what_is_wrong(inp, message):
    with pytest.raises(ValidationError) as err:
        EmbeddingRequest(input=inp)
    first = err.value.errors()[0]
    assert first["type"] == "value_error" and first["msg"] == "Value error, " + message
