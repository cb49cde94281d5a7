"""TokenizerManager with shared pieces (issue #27 item 2), the test playing the scheduler: what
reaches it for rerank pairs, and the off-loop decision counting a prompt once per input."""

from __future__ import annotations

import asyncio

import pytest

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.off_loop import INLINE_WORK
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info
from test.helpers.zmq_peer import next_message

INFO = make_model_info(max_input_length=256, vocab_size=30522, pair_token_types=True)


def test_pairs_reach_the_scheduler_with_their_token_types(harness, hf_tokenizer):
    port_args, _, sched = harness

    async def scenario():
        tm = TokenizerManager(ServerArgs(), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text_pairs=[("hello", "big world")] * 2)))
        msg = await next_message(sched)
        task.cancel()
        await tm.close()
        return msg

    msg = asyncio.run(scenario())
    first = msg.reqs[0]
    assert first.input_ids.tolist() == [101, 7592, 102, 2502, 2088, 102]
    assert first.token_type_ids.tolist() == [0, 0, 0, 1, 1, 1] and first.key_len is None


def test_a_huge_prompt_counts_per_input_and_goes_off_the_loop(harness, hf_tokenizer, monkeypatch):
    port_args, _, _ = harness
    prompt = "word " * 2000  # 10,000 characters: under the inline size alone, 1.28 M characters over 128 inputs
    assert len(prompt) + 128 < INLINE_WORK
    seen = []

    async def scenario():
        tm = TokenizerManager(ServerArgs(), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        loop = asyncio.get_running_loop()
        real = loop.run_in_executor
        monkeypatch.setattr(loop, "run_in_executor", lambda ex, fn, *a: seen.append(fn) or real(ex, fn, *a))
        with pytest.raises(EmbeddingError) as err:  # the prompt alone is over the context: 400 at once
            await tm.embed(EmbeddingReqInput(text=["a"] * 128, prompt=prompt))
        await tm.close()
        return err.value

    err = asyncio.run(scenario())
    assert err.kind == ErrorKind.INVALID_REQUEST and err.param == "prompt" and "The prompt alone" in err.message
    assert len(seen) == 1  # tokenized in a worker thread
