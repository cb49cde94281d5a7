"""Long inputs cut into chunks in the front end (--max-embed-len, frontend/chunking.py)."""

import numpy as np
import pytest

from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.chunking import ChunkPlan
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info

CLS, SEP = 101, 102


def test_split_wraps_every_chunk_in_the_special_tokens():
    body = np.arange(1000, 1010, dtype=np.int32)
    ids = np.concatenate([[CLS], body, [SEP]]).astype(np.int32)
    out, lens = ChunkPlan(chunk_len=6, max_len=100).split(ids, [CLS], [SEP])
    assert lens.tolist() == [6, 6, 4]  # 4 + 4 + 2 body tokens, each with [CLS] ... [SEP]
    chunks = np.split(out, np.cumsum(lens)[:-1])
    assert [c.tolist() for c in chunks] == [
        [CLS, 1000, 1001, 1002, 1003, SEP],
        [CLS, 1004, 1005, 1006, 1007, SEP],
        [CLS, 1008, 1009, SEP],
    ]
    assert out.dtype == np.int32 and lens.dtype == np.int32


def test_split_leaves_fitting_inputs_and_slices_bare_ones():
    plan = ChunkPlan(chunk_len=4, max_len=100)
    ids = np.array([CLS, 5, 6, SEP], dtype=np.int32)
    same, lens = plan.split(ids, [CLS], [SEP])
    assert lens is None and same is ids
    bare = np.arange(10, dtype=np.int32)  # no [CLS] / [SEP] at its ends: plain slices (vLLM's way)
    out, lens = plan.split(bare, [CLS], [SEP])
    assert lens.tolist() == [4, 4, 2] and out.tolist() == bare.tolist()


def test_applies_to_pooled_dense_text_only():
    plan = ChunkPlan(8, 100)
    assert plan.applies(EmbeddingReqInput(text=["a"]))
    assert plan.applies(EmbeddingReqInput(input_ids=[[1, 2]], encoding_format="base64"))
    assert not plan.applies(EmbeddingReqInput(text=["a"], encoding_format="sparse_dict"))
    assert not plan.applies(EmbeddingReqInput(text=["a"], token_output="hidden"))
    assert not plan.applies(EmbeddingReqInput(text_pairs=[("q", "d")]))


def _tokenizer(hf_tokenizer, **kw) -> InputTokenizer:
    return InputTokenizer(ServerArgs(**kw), make_model_info(), tokenizer=hf_tokenizer)  # MiniLM: 256


LONG = " ".join(f"word{i}" for i in range(400))  # ~1,600 tokens with MiniLM's tokenizer


def test_minilm_long_text_is_cut_into_context_sized_chunks(hf_tokenizer):
    tok = _tokenizer(hf_tokenizer, max_embed_len=2000)
    req = EmbeddingReqInput(text=[LONG, "short"])
    (ids, _), (short, _) = tok.tokenize(req)
    assert 256 < len(ids) <= 2000
    cut, lens = tok.split(ids, req)
    assert tok.split(short, req)[1] is None
    assert max(lens) == 256 and len(lens) == -(-(len(ids) - 2) // 254)
    chunks = np.split(cut, np.cumsum(lens)[:-1])
    cls, sep = tok.layout.pre, tok.layout.post
    assert all(c[:1].tolist() == cls and c[-1:].tolist() == sep for c in chunks)
    body = np.concatenate([c[1:-1] for c in chunks])
    assert body.tolist() == ids[1:-1].tolist()  # nothing lost, nothing repeated


def test_minilm_over_max_embed_len_is_refused(hf_tokenizer):
    tok = _tokenizer(hf_tokenizer, max_embed_len=300)
    with pytest.raises(EmbeddingError, match="maximum embedding input length .300 tokens, --max-embed-len"):
        tok.tokenize(EmbeddingReqInput(text=[LONG]))
    # truncation (asked by the request) now cuts at --max-embed-len, not at the context
    ((ids, _),) = tok.tokenize(EmbeddingReqInput(text=[LONG], truncate=True))
    assert len(ids) == 300


def test_without_the_flag_nothing_changes(hf_tokenizer):
    tok = _tokenizer(hf_tokenizer)
    with pytest.raises(EmbeddingError, match="context length .256 tokens"):
        tok.tokenize(EmbeddingReqInput(text=[LONG]))
    ((ids, _),) = tok.tokenize(EmbeddingReqInput(text=[LONG], truncate=True))
    assert len(ids) == 256 and tok.split(ids, None) == (ids, None)


def test_bare_token_ids_are_sliced(hf_tokenizer):
    tok = _tokenizer(hf_tokenizer, max_embed_len=2000)
    req = EmbeddingReqInput(input_ids=[list(range(1000, 1600))])
    ((ids, _),) = tok.tokenize(req)
    cut, lens = tok.split(ids, req)
    assert lens.tolist() == [256, 256, 88] and cut.tolist() == ids.tolist()


def test_tokenizer_manager_sends_a_long_input_as_one_chunked_input(harness, hf_tokenizer):
    """One input, one rid, one replica: its chunks end to end with their lengths; a cancel aborts that rid."""
    import asyncio

    from sglang.srt.frontend.tokenizer_manager import TokenizerManager
    from sglang.srt.wire.io_struct import AbortReq, BatchTokenizedEmbeddingReqInput
    from test.helpers.zmq_peer import next_message

    port_args, ctx, sched = harness

    async def scenario():
        tm = TokenizerManager(ServerArgs(max_embed_len=2000), port_args, make_model_info(), tokenizer=hf_tokenizer)
        tm.start()
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=[LONG, "short"])))
        msg = await next_message(sched)
        assert isinstance(msg, BatchTokenizedEmbeddingReqInput) and len(msg.reqs) == 2
        long, short = msg.reqs
        assert short.chunk_lens is None
        assert int(long.chunk_lens.sum()) == long.num_tokens and max(long.chunk_lens) == 256
        task.cancel()
        abort = await next_message(sched)
        assert isinstance(abort, AbortReq) and sorted(abort.rids) == sorted([long.rid, short.rid])
        await tm.close()

    asyncio.run(scenario())
