"""A BERT tokenizer's ids word by word (bert_words.py): the Rust tokenizer's ids for normalized ASCII
text, with every truncation the server asks for, whatever the cache holds."""

from __future__ import annotations

import copy

import pytest
from tokenizers import normalizers, pre_tokenizers, processors

from sglang.srt.frontend import bert_words
from sglang.srt.frontend.bert_ascii import AsciiBertNormalizer
from sglang.srt.frontend.bert_words import BertWordIds
from sglang.srt.utils.hf_tokenizer import load_tokenizer
from test.helpers.texts import load_texts
from test.helpers.tiny_models import build_bpe_tokenizer, build_wordpiece_tokenizer

ODD = [
    "",
    "   ",
    "a",
    "hello, world!! (it's) 3.14 -- well...",
    'under_score back`tick {brace} a|b ~tilde^ x@y.z #1 $2 %3 &4 *5 +6 =7 <8> ?9 /0 \\ "q" ;:',
    "unknownish zzzqqq xylophonist supercalifragilisticexpialidocious",
    "x" * 150,  # longer than max_input_chars_per_word: one [UNK]
    "tab\tnew\nline\rcr\x0bvt\x0cff",
    "nul\x00in\x1fside\x7fword",  # kept only by a normalizer that does not clean
]


def rust(backend, text: str, special: bool, max_length=None, side: str = "right") -> list[int]:
    """The Rust tokenizer's ids for `text` with the truncation the server sets (copies kept per setting)."""
    key = (id(backend), max_length, side)
    if key not in _COPIES:
        own = copy.deepcopy(backend)
        own.no_padding()
        if max_length is None:
            own.no_truncation()
        else:
            own.enable_truncation(max_length, stride=0, strategy="longest_first", direction=side)
        _COPIES[key] = (backend, own)  # the backend kept alive, so its id is not reused
    return _COPIES[key][1].encode(text, add_special_tokens=special).ids


_COPIES: dict = {}


def words_of(backend) -> BertWordIds:
    plain = copy.deepcopy(backend)
    plain.no_padding()
    plain.no_truncation()
    plain.normalizer = None
    found = BertWordIds.of(plain)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def bundled(hf_tokenizer):
    """The bundled tokenizer's backend, its Python normalizer and its words' ids."""
    backend = hf_tokenizer._tokenizer
    return backend, AsciiBertNormalizer.of(backend), words_of(backend)


@pytest.mark.parametrize("special", [True, False])
@pytest.mark.parametrize("max_length", [None, 512, 16, 3])
@pytest.mark.parametrize("side", ["right", "left"])
def test_corpus_and_odd_texts_get_the_rust_ids(bundled, special, max_length, side):
    backend, ascii_, words = bundled
    texts = [t for t in load_texts()[:200] if t.isascii()] + ODD
    for text in texts:
        ready = ascii_.normalize(text)
        if ready is None:
            continue
        assert words.ids(ready, special, max_length, side) == rust(backend, text, special, max_length, side), text


def test_special_tokens_are_the_post_processors(bundled):
    _, _, words = bundled
    assert words.ids("a", True, None, "right") == [101, 1037, 102]  # [CLS] a [SEP] of all-MiniLM-L6-v2


def test_no_room_for_the_text_is_left_to_the_rust_tokenizer(bundled):
    _, _, words = bundled
    assert words.ids("some words", True, 2, "right") is None  # [CLS] and [SEP] fill it
    assert words.ids("some words", True, 3, "right") == [101, 2070, 102]
    assert words.ids("some words", False, 1, "left") == [2616]


def test_a_full_cache_starts_over_and_the_ids_stay_right(bundled, monkeypatch):
    backend, ascii_, _ = bundled
    monkeypatch.setattr(bert_words, "MAX_WORDS", 16)
    words = words_of(backend)
    for text in [t for t in load_texts()[:40] if t.isascii()]:
        assert words.ids(ascii_.normalize(text), True, None, "right") == rust(backend, text, True)
        assert len(words._cache) <= 16 or len(set(bert_words._WORDS.findall(ascii_.normalize(text)))) > 16


def test_a_word_seen_twice_in_one_text_is_learned_once(bundled):
    backend, _, _ = bundled
    words = words_of(backend)
    assert words.ids("zebra zebra, zebra", False, None, "right") == rust(backend, "zebra zebra, zebra", False)
    assert set(words._cache) == {"zebra", ","}


@pytest.mark.parametrize("clean_text", [True, False])
def test_normalizer_settings_and_other_special_tokens(tmp_path, clean_text):
    """A WordPiece tokenizer whose normalizer may keep control characters (they stay inside the
    regular expression's words; the Rust pre-tokenizer cuts them where it would), and a
    post-processor written as BertProcessing."""
    build_wordpiece_tokenizer(str(tmp_path))
    backend = load_tokenizer(str(tmp_path), False)._tokenizer
    backend.normalizer = normalizers.BertNormalizer(clean_text=clean_text, lowercase=True)
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    for post in (backend.post_processor, processors.BertProcessing(("[SEP]", sep_id), ("[CLS]", cls_id))):
        backend.post_processor = post
        ascii_, words = AsciiBertNormalizer.of(backend), words_of(backend)
        for text in ODD + ["The Cat and the DOG, one two three!", "river?mountain.city"]:
            ready = ascii_.normalize(text)
            if ready is not None:
                for special, max_length in ((True, None), (False, None), (True, 5)):
                    assert words.ids(ready, special, max_length, "right") == rust(backend, text, special, max_length)


def test_only_for_bert_pre_tokenizer_and_wordpiece(tmp_path, hf_tokenizer):
    build_bpe_tokenizer(str(tmp_path))
    assert BertWordIds.of(load_tokenizer(str(tmp_path), False)._tokenizer) is None
    other = copy.deepcopy(hf_tokenizer._tokenizer)
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    assert BertWordIds.of(other) is None
    other.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    other.no_padding()
    other.enable_truncation(16)
    assert BertWordIds.of(other) is None  # it truncates: the class truncates by itself
    other.no_truncation()
    other.enable_padding(length=16)
    assert BertWordIds.of(other) is None
    other.no_padding()
    assert BertWordIds.of(other) is not None
