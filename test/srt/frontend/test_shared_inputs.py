"""Shared pieces (prompt, rerank query, LLM-reranker instruction) tokenized once, checked before the
inputs and joined by ids: the answers the copying path gives, bounded work and the up-front refusals
(issue #27 item 2), on the bundled MiniLM (WordPiece) and the tiny reranker's byte-level BPE."""

from __future__ import annotations

import pytest

from sglang.srt.configs.llm_reranker import QWEN3_RERANKER
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend import shared_inputs
from sglang.srt.frontend.shared_inputs import SPLIT_COPY_CHARS, Bounded, work_chars
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info
from test.helpers.tiny_reranker import DOCUMENTS, QUERY, reranker_tokenizer

TEXTS = ["hello world", "a", "Big, bold: city!", "naïve café"]
PROMPTS = [
    "query: ",
    "Represent this sentence for searching relevant passages: ",
    "word " * 300,
    "the river" * 40,
    "The river, it runs. " * 150,  # 3,000 characters: read in windows from both ends at context 32
]
LONG = "Where does the river meet the city? Naïve café, 1,234 bridges; (big) words. " * 400


class CountingTokenizer:
    """Passes calls to a Hugging Face tokenizer, adding up the characters it is asked to read."""

    def __init__(self, tok) -> None:
        self.tok, self.chars = tok, 0

    def _count(self, texts) -> None:
        for t in [texts] if isinstance(texts, str) else texts:
            self.chars += len(t)

    def __call__(self, texts, *args, **kw):
        self._count(texts)
        if args:
            self._count(args[0])
        return self.tok(texts, *args, **kw)

    def encode(self, text, **kw):
        self._count(text)
        return self.tok.encode(text, **kw)

    def __len__(self) -> int:
        return len(self.tok)

    def __getattr__(self, name):
        return getattr(self.tok, name)


@pytest.fixture(scope="module")
def bpe_tokenizer():
    return reranker_tokenizer()


def _tok(hf, context=32, **kw) -> InputTokenizer:
    info = make_model_info(max_input_length=context, vocab_size=len(hf), pair_token_types=True)
    return InputTokenizer(ServerArgs(**kw), info, tokenizer=hf)


def _err(fn) -> EmbeddingError:
    with pytest.raises(EmbeddingError) as e:
        fn()
    return e.value


def _ids(items) -> list:
    return [(ids.tolist(), None if types is None else types.tolist()) for ids, types in items]


def _both_ways(monkeypatch, tok: InputTokenizer, req_fn) -> tuple[list, list]:
    """The request's tokens copying its shared piece, then joining it by ids."""
    copied = _ids(tok.tokenize(req_fn()))
    monkeypatch.setattr(shared_inputs, "SPLIT_COPY_CHARS", 0)
    joined = _ids(tok.tokenize(req_fn()))
    monkeypatch.setattr(shared_inputs, "SPLIT_COPY_CHARS", SPLIT_COPY_CHARS)
    return copied, joined


@pytest.mark.parametrize("which", ["wordpiece", "bpe"])
@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("truncate,side", [(True, "right"), (True, "left"), (None, "right")])
def test_joining_a_prompt_by_ids_gives_the_copied_tokens(
    monkeypatch, hf_tokenizer, bpe_tokenizer, which, prompt, truncate, side
):
    hf = hf_tokenizer if which == "wordpiece" else bpe_tokenizer
    context = 4096 if truncate is None else 32
    tok = _tok(hf, context=context)

    def req():
        return EmbeddingReqInput(text=list(TEXTS), prompt=prompt, truncate=truncate, truncation_side=side)

    copied, joined = _both_ways(monkeypatch, tok, req)
    assert joined == copied


def test_pairs_joined_by_ids_match_the_tokenizers_pairs(monkeypatch, hf_tokenizer):
    tok = _tok(hf_tokenizer, context=16)
    for truncate, side in [(True, "right"), (True, "left"), (False, "right")]:
        docs = ["big world", "the river runs through the city at night"] if truncate else ["big world", "a b"]

        def req():
            return EmbeddingReqInput(
                text_pairs=[("where is it", d) for d in docs], truncate=truncate, truncation_side=side
            )

        copied, joined = _both_ways(monkeypatch, tok, req)
        assert joined == copied and joined[0][1] is not None
    for query in ("where is the river " * 4, "where is the river " * 3 + "big"):  # fills the context (but 2)
        for side in ("right", "left"):

            def req():
                pairs = [(query, d) for d in ("big world", "a b c")]
                return EmbeddingReqInput(text_pairs=pairs, truncate=True, truncation_side=side)

            copied, joined = _both_ways(monkeypatch, tok, req)
            assert joined == copied and all(len(ids) == 16 == len(tt) for ids, tt in joined)


def test_llm_reranker_body_joined_by_ids_matches(monkeypatch, bpe_tokenizer):
    info = make_model_info(max_input_length=512, vocab_size=len(bpe_tokenizer), rerank_prompt=QWEN3_RERANKER)
    tok = InputTokenizer(ServerArgs(), info, tokenizer=bpe_tokenizer)
    for instruction in (None, "Given a question, find the passage about places"):

        def req():
            return EmbeddingReqInput(text_pairs=[(QUERY, d) for d in DOCUMENTS], instruction=instruction)

        copied, joined = _both_ways(monkeypatch, tok, req)
        assert joined == copied


def test_huge_prompt_with_truncation_reads_it_once(hf_tokenizer):
    counting = CountingTokenizer(hf_tokenizer)
    tok = _tok(counting, context=256)
    prompt, n = "word " * 20000, 128
    req = EmbeddingReqInput(text=["a"] * n, prompt=prompt, truncate=True, truncation_side="left")
    items = tok.tokenize(req)
    assert len(items) == n and all(len(ids) == 256 for ids, _ in items)
    assert items[0][0][-2:].tolist() == [1037, 102]  # "a" [SEP]: the input kept, the prompt's start cut
    assert counting.chars < 10_000  # its two ends (+ its short tail per input), not 128 x 100,000
    right = tok.tokenize(EmbeddingReqInput(text=["a"] * n, prompt=prompt, truncate=True))
    assert all(ids.tolist() == right[0][0].tolist() for ids, _ in right) and right[0][0][-1] == 102


def test_prompt_longer_than_the_context_is_refused_once(hf_tokenizer):
    counting = CountingTokenizer(hf_tokenizer)
    tok = _tok(counting, context=256)
    prompt = "word " * 20000
    with pytest.raises(EmbeddingError) as e:
        tok.tokenize(EmbeddingReqInput(text=["a"] * 128, prompt=prompt))
    assert e.value.kind == ErrorKind.INVALID_REQUEST and e.value.param == "prompt"
    assert "The prompt alone (at least 923 tokens, at least 925 with the model's special tokens)" in e.value.message
    assert "context length (256 tokens)" in e.value.message
    assert counting.chars < 10_000  # read from its ends only as far as it takes to tell; nothing per input
    e = _err(lambda: tok.tokenize(EmbeddingReqInput(text=["a"] * 128, prompt="word " * 300)))
    assert e.message.startswith("The prompt alone (300 tokens, 302 with the model's special tokens)")


def test_request_token_budget_is_413_naming_the_flag(hf_tokenizer):
    tok = _tok(hf_tokenizer, context=256, max_request_tokens=10_000)
    with pytest.raises(EmbeddingError) as e:
        tok.tokenize(EmbeddingReqInput(text=["a"] * 128, prompt="word " * 200, truncate=True))
    assert e.value.kind == ErrorKind.TOO_LARGE and "--max-request-tokens 10000" in e.value.message
    assert "128 inputs x 202 tokens of the prompt each" in e.value.message
    # Without a shared piece the inputs' own tokens count, after tokenizing.
    with pytest.raises(EmbeddingError) as e:
        tok.tokenize(EmbeddingReqInput(text=["word " * 100] * 101))
    assert e.value.kind == ErrorKind.TOO_LARGE and "needs 10302 tokens" in e.value.message
    assert len(tok.tokenize(EmbeddingReqInput(text=["word " * 100] * 98))) == 98


def test_rerank_query_longer_than_the_context_is_refused_once(hf_tokenizer):
    counting = CountingTokenizer(hf_tokenizer)
    tok = _tok(counting, context=512)
    query = "word " * 20000
    with pytest.raises(EmbeddingError) as e:
        tok.tokenize(EmbeddingReqInput(text_pairs=[(query, "a")] * 256))
    assert e.value.param == "query" and "The query alone (at least 1741 tokens, at least 1744 with" in e.value.message
    assert counting.chars < 20_000


def test_rerank_query_with_truncation_is_joined_and_bounded(hf_tokenizer):
    counting = CountingTokenizer(hf_tokenizer)
    tok = _tok(counting, context=512)
    query = "word " * 20000
    items = tok.tokenize(EmbeddingReqInput(text_pairs=[(query, "a")] * 256, truncate=True))
    assert len(items) == 256 and all(len(ids) == 512 and len(tt) == 512 for ids, tt in items)
    assert items[0][0][0] == 101 and set(items[0][1].tolist()) == {0}  # [CLS] and the query: cut on the right
    left = tok.tokenize(EmbeddingReqInput(text_pairs=[(query, "a")] * 256, truncate=True, truncation_side="left"))
    assert left[0][0][-3:].tolist() == [102, 1037, 102] and left[0][1][-2:].tolist() == [1, 1]  # [SEP] a [SEP]
    assert counting.chars < 30_000


def test_llm_reranker_instruction_over_the_context_is_refused_once(bpe_tokenizer):
    counting = CountingTokenizer(bpe_tokenizer)
    info = make_model_info(max_input_length=512, vocab_size=len(bpe_tokenizer), rerank_prompt=QWEN3_RERANKER)
    tok = InputTokenizer(ServerArgs(), info, tokenizer=counting)
    instruction = "search " * 20000
    with pytest.raises(EmbeddingError) as e:
        tok.tokenize(EmbeddingReqInput(text_pairs=[(QUERY, "a")] * 256, instruction=instruction))
    assert e.value.param == "instruction" and "The query and instruction alone (at least" in e.value.message
    assert counting.chars < 20_000


def test_work_chars_counts_the_shared_piece_per_input():
    assert work_chars(EmbeddingReqInput(text=["a"] * 128, prompt="word " * 20000)) == 128 + 128 * 100_000
    pairs = [("q" * 1000, "doc")] * 10
    assert work_chars(EmbeddingReqInput(text_pairs=pairs)) == 30 + 10 * 1000
    assert work_chars(EmbeddingReqInput(text_pairs=pairs, instruction="i" * 50)) == 30 + 10 * 1050
    assert work_chars(EmbeddingReqInput(text_pairs=[("x", "d"), ("yy", "d")])) == 5  # no shared query: each its own
    assert work_chars(EmbeddingReqInput(input_ids=[[1, 2, 3]])) == 3


def test_colbert_prompt_joined_by_ids_matches(monkeypatch, hf_tokenizer):
    tok = _tok(hf_tokenizer, context=512)
    for prompt in ("query: ", "word " * 300):
        copied = tok.tokenize_truncated(list(TEXTS), 31, prompt)
        monkeypatch.setattr(shared_inputs, "SPLIT_COPY_CHARS", 0)
        joined = tok.tokenize_truncated(list(TEXTS), 31, prompt)
        monkeypatch.setattr(shared_inputs, "SPLIT_COPY_CHARS", SPLIT_COPY_CHARS)
        assert joined == copied


@pytest.mark.parametrize("which", ["wordpiece", "bpe"])
@pytest.mark.parametrize("window", [16, 256])
def test_long_pieces_are_read_from_both_ends_as_the_whole_tokenizes(hf_tokenizer, bpe_tokenizer, which, window):
    hf = hf_tokenizer if which == "wordpiece" else bpe_tokenizer
    whole = hf.encode(LONG, add_special_tokens=False)
    b = Bounded.of(hf, LONG, window=window)
    assert not b.whole and len(b.front) >= window and len(b.back) >= window and b.tokens < len(whole)
    assert b.front.tolist() == whole[: len(b.front)] and b.back.tolist() == whole[len(whole) - len(b.back) :]
    assert Bounded.of(hf, LONG).front.tolist() == whole  # no window: the whole text
