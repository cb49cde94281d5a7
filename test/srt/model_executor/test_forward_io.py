"""The runner reads ForwardInput's members as plain attributes (no getattr with defaults), so the
scheduler's message must have every one of them."""

from __future__ import annotations

import dataclasses
import typing

import numpy as np

from sglang.srt.model_executor.forward_io import ForwardFn, ForwardInput, ForwardOutput
from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput
from sglang.srt.wire.output_spec import Format, OutputSpec, Task


def _members() -> tuple[set[str], set[str]]:
    fields = set(typing.get_type_hints(ForwardInput))
    properties = {name for name, v in vars(ForwardInput).items() if isinstance(v, property)}
    return fields, properties


def test_the_message_has_every_forward_input_member():
    fields, properties = _members()
    assert {"input_ids", "token_output", "key_len", "pixel_values"} <= fields and properties == {
        "num_tokens",
        "is_sparse",
    }
    declared = {f.name for f in dataclasses.fields(TokenizedEmbeddingReqInput)}
    assert fields <= declared, fields - declared
    for name in properties:
        assert isinstance(getattr(TokenizedEmbeddingReqInput, name), property), name


def test_members_read_directly_on_a_plain_input():
    req = TokenizedEmbeddingReqInput("r", 0, np.arange(5, dtype=np.int32))
    assert req.num_tokens == 5 and not req.is_sparse
    assert req.token_output is None and req.key_len is None and req.pixel_values is None
    sparse = TokenizedEmbeddingReqInput(
        "s", 0, np.arange(2, dtype=np.int32), output=OutputSpec(task=Task.SPARSE, format=Format.SPARSE_DICT)
    )
    assert sparse.is_sparse


def test_forward_fn_returns_one_type():
    assert typing.get_args(ForwardFn)[1] is ForwardOutput
