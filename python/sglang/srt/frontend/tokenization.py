"""Turn validated request inputs into token arrays, enforcing vocabulary and length limits."""

from __future__ import annotations

import copy
from typing import Optional

import numpy as np

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.chunking import ChunkPlan, Split, too_long_for_chunks
from sglang.srt.frontend.plain_encode import PlainEncoder
from sglang.srt.frontend.rerank_prompt_tokens import PromptedPairs, check_instruction
from sglang.srt.frontend.shared_inputs import (
    Bounded,
    SharedPrefix,
    SpecialLayout,
    check_request_tokens,
    check_shared,
    join_pairs,
    joins_by_ids,
    shares_query,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer
from sglang.srt.wire.io_struct import EmbeddingReqInput

TokenizedItem = tuple[np.ndarray, Optional[np.ndarray]]  # (input_ids, token_type_ids)


# Most clients that send token ids meant for another model are LangChain's OpenAIEmbeddings, which
# by default splits texts with tiktoken and sends OpenAI's ids.
TIKTOKEN_HINT = (
    "Token ids must come from this model's tokenizer; LangChain's OpenAIEmbeddings sends OpenAI (tiktoken) "
    "ids unless it is made with check_embedding_ctx_length=False, which sends the text."
)


def too_long_message(n: int, limit: int, index: Optional[int] = None) -> str:
    where = "" if index is None else f" at index {index}"
    return f"The input{where} ({n} tokens) is longer than the model's context length ({limit} tokens)."


class InputTokenizer:
    def __init__(self, server_args: ServerArgs, model_info: ModelInfo, tokenizer=None) -> None:
        self.tokenizer = tokenizer or load_tokenizer(
            server_args.tokenizer_path, server_args.trust_remote_code, server_args.tokenizer_class
        )
        self._left_tokenizer = None  # a copy cutting on the left, made when a request first asks for one
        self._plain = PlainEncoder.of(self.tokenizer)  # texts skip the HF wrapper's overhead (plain_encode.py)
        self.context_length = model_info.max_input_length
        self.vocab_size = model_info.vocab_size
        self.do_lower_case = model_info.do_lower_case
        self.truncate = server_args.allow_auto_truncate
        self.max_num_tokens = server_args.max_num_tokens
        self.max_request_tokens = server_args.max_request_tokens
        # --max-embed-len: inputs up to it are cut into chunks of at most a context (and a batch) each.
        self.chunks = (
            ChunkPlan(min(self.context_length, self.max_num_tokens), server_args.max_embed_len)
            if server_args.max_embed_len is not None
            else None
        )
        self._layout: Optional[SpecialLayout] = None  # the tokenizer's special tokens, probed on first use
        self._prompt_counts: dict[str, int] = {}
        self.pair_token_types = model_info.pair_token_types
        self.rerank_prompt = model_info.rerank_prompt  # LLM rerankers: pairs go in their prompt
        self.prompted = PromptedPairs(self.tokenizer, self.rerank_prompt) if self.rerank_prompt else None

    def tokenize(self, req: EmbeddingReqInput) -> list[TokenizedItem]:
        if req.batch_size == 0:
            raise EmbeddingError(ErrorKind.INVALID_REQUEST, "Input cannot be empty.", param="input")
        if req.text_pairs is not None:
            items = self.tokenize_pairs(req.text_pairs, req)
        elif req.text is not None:
            items = self._from_text(req.text, req)
        else:
            items = self._from_ids(req.input_ids, req)
        check_request_tokens(sum(len(ids) for ids, _ in items), self.max_request_tokens)
        chunk_len = self.chunks.chunk_len if self._chunked(req) else None
        for ids, _ in items:
            if len(ids) > self.max_num_tokens and chunk_len is None:
                raise EmbeddingError(
                    ErrorKind.INVALID_REQUEST,
                    f"The input ({len(ids)} tokens) is longer than the server's per-batch token budget "
                    f"(--max-num-tokens {self.max_num_tokens}).",
                    param="input",
                )
        return items

    # ----- the request's truncation settings -----
    def _truncates(self, req: Optional[EmbeddingReqInput]) -> bool:
        return self.truncate if req is None or req.truncate is None else req.truncate

    def _chunked(self, req: Optional[EmbeddingReqInput]) -> bool:
        """Whether inputs of `req` over the context are chunked (--max-embed-len, frontend/chunking.py)."""
        return self.chunks is not None and self.chunks.applies(req)

    def _input_limit(self, req: Optional[EmbeddingReqInput]) -> int:
        """The longest input `req` may send: the context length, or --max-embed-len when chunked."""
        return self.chunks.max_len if self._chunked(req) else self.context_length

    def _max_length(self, req: Optional[EmbeddingReqInput]) -> int:
        if req is None or req.max_tokens is None:
            return self._input_limit(req)
        return min(req.max_tokens, self._input_limit(req))

    def split(self, ids: np.ndarray, req: Optional[EmbeddingReqInput] = None) -> Split:
        """An input's ids and, when it is over the context and chunked, its chunks' lengths."""
        if not self._chunked(req) or len(ids) <= self.chunks.chunk_len:
            return ids, None
        plain = req is not None and req.input_ids is None and not req.add_special_tokens
        pre, post = ((), ()) if plain else (self.layout.pre, self.layout.post)
        return self.chunks.split(ids, pre, post)

    @property
    def layout(self) -> SpecialLayout:
        if self._layout is None:
            self._layout = SpecialLayout.probe(self.tokenizer)
        return self._layout

    def _limit_name(self, req: Optional[EmbeddingReqInput]) -> str:
        limit = self._max_length(req)
        if limit >= self._input_limit(req):
            return "server's --max-embed-len" if self._chunked(req) else "model's context length"
        return f"request's max_tokens={limit}"

    def _tokenizer_for(self, req: Optional[EmbeddingReqInput]):
        if req is None or req.truncation_side != "left":
            return self.tokenizer
        if self._left_tokenizer is None:
            left = copy.deepcopy(self.tokenizer)
            left.truncation_side = "left"
            self._left_tokenizer = left
        return self._left_tokenizer

    def _limit(self, ids, req: Optional[EmbeddingReqInput] = None, index: Optional[int] = None):
        """Ids within the request's limit: cut on its side when it truncates, else refused."""
        limit = self._max_length(req)
        if len(ids) <= limit:
            return ids
        if self._truncates(req):
            left = req is not None and req.truncation_side == "left"
            return ids[len(ids) - limit :] if left else ids[:limit]
        if limit < self._input_limit(req):  # a request's own max_tokens (Cohere's truncate NONE)
            where = "" if index is None else f" at index {index}"
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"The input{where} has {len(ids)} tokens, more than the request's max_tokens={limit}; "
                "allow truncation to cut it.",
                param="input",
            )
        if self._chunked(req):
            raise EmbeddingError(ErrorKind.INVALID_REQUEST, too_long_for_chunks(len(ids), limit, index), param="input")
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, too_long_message(len(ids), self.context_length, index), param="input"
        )

    def tokenize_truncated(self, texts: list[str], max_length: int, prompt: Optional[str] = None) -> list[list[int]]:
        """Validated texts (after `prompt`), tokenized and silently cut to `max_length` tokens
        (special tokens included): ColBERT's query and document lengths, which its checkpoints
        always apply. A prompt is checked and, when large, joined by ids (frontend/shared_inputs.py)."""
        self._check_texts(texts)
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        if prompt:
            prompt = prompt.lower() if self.do_lower_case else prompt
            if joins_by_ids(len(prompt), len(texts)):
                shared = SharedPrefix.of(self.tokenizer, prompt, window=max_length)
                pre, post = self.layout.pre, self.layout.post
                check_shared(
                    "prompt",
                    "prompt",
                    shared.tokens,
                    len(pre) + len(post),
                    len(texts),
                    max_length,
                    True,
                    self.max_request_tokens,
                    "length",
                )
                return [ids.tolist() for ids in shared.join(self.tokenizer, texts, pre, post, max_length, "right")]
            texts = [prompt + t for t in texts]
        enc = self.tokenizer(
            texts,
            add_special_tokens=True,
            truncation=True,
            max_length=max_length,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return [list(ids) for ids in enc["input_ids"]]

    def _check_texts(self, texts: list[str]) -> None:
        for i, t in enumerate(texts):
            where = "" if len(texts) == 1 else f" at index {i}"
            if not t or not t.strip():
                raise EmbeddingError(
                    ErrorKind.INVALID_REQUEST, f"Input{where} is empty or whitespace only.", param="input"
                )
            if not _is_utf8_encodable(t):  # JSON "\ud800" escapes decode to lone surrogates
                raise EmbeddingError(
                    ErrorKind.INVALID_REQUEST,
                    f"Input{where} is not valid Unicode (it holds a lone surrogate).",
                    param="input",
                )

    def _from_text(self, texts: list[str], req: Optional[EmbeddingReqInput] = None) -> list[TokenizedItem]:
        self._check_texts(texts)
        prompt = req.prompt if req is not None else None
        if prompt:
            joined = self._prompted_texts(texts, prompt, req)
            if joined is not None:
                return joined
            # sentence-transformers prepends the prompt to the text verbatim, then tokenizes
            texts = [prompt + t for t in texts]
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        truncate = self._truncates(req)
        special = req.add_special_tokens if req is not None else True
        max_length = self._max_length(req) if truncate else None
        # the side the wrapper would cut on: the request's "left", else the tokenizer's own setting
        left = req is not None and req.truncation_side == "left"
        side = "left" if left else getattr(self.tokenizer, "truncation_side", "right")
        ids_list = self._plain.encode(texts, special, max_length, side) if self._plain is not None else None
        if ids_list is None:  # not a transformers Rust tokenizer (or an unusual max_tokens): the wrapper
            ids_list = self._tokenizer_for(req)(
                texts,
                add_special_tokens=special,
                truncation=truncate,
                max_length=max_length,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
        index = (lambda i: i) if len(texts) > 1 else (lambda i: 0)
        return [(np.asarray(self._limit(ids, req, index(i)), dtype=np.int32), None) for i, ids in enumerate(ids_list)]

    def _prompted_texts(self, texts: list[str], prompt: str, req: EmbeddingReqInput) -> Optional[list[TokenizedItem]]:
        """The request's prompt, tokenized once and checked before its inputs; when its copies
        would be large the inputs are joined to it by ids (None: copy it into each text)."""
        if self.do_lower_case:
            prompt = prompt.lower()
        by_ids = joins_by_ids(len(prompt), len(texts))
        truncate, limit = self._truncates(req), self._max_length(req)
        shared = SharedPrefix.of(self.tokenizer, prompt, window=limit) if by_ids or len(prompt) > 4096 else None
        tokens = shared.tokens if shared is not None else self._prompt_tokens(prompt)
        pre, post = (self.layout.pre, self.layout.post) if req.add_special_tokens else ([], [])
        check_shared(
            "prompt",
            "prompt",
            tokens,
            len(pre) + len(post),
            len(texts),
            limit,
            truncate,
            self.max_request_tokens,
            self._limit_name(req),
            exact=shared is None or shared.exact,
        )
        if shared is None or (not by_ids and shared.exact):
            return None
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        joined = shared.join(self.tokenizer, texts, pre, post, limit if truncate else None, req.truncation_side)
        index = (lambda i: i) if len(texts) > 1 else (lambda i: 0)
        return [(np.asarray(self._limit(ids, req, index(i)), dtype=np.int32), None) for i, ids in enumerate(joined)]

    def _prompt_tokens(self, prompt: str) -> int:
        """Token count of a prompt short enough to copy (the server's prompts repeat: kept)."""
        n = self._prompt_counts.get(prompt)
        if n is None:
            n = len(self.tokenizer.encode(prompt, add_special_tokens=False))
            if len(prompt) <= 4096:
                if len(self._prompt_counts) >= 256:
                    self._prompt_counts.clear()
                self._prompt_counts[prompt] = n
        return n

    def _from_ids(self, batches: list[list[int]], req: Optional[EmbeddingReqInput] = None) -> list[TokenizedItem]:
        out = []
        for i, ids in enumerate(batches):
            where = "" if len(batches) == 1 else f" at index {i}"
            if not ids:
                raise EmbeddingError(ErrorKind.INVALID_REQUEST, f"Token-id input{where} is empty.", param="input")
            try:
                arr = np.asarray(ids, dtype=np.int64)
            except OverflowError:  # beyond int64 (and maybe too long to print)
                raise EmbeddingError(
                    ErrorKind.INVALID_REQUEST,
                    f"A token id{where} is outside the vocabulary [0, {self.vocab_size}).",
                    param="input",
                ) from None
            if arr.min() < 0 or arr.max() >= self.vocab_size:
                bad = int(arr[(arr < 0) | (arr >= self.vocab_size)][0])
                raise EmbeddingError(
                    ErrorKind.INVALID_REQUEST,
                    f"Token id {bad}{where} is outside the vocabulary [0, {self.vocab_size}). {TIKTOKEN_HINT}",
                    param="input",
                )
            out.append((self._limit(arr, req, i).astype(np.int32), None))
        return out

    def tokenize_pairs(
        self, pairs: list[tuple[str, str]], req: Optional[EmbeddingReqInput] = None
    ) -> list[TokenizedItem]:
        """(query, document) pairs for cross-encoders, joined as the model's tokenizer joins pairs
        ([CLS] q [SEP] d [SEP] with token types 0/1 for BERT; <s> q </s></s> d </s> for XLM-R),
        or in an LLM reranker's prompt (frontend/rerank_prompt_tokens.py) with the request's
        `instruction`. When the request truncates (--allow-auto-truncate, or its own `truncate`) an
        over-long pair loses the end of its document (the start, with truncation_side left; an LLM
        reranker's pair always loses the end, so that the prompt's suffix stays last)."""
        for i, pair in enumerate(pairs):
            for part, name, param in zip(pair, ("query", "document"), ("query", "documents")):
                if name == "query" and i > 0 and part is pairs[0][0]:
                    continue  # a shared query is checked once
                where = f" at index {i}" if name == "document" and len(pairs) > 1 else ""
                if not part or not part.strip():
                    raise EmbeddingError(
                        ErrorKind.INVALID_REQUEST, f"The {name}{where} is empty or whitespace only.", param=param
                    )
                if not _is_utf8_encodable(part):
                    raise EmbeddingError(
                        ErrorKind.INVALID_REQUEST,
                        f"The {name}{where} is not valid Unicode (it holds a lone surrogate).",
                        param=param,
                    )
        queries, docs = [p[0] for p in pairs], [p[1] for p in pairs]
        shared = shares_query(pairs)
        if self.do_lower_case:
            docs = [d.lower() for d in docs]
            queries = [queries[0].lower()] * len(queries) if shared else [q.lower() for q in queries]
        instruction = req.instruction if req is not None else None
        formatted = self.prompted is None or self.prompted.is_formatted(queries[:1] if shared else queries)
        check_instruction(self.rerank_prompt, instruction, formatted and self.prompted is not None)
        if shared:
            joined = self._shared_query_pairs(queries[0], docs, instruction, formatted, req)
            if joined is not None:
                return joined
        if not formatted:
            limit = self._max_length(req)
            ids = self.prompted.encode(queries, docs, instruction, limit, self._truncates(req))
            return [
                (np.asarray(self._limit(x, req, i if len(pairs) > 1 else 0), dtype=np.int32), None)
                for i, x in enumerate(ids)
            ]
        kwargs = dict(add_special_tokens=True, return_attention_mask=False, return_token_type_ids=self.pair_token_types)
        truncate = self._truncates(req)
        tokenizer = self._tokenizer_for(req)
        try:
            enc = tokenizer(
                queries,
                docs,
                truncation="only_second" if truncate else False,
                max_length=self._max_length(req) if truncate else None,
                **kwargs,
            )
        except Exception:  # the query alone is over the limit: _limit cuts (or refuses) below
            enc = tokenizer(queries, docs, **kwargs)
        types = enc.get("token_type_ids") if self.pair_token_types else None
        out = []
        for i, ids in enumerate(enc["input_ids"]):
            ids = self._limit(ids, req, i if len(pairs) > 1 else 0)
            tt = None
            if types is not None:  # cut as the ids were: on the left, the types of the kept end
                cut = len(types[i]) - len(ids) if req is not None and req.truncation_side == "left" else 0
                tt = np.asarray(types[i][cut : cut + len(ids)], dtype=np.int32)
            out.append((np.asarray(ids, dtype=np.int32), tt))
        return out

    def _shared_query_pairs(
        self, query: str, docs: list[str], instruction: Optional[str], formatted: bool, req: Optional[EmbeddingReqInput]
    ) -> Optional[list[TokenizedItem]]:
        """Pairs that share their query: the query (an LLM reranker's: with the instruction) is
        tokenized once and checked before the documents; when its copies would be large the
        documents are joined to it by ids (None: tokenize the pairs as they are)."""
        n, truncate, limit = len(docs), self._truncates(req), self._max_length(req)
        by_ids = joins_by_ids(len(query) + len(instruction or ""), n)
        index = (lambda i: i) if n > 1 else (lambda i: 0)
        what = "query and instruction" if instruction else "query"
        param = "instruction" if instruction and len(instruction) > len(query) else "query"
        if formatted:  # cross-encoder: the tokenizer's pair template around query and document
            layout = self.layout
            q = Bounded.of(self.tokenizer, query, window=limit)
            check_shared(
                what,
                param,
                q.tokens,
                layout.pair_extra,
                n,
                limit,
                truncate,
                self.max_request_tokens,
                self._limit_name(req),
                exact=q.whole,
            )
            if not by_ids and q.whole:
                return None
            side = req.truncation_side if req is not None else "right"
            joined = join_pairs(self.tokenizer, layout, q, docs, limit if truncate else None, side)
            out = []
            for i, (ids, tt) in enumerate(joined):
                ids = self._limit(ids, req, index(i))
                out.append((np.asarray(ids, dtype=np.int32), tt[: len(ids)] if self.pair_token_types else None))
            return out
        body = self.prompted.shared_body(query, instruction)
        if body is None:
            return None
        prefix, suffix = self.prompted.ends()
        room = self.prompted.room(limit)
        pre, post = self.layout.pre, self.layout.post
        shared = SharedPrefix.of(self.tokenizer, body, window=room)
        check_shared(
            what,
            param,
            shared.tokens,
            len(pre) + len(post) + len(prefix) + len(suffix),
            n,
            limit,
            truncate,
            self.max_request_tokens,
            self._limit_name(req),
            exact=shared.exact,
        )
        if not by_ids and shared.exact:
            return None
        joined = shared.join(self.tokenizer, docs, pre, post, room if truncate else None, "right")
        return [
            (np.asarray(self._limit(np.concatenate([prefix, ids, suffix]), req, index(i)), dtype=np.int32), None)
            for i, ids in enumerate(joined)
        ]


def _is_utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
