"""ForwardOutput: the one type every forward returns, whose columns BatchEmbeddingOutput inherits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sglang.srt.wire.forward_output import ForwardOutput
from sglang.srt.wire.io_struct import BatchEmbeddingOutput
from sglang.srt.wire.msgcodec import decode, encode
from sglang.srt.wire.output_spec import OutputSpec


def test_pooled_rows_are_one_float32_matrix():
    out = ForwardOutput(np.arange(6, dtype=np.float64).reshape(3, 2)[:, ::-1])  # float64, not contiguous
    assert out.embeddings.dtype == np.float32 and out.embeddings.flags.c_contiguous
    np.testing.assert_array_equal(out.embeddings, [[1, 0], [3, 2], [5, 4]])
    rows = np.zeros((2, 4), np.float32)
    assert ForwardOutput(rows).embeddings is rows  # the runner's rows are kept, not copied
    with pytest.raises(ValueError, match=r"\[batch, dim\]"):
        ForwardOutput(np.zeros(4, np.float32))


def test_batch_output_takes_the_runner_columns_as_they_are():
    rows = ForwardOutput(
        np.ones((2, 3), np.float32),
        sparse_indices=np.array([7], np.int32),
        sparse_values=np.array([0.5], np.float32),
        sparse_offsets=np.array([0, 0, 1], np.int64),
    )
    cols = rows.columns()
    assert list(cols) == [f.name for f in dataclasses.fields(ForwardOutput)]
    out = BatchEmbeddingOutput(
        **cols,
        rids=["a", "b"],
        worker_ids=[0, 0],
        prompt_tokens=[3, 4],
        outputs=[OutputSpec(), OutputSpec()],
        error_codes=[0, 0],
        error_messages=[None, None],
        queue_times=[0.0, 0.0],
    )
    for name, value in cols.items():
        assert getattr(out, name) is value
    # A BatchEmbeddingOutput is a ForwardOutput too; its columns() are only the runner's fields.
    assert isinstance(out, ForwardOutput) and out.columns().keys() == cols.keys()
    back = decode(encode(out))
    assert type(back) is BatchEmbeddingOutput and back.rids == ["a", "b"]
    for name, value in cols.items():
        if value is None:
            assert getattr(back, name) is None
        else:
            np.testing.assert_array_equal(getattr(back, name), value)
            assert getattr(back, name).dtype == value.dtype
