"""BERT's normalizer done in Python for ASCII text (bert_ascii.py): the same ids as the tokenizer's
own normalizer, and the full tokenizer wherever an added token could be in the text."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import normalizers

from sglang.srt.frontend.bert_ascii import AsciiBertNormalizer
from sglang.srt.frontend.plain_encode import PlainEncoder
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer
from sglang.srt.utils.off_loop import INLINE_WORK
from test.helpers.texts import load_texts
from test.helpers.tiny_models import build_bpe_tokenizer
from test.helpers.wrapper_ids import wrapper_ids

# Every ASCII character, letters and the characters the normalizer treats specially most often.
ASCII = st.text(
    st.one_of(
        st.characters(min_codepoint=0, max_codepoint=127),
        st.sampled_from("aZ \t\n\r\x0b\x0c\x00\x1f\x7f.,!?'-[]"),
    ),
    max_size=200,
)


def test_control_characters_go_whitespace_becomes_spaces_and_case_is_lowered(hf_tokenizer):
    ascii_ = AsciiBertNormalizer.of(hf_tokenizer._tokenizer)
    assert ascii_ is not None
    assert ascii_.normalize("Hello\tWorld\r\nA\x00B\x01C\x0bD\x0cE\x1fF\x7fG!") == "hello world  abcdefg!"


def test_text_the_full_tokenizer_must_read(hf_tokenizer):
    ascii_ = AsciiBertNormalizer.of(hf_tokenizer._tokenizer)
    assert ascii_.normalize("café") is None  # not ASCII: accents, Chinese characters, Unicode spaces
    assert ascii_.normalize("fill the [MASK] in") is None  # BERT's special tokens start with "["


def test_case_is_kept_when_the_normalizer_keeps_it(hf_tokenizer):
    backend = copy.deepcopy(hf_tokenizer._tokenizer)
    backend.normalizer = normalizers.BertNormalizer(lowercase=False, clean_text=False)
    assert AsciiBertNormalizer.of(backend).normalize("Hello\tWorld") == "Hello\tWorld"


def test_only_for_a_bert_normalizer(tmp_path):
    build_bpe_tokenizer(str(tmp_path))
    bpe = load_tokenizer(str(tmp_path), False)
    assert AsciiBertNormalizer.of(bpe._tokenizer) is None
    assert AsciiBertNormalizer.of(object()) is None


def test_the_corpus_takes_the_python_normalizer_and_gets_the_wrappers_ids(hf_tokenizer):
    texts = [t for t in load_texts() if t.isascii()]
    plain = PlainEncoder.of(hf_tokenizer)
    for i in range(0, len(texts), 16):  # requests small enough for the event loop ...
        assert plain.encode(texts[i : i + 16], True, None) == wrapper_ids(hf_tokenizer, texts[i : i + 16])
    assert plain._words is not None and len(plain._words._cache) > 1000  # ... go word by word (bert_words.py)


def test_a_request_for_a_worker_thread_keeps_the_rust_tokenizer(hf_tokenizer):
    """Over INLINE_WORK characters the request is tokenized off the event loop, where the Rust
    tokenizer (which releases the GIL) lets the loop run; the words' cache would hold the GIL."""
    texts = [t for t in load_texts() if t.isascii()]
    assert sum(map(len, texts)) > INLINE_WORK
    plain = PlainEncoder.of(hf_tokenizer)
    assert plain.encode(texts, True, None) == wrapper_ids(hf_tokenizer, texts)
    assert plain._words is not None and not plain._words._cache  # the cache was not read


@pytest.fixture(scope="module")
def shared_plain(hf_tokenizer):
    """One encoder for every example, as the server has: its words' cache fills as they run."""
    return PlainEncoder.of(hf_tokenizer)


@settings(max_examples=300, deadline=None)
@given(text=ASCII)
def test_any_ascii_text_gets_the_wrappers_ids(hf_tokenizer, shared_plain, text):
    plain = shared_plain
    assert plain.encode([text], True, None) == wrapper_ids(hf_tokenizer, [text])
    assert plain.encode([text], True, 8) == wrapper_ids(hf_tokenizer, [text], max_length=8)
    assert plain.encode([text], False, 5) == wrapper_ids(hf_tokenizer, [text], special=False, max_length=5)


def test_a_mixed_batch_keeps_its_order(hf_tokenizer):
    texts = ["plain words", "naïve café", "a [MASK] here", "UPPER case", "日本語", "tab\tand\nnewline"]
    plain = PlainEncoder.of(hf_tokenizer)
    assert plain.encode(texts, True, None) == wrapper_ids(hf_tokenizer, texts)


@pytest.mark.parametrize("added", ["madeupword", "Zebra", "<custom>"])
def test_added_tokens_are_found_as_the_tokenizer_finds_them(added):
    tok = load_tokenizer(ServerArgs().tokenizer_path, False)
    tok.add_tokens([added])
    texts = [f"a {added} b", f"A {added.upper()} b", f"a {added.lower()} b", "nothing added here"]
    plain = PlainEncoder.of(tok)
    assert plain.encode(texts, True, None) == wrapper_ids(tok, texts)
