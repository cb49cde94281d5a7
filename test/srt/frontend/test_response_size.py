"""Per-token answers are sized from token counts and refused (413) before the scheduler sees them."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.response_size import (
    JSON_VALUE_BYTES,
    check_per_token_size,
    per_token_bytes,
    row_width,
    value_bytes,
)
from sglang.srt.frontend.tokenizer_manager import TokenizerManager
from sglang.srt.renderer.vector_render import render_vectors
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import FORMAT_BASE64, FORMAT_FLOAT, FORMAT_RAW, EmbeddingReqInput
from sglang.srt.wire.output_spec import Format, OutputSpec, Task
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_HIDDEN
from test.helpers.model_info import make_model_info
from test.helpers.zmq_peer import next_message, stays_quiet

INFO = make_model_info(hidden_size=384, multi_vector_dim=128)


def test_value_bytes_by_format():
    assert value_bytes(FORMAT_FLOAT) == JSON_VALUE_BYTES
    assert value_bytes(FORMAT_BASE64, "float32") == pytest.approx(16 / 3)
    assert value_bytes(FORMAT_BASE64, "float16") == pytest.approx(8 / 3)
    assert value_bytes(FORMAT_RAW) is None


def test_widths():
    assert row_width(TOKENS_HIDDEN, INFO) == 384
    assert row_width(TOKENS_DOCUMENT, INFO) == 128
    assert row_width(None, INFO) is None


def test_json_estimate_is_not_below_what_the_detokenizer_renders():
    """The estimate bounds the real rendering from above for hidden-state-like values."""
    rng = np.random.default_rng(0)
    for scale in (0.05, 1.0, 30.0):
        rows = (rng.standard_normal((254, 384)) * scale).astype(np.float32)
        rendered = len(render_vectors(rows, OutputSpec(Task.TOKENS, Format.FLOAT)))
        assert rendered <= per_token_bytes([254], 384, value_bytes(FORMAT_FLOAT)), scale


def test_base64_estimate_matches_the_rendering():
    rows = np.ones((100, 384), dtype=np.float32)
    rendered = len(render_vectors(rows, OutputSpec(Task.TOKENS, Format.BASE64)))
    estimate = per_token_bytes([100], 384, value_bytes(FORMAT_BASE64))
    assert rendered <= estimate < rendered * 1.05


def _req(fmt=FORMAT_FLOAT, kind=TOKENS_HIDDEN, **kw) -> EmbeddingReqInput:
    return EmbeddingReqInput(text=["x"], encoding_format=fmt, token_output=kind, **kw)


def test_check_refuses_over_the_limit_and_names_the_flag():
    limit = 64 << 20
    counts = [254] * 128  # the request: ~150 MB of JSON
    with pytest.raises(EmbeddingError) as e:
        check_per_token_size(_req(), counts, INFO, limit)
    assert e.value.kind == ErrorKind.TOO_LARGE and "--max-response-bytes" in e.value.message
    assert "base64" in e.value.message
    check_per_token_size(_req(), [254] * 32, INFO, limit)  # 32 such inputs pass
    # base64 is ~2.4x smaller: 64 inputs pass there that JSON refuses.
    check_per_token_size(_req(FORMAT_BASE64), [254] * 64, INFO, limit)
    with pytest.raises(EmbeddingError):
        check_per_token_size(_req(), [254] * 64, INFO, limit)


def test_check_uses_the_answer_format_and_skips_in_process_rows():
    counts = [254] * 128
    check_per_token_size(_req(FORMAT_RAW), counts, INFO, 1 << 20)  # the Engine / MaxSim: not an answer
    with pytest.raises(EmbeddingError):  # vLLM's token_embed answered as bytes: 4 bytes a value
        check_per_token_size(_req("bytes"), counts, INFO, 40 << 20)  # ~48 MiB
    check_per_token_size(_req("bytes_only", embed_dtype="float16"), counts, INFO, 40 << 20)  # half of it
    check_per_token_size(_req(kind=None), counts, INFO, 1)  # pooled: not per-token
    # ColBERT rows are 128 wide, not the hidden size: the same request fits.
    check_per_token_size(_req(kind=TOKENS_DOCUMENT), [254] * 128, INFO, 64 << 20)


def test_tokenizer_manager_refuses_before_sending_to_the_scheduler(harness, hf_tokenizer):
    port_args, _, sched = harness

    async def scenario():
        tm = TokenizerManager(ServerArgs(max_response_bytes=1 << 20), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        big = EmbeddingReqInput(text=["hello " * 100] * 8, token_output=TOKENS_HIDDEN)
        with pytest.raises(EmbeddingError) as e:
            await tm.embed(big)
        assert e.value.kind == ErrorKind.TOO_LARGE
        assert await stays_quiet(sched, 0.3), "a refused request reached the scheduler"
        assert tm.num_in_flight == 0
        small = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["hello"], token_output=TOKENS_HIDDEN)))
        assert (await next_message(sched)).reqs, "an allowed request did not reach the scheduler"
        small.cancel()
        await tm.close()

    asyncio.run(scenario())


def test_flag_default_and_validation():
    from sglang.cli import build_serve_parser

    args = ServerArgs.from_cli_args(build_serve_parser().parse_args(["--max-response-bytes", "1048576"]))
    assert args.max_response_bytes == 1 << 20 and ServerArgs().max_response_bytes == 64 << 20
    with pytest.raises(Exception, match="--max-response-bytes"):
        ServerArgs(max_response_bytes=0)
