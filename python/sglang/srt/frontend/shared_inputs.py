"""Pieces a request shares across its inputs: a prompt / instruction before every text, a rerank
query beside every document, an LLM reranker's instruction and query before every document.

Copied into each input, a 100 KB prompt on 128 inputs made the tokenizer read 12.8 MB and hold
millions of tokens (issue #27). Here a shared piece is tokenized once and joined to each input by
token ids, and `work_chars` gives the tokenizer manager the size (shared piece x inputs included)
that decides whether a request is tokenized off the event loop. The up-front checks on the shared
piece itself (context length, --max-request-tokens) are InputTokenizer's (frontend/tokenization.py).

Joining by ids keeps the answer the string concatenation gives: the prefix is cut at a space
between two letters or digits near its end, its head tokenized once, its short tail re-tokenized
with each input, so any merge at the prefix / input boundary happens as it would in the whole text.
Pairs (cross-encoders) join their two sequences' ids with the tokenizer's own pair template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.wire.io_struct import EmbeddingReqInput

SPLIT_COPY_CHARS = 1 << 20  # copies of a shared piece beyond this many characters: joined by ids instead
TAIL_CHARS = 256  # how far from a prefix's end its cut point is looked for
WINDOW_CHARS_PER_TOKEN = 8  # a long shared piece is read this many characters per token needed from each end
PROBE = ("hello", "world")  # texts that probe a tokenizer's special-token layout


def shares_query(pairs: Sequence[tuple[str, str]]) -> bool:
    """Whether every pair has the same query (a rerank request's)."""
    return all(q is pairs[0][0] or q == pairs[0][0] for q, _ in pairs)


def shared_text(req: EmbeddingReqInput) -> str:
    """The longest text this request repeats for each input (empty when none)."""
    if req.text is not None and req.prompt:
        return req.prompt
    if req.text_pairs:
        query = req.text_pairs[0][0] if shares_query(req.text_pairs) else ""
        return query + (req.instruction or "")
    return ""


def work_chars(req: EmbeddingReqInput) -> int:
    """Characters the tokenizer would read if each input carried its own copy of the shared
    pieces, plus token ids: what decides whether tokenizing `req` goes off the event loop."""
    total = sum(len(t) for t in req.text) if req.text is not None else 0
    if req.input_ids is not None:
        total += sum(len(ids) for ids in req.input_ids)
    if req.text_pairs:
        total += sum(len(d) for _, d in req.text_pairs)
        if not shares_query(req.text_pairs):
            total += sum(len(q) for q, _ in req.text_pairs)
    return total + len(shared_text(req)) * req.batch_size


def joins_by_ids(shared_chars: int, n: int) -> bool:
    """Whether n copies of a shared piece are too many characters to copy into every input."""
    return shared_chars * n > SPLIT_COPY_CHARS


def _ids(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    enc = tokenizer(list(texts), add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False)
    return enc["input_ids"]


def _find(seq: list[int], sub: list[int], start: int = 0) -> int:
    for i in range(start, len(seq) - len(sub) + 1):
        if seq[i : i + len(sub)] == sub:
            return i
    raise ValueError("the probe's tokens are not in its encoding")


@dataclass(frozen=True)
class SpecialLayout:
    """Where a tokenizer puts its special tokens: single texts `pre + ids + post`; pairs
    `pair_pre + a + mid + b + pair_post`, with the token type of each part."""

    pre: list[int]
    post: list[int]
    pair_pre: list[int]
    mid: list[int]
    pair_post: list[int]
    types: tuple[list[int], int, list[int], int, list[int]]  # pair_pre, a, mid, b, pair_post

    @classmethod
    def probe(cls, tokenizer) -> "SpecialLayout":
        a, b = _ids(tokenizer, PROBE)
        single = tokenizer(PROBE[0], return_attention_mask=False)["input_ids"]
        i = _find(single, a)
        pair = tokenizer(PROBE[0], PROBE[1], return_attention_mask=False, return_token_type_ids=True)
        ids, tt = pair["input_ids"], pair.get("token_type_ids") or [0] * len(pair["input_ids"])
        ia = _find(ids, a)
        ib = _find(ids, b, ia + len(a))
        types = (tt[:ia], tt[ia], tt[ia + len(a) : ib], tt[ib], tt[ib + len(b) :])
        return cls(single[:i], single[i + len(a) :], ids[:ia], ids[ia + len(a) : ib], ids[ib + len(b) :], types)

    @property
    def pair_extra(self) -> int:
        return len(self.pair_pre) + len(self.mid) + len(self.pair_post)


@dataclass(frozen=True)
class Bounded:
    """A text's tokens (no special tokens), read at most `window` tokens' worth from each end when
    it is long: `front` and `back` are its first and last tokens (both all of them when `whole`),
    `tokens` the count (a lower bound unless `whole`)."""

    front: np.ndarray
    back: np.ndarray
    tokens: int
    whole: bool

    @classmethod
    def of(cls, tokenizer, text: str, window: Optional[int] = None) -> "Bounded":
        chars = None if window is None else WINDOW_CHARS_PER_TOKEN * window + TAIL_CHARS
        if chars is not None and len(text) > 3 * chars:
            front_cut, back_cut = _cut_before(text, chars), _cut_before(text, len(text) - chars)
            if 0 < front_cut < back_cut:
                front, back = (
                    np.asarray(x, dtype=np.int32) for x in _ids(tokenizer, [text[:front_cut], text[back_cut:]])
                )
                if len(front) >= window and len(back) >= window:
                    return cls(front, back, len(front) + len(back), False)
        ids = np.asarray(_ids(tokenizer, [text])[0] if text else [], dtype=np.int32)
        return cls(ids, ids, len(ids), True)


@dataclass(frozen=True)
class SharedPrefix:
    """A prefix tokenized once: `body` (its tokens up to the cut, read from both ends within
    `window` tokens when long), `tail` (the text after the cut, tokenized again with each input)
    and `tokens` (the whole prefix's count, no special tokens; a lower bound unless `exact`)."""

    body: Bounded
    tail: str
    tokens: int

    @property
    def exact(self) -> bool:
        return self.body.whole

    @classmethod
    def of(cls, tokenizer, text: str, window: Optional[int] = None) -> "SharedPrefix":
        cut = _cut_before(text, len(text) - 2, TAIL_CHARS)
        if cut == 0 and len(text) > TAIL_CHARS:
            cut = len(text)  # no safe cut near the end: joined as is (its last word and the input's stay apart)
        tail = text[cut:]
        tail_tokens = len(_ids(tokenizer, [tail])[0]) if tail else 0
        body = Bounded.of(tokenizer, text[:cut], window)
        return cls(body, tail, body.tokens + tail_tokens)

    def join(
        self, tokenizer, texts: Sequence[str], pre: list[int], post: list[int], max_length: Optional[int], side: str
    ) -> list[np.ndarray]:
        """`pre + tokens(prefix + text) + post` for each text, cut to `max_length` on `side`
        (None: not cut) without tokenizing the prefix again. A prefix read in windows must have
        been read with window >= max_length (and is always cut: it is longer than that)."""
        room = None if max_length is None else max(0, max_length - len(pre) - len(post))
        front, back = self.body.front, self.body.back
        if room is not None and side != "left" and len(front) >= room:
            one = np.concatenate([pre, front[:room], post]).astype(np.int32)
            return [one] * len(texts)  # the inputs are cut off whole: nothing of theirs to tokenize
        out = []
        for own in _ids(tokenizer, [self.tail + t for t in texts]):
            own = np.asarray(own, dtype=np.int32)
            if room is not None and self.body.tokens + len(own) > room:
                if side == "left":
                    keep = room - len(own)
                    body = own[len(own) - room :] if keep <= 0 else np.concatenate([back[len(back) - keep :], own])
                else:
                    body = np.concatenate([front, own[: room - len(front)]])
            else:
                body = np.concatenate([front, own])
            out.append(np.concatenate([pre, body, post]).astype(np.int32))
        return out


def _cut_before(text: str, pos: int, span: int = 4 * TAIL_CHARS) -> int:
    """The start of the last single space between two letters or digits at or before `pos` and
    within `span` characters of it (0: none): there every tokenizer's pre-tokenizer splits the
    same way whatever comes before or after."""
    for i in range(min(pos, len(text) - 2), max(0, pos - span) - 1, -1):
        if text[i] == " " and i > 0 and text[i - 1].isalnum() and text[i + 1].isalnum():
            return i
    return 0


def join_pairs(
    tokenizer,
    layout: SpecialLayout,
    query: Bounded,
    documents: Sequence[str],
    max_length: Optional[int],
    side: str,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, token types) of (query, document) pairs joined by the tokenizer's pair template, the
    query tokenized once (read in windows of at least `max_length` tokens when long). With
    `max_length` the document is cut on `side` (as truncation 'only_second' does); when the
    query leaves it no room the whole pair is cut on `side`."""
    t_pre, t_a, t_mid, t_b, t_post = layout.types
    room = None if max_length is None else max_length - query.tokens - layout.pair_extra
    fills = room is not None and room < 1  # the query leaves the document no room: the whole pair is cut
    q = query.back if fills and side == "left" else query.front  # a long query: only its ends matter
    if fills and side != "left" and len(layout.pair_pre) + len(q) >= max_length:
        # Nothing of the documents is kept: the same ids for each, built once, none tokenized.
        ids = np.concatenate([layout.pair_pre, q])[:max_length].astype(np.int32)
        types = np.concatenate([t_pre, np.full(len(q), t_a)])[:max_length].astype(np.int32)
        return [(ids, types)] * len(documents)
    if fills and side == "left":  # only the query's end can be kept
        q = q[max(0, len(q) - max_length) :]
    out = []
    for d in _ids(tokenizer, documents):
        d = np.asarray(d, dtype=np.int32)
        if room is not None and room >= 1 and len(d) > room:
            d = d[len(d) - room :] if side == "left" else d[:room]
        ids = np.concatenate([layout.pair_pre, q, layout.mid, d, layout.pair_post]).astype(np.int32)
        types = np.concatenate([t_pre, np.full(len(q), t_a), t_mid, np.full(len(d), t_b), t_post]).astype(np.int32)
        if fills and len(ids) > max_length:  # copies: a view would keep the whole pair alive
            keep = slice(len(ids) - max_length, None) if side == "left" else slice(0, max_length)
            ids, types = ids[keep].copy(), types[keep].copy()
        out.append((ids, types))
    return out


def check_shared(
    what: str,
    param: str,
    tokens: int,
    extra: int,
    n: int,
    limit: int,
    truncate: bool,
    budget: int,
    limit_name: str,
    exact: bool = True,
) -> None:
    """The up-front checks on a shared piece of `tokens` tokens (plus `extra` special / template
    tokens each input carries), before any input is tokenized: without truncation a piece that
    alone fills `limit` is refused once (400); the tokens its copies would carry across `n` inputs
    (cut at `limit` when truncating) must fit --max-request-tokens (413). A piece read in windows
    (`exact` false) has more than `tokens` tokens, which is more than `limit`."""
    whole = tokens + extra
    if not truncate and whole > limit:
        least = "" if exact else "at least "  # a long piece is read only as far as it takes to tell
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"The {what} alone ({least}{tokens} tokens, {least}{whole} with the model's special tokens) is longer "
            f"than the {limit_name} ({limit} tokens), so every input would be; shorten it or allow truncation.",
            param=param,
        )
    per_input = min(whole, limit) if truncate else whole
    check_request_tokens(per_input * n, budget, f" ({n} inputs x {per_input} tokens of the {what} each)")


def check_request_tokens(total: int, budget: int, detail: str = "") -> None:
    """413 when one request would send more than --max-request-tokens tokens to the model."""
    if total > budget:
        raise EmbeddingError(
            ErrorKind.TOO_LARGE,
            f"The request needs {total} tokens{detail}, more than this server takes in one request "
            f"(--max-request-tokens {budget}); split it.",
            param="input",
        )
