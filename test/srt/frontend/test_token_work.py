"""The tokenizer routes' bounds: inputs per request, ids per request, /tokenize's answer size,
and the work placed off the event loop when large."""

from __future__ import annotations

import orjson
import pytest

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http.response_parts import body_bytes
from sglang.srt.frontend.token_work import (
    SLICE_TOKENS,
    check_ids_work,
    decode_all,
    max_total_ids,
    tei_tokenize_answer,
)
from sglang.srt.frontend.tokens import tei_tokens
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer

ARGS = ServerArgs(max_client_batch_size=8)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ServerArgs().tokenizer_path, False)


def test_tokenize_answer_is_tei_tokens_rendered_slice_by_slice(tok):
    long_text = "héllo wörld, 東京 " * (SLICE_TOKENS // 3)  # more than one slice of tokens
    texts = ["hello world", long_text, "a"]
    assert len(tok(long_text)["input_ids"]) > SLICE_TOKENS
    got = body_bytes(tei_tokenize_answer(tok, texts, "query: ", True, False, 64 << 20))
    want = [tei_tokens(tok, "query: " + t, True) for t in texts]
    assert orjson.loads(got) == want


def test_tokenize_answer_over_the_limit_is_refused(tok):
    with pytest.raises(EmbeddingError) as e:  # known from the token count, before any dict is built
        tei_tokenize_answer(tok, ["word " * 5000], "", True, False, 100_000)
    assert e.value.kind == ErrorKind.TOO_LARGE and "--max-response-bytes" in e.value.message
    with pytest.raises(EmbeddingError) as e:  # or as the rendered bytes pass it, input by input
        tei_tokenize_answer(tok, ["supercalifragilistic " * 50] * 20, "", True, False, 40_000)
    assert e.value.kind == ErrorKind.TOO_LARGE and "at input" in e.value.message
    tei_tokenize_answer(tok, ["word " * 100] * 3, "", True, False, 100_000)


def test_ids_work_is_bounded_by_inputs_and_total_ids():
    check_ids_work([[1, 2]] * 8, ARGS, 512, "ids")
    with pytest.raises(EmbeddingError) as e:
        check_ids_work([[1]] * 9, ARGS, 512, "ids")
    assert e.value.kind == ErrorKind.TOO_LARGE and "--max-client-batch-size" in e.value.message
    assert e.value.param == "ids"
    assert max_total_ids(ARGS, 512) == 8 * 512
    check_ids_work([[1] * 4096], ARGS, 512, "ids")
    with pytest.raises(EmbeddingError) as e:
        check_ids_work([[1] * 4097], ARGS, 512, "ids")
    assert e.value.kind == ErrorKind.TOO_LARGE and "4097 token ids" in e.value.message


def test_decode_all_checks_the_vocabulary(tok):
    assert orjson.loads(decode_all(tok, [[7592, 2088], [2088]], 30522, True, "ids")) == ["hello world", "world"]
    with pytest.raises(EmbeddingError) as e:
        decode_all(tok, [[7592], [30522]], 30522, True, "ids")
    assert e.value.kind == ErrorKind.INVALID_REQUEST and "30522" in e.value.message
